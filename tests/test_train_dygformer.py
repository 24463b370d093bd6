"""The DyGFormer-style model: its inputs are exactly the latest neighbors strictly before each query (against
a brute-force reading of the events, however the stream was cut into batches, nothing of a batch in its own
scores), it learns a repeated-pairs stream, a resumed run ends bit for bit where an uninterrupted one does,
and configs name it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from streamgnn.configs import from_dict
from streamgnn.errors import ConfigError
from streamgnn.events import EventBatch
from streamgnn.nn import DyGFormerConfig
from streamgnn.nn.dygformer import Sequences, cooccurrence
from streamgnn.store import TemporalGraphStore
from streamgnn.train import DyGFormerLinkModel, OnlineTrainer, TrainConfig
from streamgnn.train.config import ShardConfig, model_config

SMALL = DyGFormerConfig(sequence_length=6, patch_size=2, channel_dim=8, time_dim=8, embedding_dim=8)


def stream(n: int, seed: int, feat: bool = False) -> EventBatch:
    """Events over 30 nodes with many repeated pairs and tied times (ties keep arrival order)."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, 30, n)
    dst = rng.integers(0, 30, n)
    t = np.sort(rng.integers(0, n // 3, n)).astype(np.float64)
    features = rng.normal(size=(n, 3)).astype(np.float32) if feat else None
    return EventBatch.from_columns(src=src, dst=dst, t=t, eid=np.arange(n), features=features)


def brute_force(events: EventBatch, node, t: float, k: int) -> tuple[list, list, list]:
    """(neighbor, time gap, feature row) of the latest ``k`` events touching ``node`` strictly before ``t``,
    oldest first (arrival order breaks ties), then the node itself at gap 0. A self-loop is two neighbors
    (out and in), as in DyGLib's adjacency lists."""
    rows = [i for i in range(len(events)) if events.t[i] < t and node in (events.src[i], events.dst[i])]
    rows = [i for i in rows for _ in range(1 + (events.src[i] == events.dst[i]))]
    rows = rows[-k:] if k else []
    other = [int(events.dst[i] if events.src[i] == node else events.src[i]) for i in rows]
    return other + [node], [t - events.t[i] for i in rows] + [0.0], rows


def sequences_of(model: DyGFormerLinkModel, store: TemporalGraphStore, nodes, times) -> Sequences:
    return model._sequences(store.node_index(np.asarray(nodes)), np.asarray(times, np.float64), 0, 0)


@pytest.mark.parametrize("cuts", [[400], [1, 37, 100, 262], [199, 201]])
def test_sequences_are_the_latest_neighbors_before_the_query_however_the_stream_was_cut(cuts):
    events = stream(400, seed=1, feat=True)
    store = TemporalGraphStore()
    for lo, hi in zip([0, *cuts], [*cuts, 400], strict=False):
        store.ingest(events.take(slice(lo, hi)))
    cfg = dataclasses.replace(SMALL, edge_feature_dim=3)
    model = DyGFormerLinkModel(TrainConfig(model=cfg))
    model.attach(store)
    rng = np.random.default_rng(2)
    nodes = rng.choice(np.unique(events.src), 60)
    times = rng.integers(0, 140, 60).astype(np.float64)  # many equal to an event time: strictly before
    seqs = sequences_of(model, store, nodes, times)
    ext = store.external_ids(np.arange(store.num_nodes))
    k = cfg.sequence_length - 1
    for i, (node, t) in enumerate(zip(nodes, times, strict=True)):
        ids, gaps, rows = brute_force(events, node, t, k)
        real = seqs.mask[i].numpy()
        assert real.sum() == len(ids) and real[-len(ids) :].all()  # right-aligned, the node itself last
        got = seqs.ids[i].numpy()[real]
        assert ext[got].tolist() == ids
        assert np.allclose(seqs.dt[i].numpy()[real], gaps)
        want = np.vstack([events.features[rows], np.zeros((1, 3))])
        assert np.array_equal(seqs.edge_feat[i].numpy()[real], want.astype(np.float32))
        assert not seqs.edge_feat[i].numpy()[~real].any()


def test_cooccurrence_counts_each_token_in_both_sequences_by_brute_force():
    rng = np.random.default_rng(3)
    n, length = 50, 7
    ids = [torch.from_numpy(rng.integers(-1, 5, (n, length))) for _ in range(2)]
    masks = [torch.from_numpy(rng.random((n, length)) < 0.7) for _ in range(2)]
    a, b = (
        Sequences(ids[0], torch.zeros(n, length), masks[0]),
        Sequences(ids[1], torch.zeros(n, length), masks[1]),
    )
    got = cooccurrence(a, b).numpy()
    for i in range(n):
        for j in range(length):
            if not masks[0][i, j]:
                assert (got[i, j] == 0).all()
                continue
            x = int(ids[0][i, j])
            own = sum(int(ids[0][i, q]) == x for q in range(length) if masks[0][i, q]) if x >= 0 else 1
            other = sum(int(ids[1][i, q]) == x for q in range(length) if masks[1][i, q]) if x >= 0 else 0
            assert got[i, j].tolist() == [own, other]


class Recording(DyGFormerLinkModel):
    """Keeps, per step, the batch and what ``prepare`` read (before the store held the batch)."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.seen = []

    def prepare(self, batch, candidates, train_neg):
        prepared = super().prepare(batch, candidates, train_neg)
        self.seen.append(prepared)
        return prepared


def test_a_batch_never_reaches_its_own_inputs_in_the_online_loop():
    events = stream(600, seed=4)
    config = TrainConfig(model=SMALL, batch_size=50, eval_negatives=3, serve_every=0, baselines=())
    model = Recording(config)
    trainer = OnlineTrainer(config, link_model=model)
    trainer.fit(events.split(50), progress=False)
    k = SMALL.sequence_length - 1
    ext = trainer.store.external_ids(np.arange(trainer.store.num_nodes))
    checked = 0
    for prepared in model.seen:
        b = prepared.batch
        before = events.take(slice(0, 50 * b.step))  # the store held exactly these when prepare ran
        for i in range(len(b.rows))[::7]:
            node = int(ext[b.src[i]]) if b.src[i] >= 0 else None
            row = int(prepared.src[i])
            real = prepared.seqs.mask[row].numpy()
            if node is None:  # unknown yet: no neighbors, only itself
                assert real.sum() == 1
                continue
            ids, gaps, _ = brute_force(before, node, b.t_query[i], k)
            assert ext[prepared.seqs.ids[row].numpy()[real]].tolist() == ids
            assert np.allclose(prepared.seqs.dt[row].numpy()[real], gaps)
            checked += 1
    assert checked > 50


def test_it_learns_a_stream_of_repeated_pairs():
    rng = np.random.default_rng(5)
    pairs = rng.integers(0, 40, (30, 2))
    pairs[:, 1] += 40
    pick = rng.integers(0, 30, 1600)
    events = EventBatch.from_columns(
        src=pairs[pick, 0], dst=pairs[pick, 1], t=np.arange(1600.0), eid=np.arange(1600)
    )
    torch.set_num_threads(1)
    config = TrainConfig(
        model=SMALL, batch_size=100, lr=3e-3, eval_negatives=0, serve_every=0, window_events=800
    )
    result = OnlineTrainer(config).fit(events.split(100), progress=False)
    assert result.windows[-1].ap > 0.8  # chance is 0.5; the first window starts untrained


def test_a_resumed_run_ends_bit_for_bit_where_an_uninterrupted_one_does(tmp_path):
    events = stream(480, seed=6, feat=True)
    model = dataclasses.replace(SMALL, edge_feature_dim=3, dropout=0.2)  # dropout: the RNG must resume too
    torch.set_num_threads(1)

    def config(folder: str) -> TrainConfig:
        return TrainConfig(
            model=model, batch_size=40, lr=3e-3, seed=5, train_negatives="historical", eval_negatives=4,
            window_events=120, checkpoint_dir=str(tmp_path / folder), checkpoint_every=3,
        )  # fmt: skip

    whole = OnlineTrainer(config("whole"))
    ref = whole.fit(events.split(40), progress=False)
    OnlineTrainer(config("cut")).fit(events.split(40), max_events=200, progress=False)
    resumed = OnlineTrainer.resume(tmp_path / "cut")
    assert isinstance(resumed.link_model, DyGFormerLinkModel)
    assert resumed.steps == 5
    got = resumed.fit(events.split(40), progress=False)
    for key, value in whole.link_model.state_dict()["model"].items():
        assert torch.equal(value, resumed.link_model.state_dict()["model"][key]), key
    opt_a, opt_b = whole.optimizer.state_dict()["state"], resumed.optimizer.state_dict()["state"]
    assert all(torch.equal(opt_a[i]["exp_avg"], opt_b[i]["exp_avg"]) for i in opt_a)
    assert [w.ap for w in got.windows] == [w.ap for w in ref.windows]
    assert [w.mrr for w in got.windows] == [w.mrr for w in ref.windows]
    assert (
        resumed.table.dim == SMALL.embedding_dim
        and np.isfinite(resumed.table.embeddings(events.src[:5])).all()
    )


def test_configs_name_the_model_and_refuse_what_it_cannot_do():
    cfg = TrainConfig(model=SMALL)
    assert TrainConfig.from_checkpoint(cfg.to_dict()) == cfg  # as a checkpoint keeps it
    built = from_dict(TrainConfig, {"model": {"variant": "dygformer", "sequence_length": 8}}, "train")
    assert built.model == DyGFormerConfig(sequence_length=8)
    from streamgnn.benchmarks import quality  # (imports PyG: only this test pays for it)

    ours = quality.overrides(["model.variant=dygformer", "model.sequence_length=8"], "--ours")
    assert model_config(ours["model"]) == DyGFormerConfig(sequence_length=8)  # how bench quality builds it
    assert model_config({"variant": "tgat"}).variant == "tgat"
    with pytest.raises(ConfigError, match="multiple of patch_size"):
        DyGFormerConfig(sequence_length=6, patch_size=4)
    with pytest.raises(ConfigError, match="sequence_length must be an int >= 2"):
        DyGFormerConfig(sequence_length=1, patch_size=1)
    assert (
        TrainConfig(model=SMALL, sharding=ShardConfig()).sharding == ShardConfig()
    )  # (test_shard_dygformer)
    model = DyGFormerLinkModel(TrainConfig(model=SMALL))
    store = TemporalGraphStore()
    store.ingest(stream(10, seed=7, feat=True))
    with pytest.raises(ConfigError, match="edge_feature_dim=3"):
        model.attach(store)


@pytest.mark.parametrize("module", ["streamgnn.nn.dygformer", "streamgnn.train.dygformer_model"])
def test_module_examples_run(module):
    import doctest
    import importlib

    assert doctest.testmod(importlib.import_module(module)).failed == 0


def test_the_link_scorer_says_it_cannot_score_this_model_from_embeddings(tmp_path):
    """``/score`` reads two served embeddings; this model scores a pair from both ends' sequences, so the
    scorer answers by cosine and says why, rather than applying its predictor to inputs it never saw."""
    from streamgnn.serve.scoring import LinkScorer

    config = TrainConfig(model=SMALL, batch_size=40, checkpoint_dir=str(tmp_path), checkpoint_every=2)
    OnlineTrainer(config).fit(stream(160, seed=8).split(40), progress=False)
    z = np.random.default_rng(0).normal(size=(3, SMALL.embedding_dim)).astype(np.float32)
    scores, info = LinkScorer(tmp_path).score(z, z[::-1].copy(), [1, 2, 3], [3, 2, 1])
    assert info["scorer"] == "cosine" and "DyGFormerConfig" in info["why"] and info["checkpoint"]
    assert np.allclose(scores[1], 1.0)  # the middle row scores a vector against itself
