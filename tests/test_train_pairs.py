"""The TGN whose link predictor reads pair features: online, offline (converged), checkpoints, baselines."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from test_train_resume import assert_same, trained_state

from streamgnn.errors import ConfigError
from streamgnn.events import EventBatch
from streamgnn.nn import TGNConfig
from streamgnn.train import ChronologicalSplit, OnlineTrainer, TrainConfig, fit_offline

torch.set_num_threads(1)


def drifting(n: int = 3000, users: int = 40, items: int = 400, seed: int = 0) -> EventBatch:
    """Each user returns to a current favourite item that changes every ~6 of its events, with 10% of its
    events on a random item: which item a user meets *now* is told by the pair's recent history alone.
    Items are uniformly popular, so a node's embedding cannot tell an old favourite from the new one."""
    rng = np.random.default_rng(seed)
    fav = rng.integers(0, items, users)
    src = rng.integers(0, users, n)
    dst = np.empty(n, np.int64)
    for i, u in enumerate(src):
        if rng.random() < 1 / 6:
            fav[u] = rng.integers(0, items)
        dst[i] = fav[u] if rng.random() < 0.9 else rng.integers(0, items)
    t = np.cumsum(rng.exponential(1.0, n))
    return EventBatch.from_columns(src=src, dst=dst + users, t=t, eid=np.arange(n))


def config(pairs: bool = True, endpoints: bool = False, walks: bool = False, **kw) -> TrainConfig:
    model = TGNConfig(
        memory_dim=16, time_dim=8, embedding_dim=16, num_neighbors=5, dropout=0.0, pair_features=pairs,
        pair_neighbors=5, pair_decays=(5.0, 50.0), pair_dim=8, pair_endpoints=endpoints, pair_walks=walks,
        walk_dim=8, walk_decays=(0.0, 0.1),
    )  # fmt: skip
    base = dict(model=model, batch_size=100, lr=3e-3, eval_negatives=10, window_events=1000)
    return TrainConfig(**{**base, **kw})


def test_beats_both_edgebanks_on_historical_negatives_where_pair_history_is_the_signal():
    """Historical negatives are old favourites: EdgeBank scores them as it scores the positive (a tie); the
    time since the pair's last event tells them apart."""
    cfg = config(eval_strategy="historical", train_negatives="historical")
    result = OnlineTrainer(cfg).fit(drifting().split(100), progress=False)
    last = result.windows[-1]
    for name in ("edgebank", "edgebank_tw"):
        bank = result.baseline_windows[name][-1]
        assert last.ap > bank.ap + 0.05, (name, last, bank)
        assert last.mrr > bank.mrr + 0.05, (name, last, bank)


def test_offline_trains_until_validation_stops_improving():
    events = drifting(2000)
    split = ChronologicalSplit.make(events, by_time=False, new_node_fraction=0.0)
    result = fit_offline(events, config(), epochs=6, patience=1, split=split)
    aps = result.val_ap_per_epoch
    assert result.epochs == len(aps) == len(result.train_loss) and 1 <= result.epochs <= 6
    assert result.best_epoch == 1 + int(np.argmax(aps))
    assert result.epochs == 6 or result.epochs == result.best_epoch + 1  # stopped one epoch past the best
    assert result.test.ap > 0.8 and result.test.ap > result.baselines["edgebank"]["test"].ap
    with pytest.raises(ConfigError, match="patience"):
        fit_offline(events, config(), patience=0, split=split)


@pytest.mark.parametrize("model", [{}, dict(endpoints=True), dict(walks=True)])
def test_checkpoint_resume_with_pair_features_is_bit_for_bit(tmp_path, model):
    """Walk features are a cache over the store: the resumed run rebuilds them from the restored store
    and goes on bit for bit."""
    events = drifting(1200)
    cfg = config(
        **model, checkpoint_dir=str(tmp_path / "run"), checkpoint_every=4, train_negatives="historical"
    )
    run = OnlineTrainer(cfg)
    run.fit(events.split(100), progress=False)
    want = trained_state(run)
    again = replace(cfg, checkpoint_dir=str(tmp_path / "again"))
    resumed = OnlineTrainer.resume(tmp_path / "run" / "ckpt-000008", config=again)
    resumed.fit(events.split(100), progress=False)
    assert resumed.steps == run.steps == 12
    assert_same(trained_state(resumed), want)


def test_sharded_training_runs_the_default_model_and_its_pair_features_tell_old_favourites_apart(caplog):
    """A default config with ``sharding`` set is taken as it is (the model reads every pair feature there
    too, the walk features included, without a warning), and on a stream where only the pair's recent
    history tells an old favourite (a historical negative) from the current one, the sharded trainer's
    pair features lift its AP well above TGN alone's."""
    from streamgnn.shard import PartitionedReplay, ShardConfig, ShardedTrainer

    assert TrainConfig().model.pair_walks
    with caplog.at_level("WARNING", logger="streamgnn.train.config"):
        sharded = TrainConfig(sharding=ShardConfig()).model
    assert sharded.pair_features and sharded.pair_walks and not caplog.text
    events, ap = drifting(1500), {}
    for pairs in (True, False):
        cfg = config(pairs, endpoints=True, eval_strategy="historical", train_negatives="historical")
        trainer = ShardedTrainer(replace(cfg, sharding=ShardConfig(num_partitions=2)))
        ap[pairs] = trainer.fit(PartitionedReplay(events, trainer.ownership), progress=False).windows[-1].ap
    assert ap[True] > ap[False] + 0.05, ap


def test_pair_settings_round_trip_through_json_and_bad_ones_are_refused():
    import json

    for cfg in (config(), config(endpoints=True), config(walks=True)):
        assert TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    for bad in (
        dict(pair_neighbors=0),
        dict(pair_dim=0),
        dict(pair_decays=(0.0,)),
        dict(pair_decays=(np.inf,)),
    ):
        with pytest.raises(ConfigError, match="pair_"):
            TGNConfig(**bad)
    for bad in (dict(walk_dim=0), dict(walk_hops=0), dict(walk_decays=()), dict(walk_decays=(-0.1,))):
        with pytest.raises(ConfigError, match="walk_"):
            TGNConfig(**bad)


def test_ranking_with_pair_vectors_equals_scoring_each_pair():
    from streamgnn.nn import LinkPredictor

    torch.manual_seed(0)
    head = LinkPredictor(6, pair_dim=4)
    z_src, z = torch.randn(3, 6), torch.randn(5, 6)
    index, vectors = torch.randint(0, 5, (3, 2)), torch.randn(4, 4)
    rows = torch.tensor([[0, 3], [3, 1], [2, 0]])  # each pair's vector among the distinct ones
    pair = vectors[rows]
    each = head(z_src.repeat_interleave(2, 0), z[index.reshape(-1)], pair.reshape(6, 4)).view(3, 2)
    torch.testing.assert_close(head.candidates(z_src, z, index, vectors, rows), each)
    with pytest.raises(ConfigError, match="pair vectors"):
        head.candidates(z_src, z, index)


def test_endpoint_gaps_read_the_store_the_same_however_the_stream_was_batched():
    from streamgnn.nn.pairs import PairEncoder
    from streamgnn.sampling.pairs import PairFeatures
    from streamgnn.store import TemporalGraphStore

    events = drifting(600, users=10, items=30)
    model = TGNConfig(pair_neighbors=5, pair_decays=(5.0, 50.0), pair_dim=8, pair_endpoints=True)
    torch.manual_seed(0)
    encoder = PairEncoder.of(model)
    src, dst, t = events.src[-50:], events.dst[-50:], events.t[-50:]
    vectors = []
    for parts in (1, 7):
        store = TemporalGraphStore()
        for chunk in events.split(-(-len(events) // parts)):
            store.ingest(chunk)
        pairs = PairFeatures.of(store, model)
        u, v = store.node_index(src), store.node_index(dst)
        vectors.append(encoder(*(torch.from_numpy(x) for x in pairs.read(u, v, t))))
    torch.testing.assert_close(vectors[0], vectors[1], rtol=0, atol=0)


def test_endpoint_gaps_reach_the_logits():
    """With ``pair_endpoints``, how long each endpoint has been quiet (with anyone) is an input: two pairs
    alike but for it score differently, and a node never seen is told apart by its flag."""
    from streamgnn.nn import LinkPredictor
    from streamgnn.nn.pairs import PairEncoder

    torch.manual_seed(0)
    model = TGNConfig(pair_decays=(5.0,), pair_neighbors=4, pair_dim=8, pair_endpoints=True, pair_walks=False)
    encoder = PairEncoder.of(model)
    pair = [0.0, 0.0, np.inf, np.inf, 0.0]
    history = torch.tensor([pair + [1.0, 2.0], pair + [1.0, 5e4], pair + [1.0, np.inf]], dtype=torch.float64)
    vectors = encoder(history, torch.zeros(3, 2, 4, 2))
    assert torch.isfinite(vectors).all()
    logits = LinkPredictor(6, pair_dim=encoder.out_dim)(torch.ones(3, 6), torch.ones(3, 6), vectors)
    assert len(set(logits.tolist())) == 3, logits


def test_a_checkpoint_from_before_endpoint_gaps_loads_as_it_was_written():
    """Checkpoints written before ``pair_endpoints`` existed name no such key: they load without the two
    columns (their encoder's weights fit), where a new config takes the default and reads them."""
    from streamgnn.nn import TGN

    saved = config(endpoints=False).to_dict()
    del saved["model"]["pair_endpoints"]
    old = TrainConfig.from_checkpoint(saved)
    assert old.model.pair_endpoints is False and TGNConfig().pair_endpoints is True
    written = TGN(config(endpoints=False).model).state_dict()
    TGN(old.model).load_state_dict(written)  # strict: every shape as written
    with pytest.raises(RuntimeError, match="size mismatch"):
        TGN(config(endpoints=True).model).load_state_dict(written)


def test_walk_products_reach_the_logits():
    """With ``pair_walks``, the walk products are an input: two pairs alike but for them score
    differently (and a sign flip is not lost to the scaling)."""
    from streamgnn.nn import LinkPredictor
    from streamgnn.nn.pairs import PairEncoder

    torch.manual_seed(0)
    model = config(walks=True).model
    encoder = PairEncoder.of(model)
    history = torch.tensor([[1.0, 0.0, 3.0, np.inf, 0.5, 0.5]] * 3, dtype=torch.float64)
    walk = torch.zeros(3, len(model.walk_decays), 6, 6, dtype=torch.float64)
    walk[1, :, 1, 4], walk[2, :, 1, 4] = 40.0, -40.0
    vectors = encoder(history, torch.zeros(3, 2, 5, 2), walk)
    logits = LinkPredictor(6, pair_dim=encoder.out_dim)(torch.ones(3, 6), torch.ones(3, 6), vectors)
    assert len(set(logits.tolist())) == 3, logits


def test_a_new_pass_over_the_stream_forgets_the_walks():
    """``reset_state`` (each offline epoch) drops the walk state: a model that read a long stream and is
    then attached to a store holding its first part reads the features a fresh model reads there."""
    from streamgnn.store import TemporalGraphStore
    from streamgnn.train.tgn_model import TGNLinkModel

    events = drifting(400, users=10, items=30)
    full, part = TemporalGraphStore(), TemporalGraphStore()
    full.ingest(events)
    part.ingest(events.take(np.arange(200)))
    used, fresh = TGNLinkModel(config(walks=True)), TGNLinkModel(config(walks=True))
    u, v, t = full.node_index(events.src[:50]), full.node_index(events.dst[:50]), np.full(50, 1e9)
    used.attach(full)
    before = used.pairs.walk(u, v, t)
    used.reset_state()
    used.attach(part)
    fresh.attach(part)
    after = used.pairs.walk(u, v, t)
    np.testing.assert_array_equal(after, fresh.pairs.walk(u, v, t))
    assert np.abs(before - after).max() > 1.0  # the longer stream's walks are gone


def test_a_checkpoint_from_before_walk_features_loads_with_them_off():
    from streamgnn.nn import TGN

    saved = config().to_dict()
    for key in ("pair_walks", "walk_hops", "walk_dim", "walk_decays"):
        del saved["model"][key]
    old = TrainConfig.from_checkpoint(saved)
    assert old.model.pair_walks is False
    TGN(old.model).load_state_dict(TGN(config().model).state_dict())  # strict: every shape as written


def test_a_scorer_keeps_its_walk_state_across_checkpoints_and_scores_as_the_model(tmp_path):
    """``/score``'s scorer computes walk features at query time over the trainer's store; a new checkpoint
    changes the weights, not the walk state, so it is kept (no replay of the store) and the scores still
    equal the checkpointed model's on fresh features."""
    import math

    from streamgnn.sampling.pairs import PairFeatures
    from streamgnn.serve.scoring import LinkScorer

    events = drifting(600, users=10, items=30)
    cfg = config(walks=True, checkpoint_dir=str(tmp_path), checkpoint_every=1)
    trainer = OnlineTrainer(cfg)
    trainer.fit(events.take(np.arange(300)).split(100), progress=False)
    scorer = LinkScorer(tmp_path, trainer.store)
    z = np.random.default_rng(0).standard_normal((2, trainer.model.out_dim)).astype(np.float32)
    src, dst = events.src[:2], events.dst[:2]
    scorer.score(z[:1], z[1:], src[:1], dst[:1])
    walks, first = scorer._loaded.pairs.walks, scorer._loaded.step
    trainer.fit(events.take(np.arange(300, 600)).split(100), progress=False)
    flipped = z[::-1].copy()
    got, info = scorer.score(z, flipped, src, dst)
    assert info["checkpoint"] == scorer._loaded.step != first  # a new checkpoint, the same walk state
    assert scorer._loaded.pairs.walks is walks
    store, tgn = trainer.store, trainer.model
    t = float(np.nextafter(store.watermark, math.inf))
    raw = PairFeatures.of(store, cfg.model).read(store.node_index(src), store.node_index(dst), t)
    tgn.eval()
    with torch.no_grad():
        pair = tgn.pair_encoder(*(torch.from_numpy(x) for x in raw))
        want = torch.sigmoid(tgn.predictor(torch.from_numpy(z), torch.from_numpy(flipped), pair))
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5)
