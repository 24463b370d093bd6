"""Every ``LinkModel`` meets the protocol the online loop relies on (as river's ``check_estimator`` checks
every estimator): each registered model family (``train.models.MODELS``: TGN, DyGFormer, TPNet) and both
EdgeBanks, driven through the protocol by hand (``step``), not through a trainer, so a model that only
works inside today's loop fails here. Checked: the methods, the shapes of scores and embeddings,
determinism, ``state_dict`` round-trips bit for bit (through ``torch.save``, as a checkpoint stores it),
``state``/``load_state`` rewind, ``reset_state`` forgets, and ``nbytes``' keys."""

from __future__ import annotations

import dataclasses
import io
import math

import numpy as np
import pytest
import torch

from streamgnn.errors import ConfigError
from streamgnn.events import EventBatch
from streamgnn.nn import DyGFormerConfig, TGNConfig, TPNetConfig
from streamgnn.store import TemporalGraphStore
from streamgnn.train import TrainConfig
from streamgnn.train.edgebank import EdgeBank
from streamgnn.train.models import MODELS, family, make_link_model
from streamgnn.train.protocol import Candidates, LinkModel, StepInput

SMALL = {
    TGNConfig: TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3, dropout=0.0),
    DyGFormerConfig: DyGFormerConfig(
        sequence_length=4, channel_dim=4, time_dim=4, embedding_dim=4, num_layers=1, dropout=0.0
    ),
    TPNetConfig: TPNetConfig(
        neighbors=3, time_dim=4, width=6, mixer_layers=1, dropout=0.0, walk_hops=1, walk_dim=8, walk_decay=0.1
    ),
}
BATCHES, BATCH, NODES, Q = 8, 24, 30, 3
TRAINER_PARTS = {"store", "index", "negatives"}  # what a sharded rank reports itself (ShardedTrainer.nbytes)


def registered(config_class: type):
    def make() -> LinkModel:
        return make_link_model(TrainConfig(model=SMALL[config_class], seed=3), device="cpu", dist=None)

    return make


def decayed_pairs() -> LinkModel:
    """TGN whose pair features also hold the time-decayed ones (``TGNConfig.pair_decayed``)."""
    config = TrainConfig(model=dataclasses.replace(SMALL[TGNConfig], pair_decayed=True), seed=3)
    return make_link_model(config, device="cpu", dist=None)


def relative_walks() -> LinkModel:
    """TGN whose pair features also hold the neighbors' relative walk products (``walk_neighbors``)."""
    config = TrainConfig(model=dataclasses.replace(SMALL[TGNConfig], walk_neighbors=3), seed=3)
    return make_link_model(config, device="cpu", dist=None)


def recency_ranks() -> LinkModel:
    """TGN whose pair features also hold the recency ranks (``TGNConfig.pair_recency``)."""
    config = TrainConfig(model=dataclasses.replace(SMALL[TGNConfig], pair_recency=4), seed=3)
    return make_link_model(config, device="cpu", dist=None)


FACTORIES = {
    **{cls.__name__: registered(cls) for cls in MODELS},
    "TGNConfig(pair_decayed)": decayed_pairs,
    "TGNConfig(walk_neighbors)": relative_walks,
    "TGNConfig(pair_recency)": recency_ranks,
    "EdgeBank": EdgeBank,
    "EdgeBank(window)": lambda: EdgeBank(window_ratio=0.5),
}


@pytest.fixture(params=sorted(FACTORIES))
def make(request):
    torch.manual_seed(0)
    return FACTORIES[request.param]


def test_every_registered_config_class_has_a_small_config_here():
    """A family registered without a conformance run here fails this (add it to ``SMALL``)."""
    assert set(MODELS) == set(SMALL)
    for cls in MODELS:
        assert family(TrainConfig(model=SMALL[cls])).model is type(registered(cls)())


def test_an_unregistered_model_config_is_refused_by_name():
    cfg = TrainConfig(model=SMALL[TGNConfig])
    object.__setattr__(cfg, "model", object())  # past TrainConfig's own check: the registry's refusal
    with pytest.raises(ConfigError, match="no model is registered for object"):
        family(cfg)


def stream(seed: int = 0) -> list[EventBatch]:
    rng = np.random.default_rng(seed)
    n = BATCHES * BATCH
    events = EventBatch.from_columns(
        src=rng.integers(0, NODES, n), dst=rng.integers(0, NODES, n), t=np.sort(rng.uniform(0, 100, n)),
        eid=np.arange(n),
    )  # fmt: skip
    return list(events.split(BATCH))  # batches of BATCH events


def step(model: LinkModel, store: TemporalGraphStore, batch: EventBatch, k: int, ingest: bool = True) -> dict:
    """One global batch through the protocol, in the loop's order; what the model returned. Without
    ``ingest``: scored only (nothing learned, nothing observed, the store left as it was)."""
    known = (lambda ext: store.node_index(ext, strict=False)) if store.num_nodes else None
    src, dst = (known(x) if known else np.full(len(x), -1, np.int64) for x in (batch.src, batch.dst))
    m = len(batch)
    view = StepInput(src, dst, batch.t.copy(), batch.t.copy(), store.num_nodes, np.zeros(m, np.int64), 0, k)
    rng = np.random.default_rng(k)
    top = max(store.num_nodes, 1)
    neg = np.where(rng.random((m, Q)) < 0.8, rng.integers(0, top, (m, Q)), -1) if store.num_nodes else None
    cand = Candidates(np.full((m, Q), -1) if neg is None else neg, np.ones((m, Q), bool), rank=True)
    train_neg = rng.integers(0, top, m) if ingest and model.trainable and store.num_nodes else None
    prepared = model.prepare(view, cand, train_neg)
    out = {}
    if ingest:
        store.ingest(batch)
    out["ap"], out["ranked"] = model.score(prepared)
    if model.trainable and train_neg is not None:
        out["loss"] = model.train(prepared, np.ones(m, bool), ())
    if ingest:
        model.observe(store.node_index(batch.src), store.node_index(batch.dst), batch.t, None)
    return out


def drive(
    model: LinkModel, batches: list[EventBatch], store: TemporalGraphStore | None = None, first: int = 0
):
    store = TemporalGraphStore() if store is None else store
    model.attach(store)
    return store, [step(model, store, b, first + k) for k, b in enumerate(batches)]


def test_the_protocol_and_its_shapes(make):
    model = make()
    assert isinstance(model, LinkModel)  # every method of the protocol
    assert isinstance(model.trainable, bool)
    assert model.out_dim is None or (isinstance(model.out_dim, int) and model.out_dim > 0)
    store, outs = drive(model, stream())
    for got in outs:
        n = len(got["ap"])
        assert n == BATCH and got["ap"].shape == (n, 2) and got["ranked"].shape == (n, 1 + Q)
        assert np.isfinite(got["ap"]).all() and np.isfinite(got["ranked"]).all()
        assert np.array_equal(got["ap"][:, 0], got["ranked"][:, 0])  # one positive score, both tables
        if "loss" in got:
            assert math.isfinite(got["loss"])
    assert ("loss" in outs[-1]) == model.trainable
    nodes = np.arange(5)
    if model.out_dim is None:
        with pytest.raises(ConfigError):
            model.embed(nodes, 101.0, store.num_nodes, BATCHES)
    else:
        emb = model.embed(nodes, 101.0, store.num_nodes, BATCHES)
        assert emb.shape == (5, model.out_dim) and emb.dtype == np.float32 and np.isfinite(emb).all()


def test_the_same_stream_gives_the_same_scores(make):
    torch.manual_seed(1)
    _, one = drive(make(), stream())
    torch.manual_seed(1)
    _, two = drive(make(), stream())
    for a, b in zip(one, two, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert np.array_equal(np.asarray(a[key]), np.asarray(b[key]), equal_nan=True), key


def test_embedded_is_what_embed_gives_the_scored_ends_before_the_batch(make):
    """``embedded``, asked before the batch is applied (as the step asks it for a labelled task's head), is
    None or each row's source then destination as ``embed`` gives them at the query time, from the state
    before the batch; and ``score`` after it scores as it does without it."""
    model = make()
    batches = stream()
    store, _ = drive(model, batches[:1])
    batch, k = batches[1], 1
    src, dst = (store.node_index(x, strict=False) for x in (batch.src, batch.dst))
    m, t0 = len(batch), float(batch.t.min())
    view = StepInput(src, dst, batch.t.copy(), np.full(m, t0), store.num_nodes, np.zeros(m, np.int64), 0, k)
    cand = Candidates(np.zeros((m, Q), np.int64), np.ones((m, Q), bool), rank=True)
    plain = model.score(model.prepare(view, cand, None))
    prepared = model.prepare(view, cand, None)
    z = model.embedded(prepared)
    ap, ranked = model.score(prepared)
    np.testing.assert_array_equal(ap, plain[0])
    np.testing.assert_array_equal(ranked, plain[1])
    if z is None:
        return
    assert z.dtype == np.float32 and z.shape == (2 * m, model.out_dim)
    ends = np.concatenate([src, dst])
    assert (ends < 0).any() and (ends >= 0).any()  # new nodes (the blank row) and known ones
    np.testing.assert_allclose(z, model.embed(ends, t0, store.num_nodes, k), rtol=1e-5, atol=1e-6)


def saved(state: dict) -> dict:
    """``state`` after a checkpoint's trip: ``torch.save`` to bytes and back (plain tensors and lists)."""
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def test_state_dict_round_trips_bit_for_bit(make):
    """A model restored from ``state_dict`` over the same store continues exactly as the one it came from."""
    batches = stream(5)
    half = BATCHES // 2
    model = make()
    store, _ = drive(model, batches[:half])
    state = saved(model.state_dict())
    twin_store = TemporalGraphStore()
    for b in batches[:half]:
        twin_store.ingest(b)
    twin = make()  # other initial weights (the seed moved on): only the state makes it the same
    twin.attach(twin_store)
    twin.load_state_dict(state)
    rng = torch.get_rng_state()
    _, cont = drive(model, batches[half:], store, first=half)
    torch.set_rng_state(rng)
    _, again = drive(twin, batches[half:], twin_store, first=half)
    for a, b in zip(cont, again, strict=True):
        for key in a:
            assert np.array_equal(np.asarray(a[key]), np.asarray(b[key]), equal_nan=True), key
    after, back = model.state_dict(), twin.state_dict()
    assert after.keys() == back.keys()


def probe(model: LinkModel, store: TemporalGraphStore, batch: EventBatch) -> np.ndarray:
    return step(model, store, batch, 99, ingest=False)["ranked"]


def test_state_rewinds_and_reset_state_forgets(make):
    """``load_state`` goes back to what the model remembered (over a store at the same point);
    ``reset_state`` leaves no stream behind: a model that forgot scores as a fresh one with its weights."""
    batches = stream(7)
    half = BATCHES // 2
    model = make()
    store, _ = drive(model, batches[:half])
    at_half = probe(model, store, batches[-1])
    remembered = model.state()
    for b in batches[half:-1]:  # the stream goes on (observed, not learned: parameters are not stream state)
        store.ingest(b)
        model.observe(store.node_index(b.src), store.node_index(b.dst), b.t, None)
    assert not np.array_equal(probe(model, store, batches[-1]), at_half)  # so the rewind has work to do
    rewound = TemporalGraphStore()
    for b in batches[:half]:
        rewound.ingest(b)
    model.attach(rewound)
    model.load_state(remembered)
    assert np.array_equal(probe(model, rewound, batches[-1]), at_half)

    model.reset_state()
    empty = TemporalGraphStore()
    model.attach(empty)
    fresh = make()
    fresh.load_state_dict(saved(model.state_dict()))
    fresh.reset_state()
    fresh.attach(TemporalGraphStore())
    assert np.array_equal(probe(model, empty, batches[0]), probe(fresh, TemporalGraphStore(), batches[0]))


def test_nbytes_names_the_model_own_parts(make):
    """Byte counts by part, ints >= 0, none under a part the trainer reports itself (a sharded rank's
    ``nbytes`` merges the model's into its own: a clash would overwrite the store's bytes)."""
    model = make()
    store = TemporalGraphStore()
    model.attach(store)
    before = model.nbytes()
    drive(model, stream(), store)
    after = model.nbytes()
    for parts in (before, after):
        assert all(isinstance(k, str) and isinstance(v, int) and v >= 0 for k, v in parts.items()), parts
        assert not set(parts) & TRAINER_PARTS
    assert set(before) == set(after)  # the parts a model reports do not come and go with the stream
    assert sum(after.values()) >= sum(before.values())
