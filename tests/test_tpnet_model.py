"""TPNet as a model family: configs name it and refuse bad values, each token's Gram matrix is the walk
vectors' (against ``WalkFeatures.products`` read directly), a batch's scores do not depend on the batch's own
edges, a state dict restores the same scores, and it learns a stream of repeated pairs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from streamgnn.errors import ConfigError
from streamgnn.events import EventBatch
from streamgnn.nn import TPNetConfig
from streamgnn.store import TemporalGraphStore
from streamgnn.train import DistContext, OnlineTrainer, TPNetLinkModel, TrainConfig
from streamgnn.train.config import model_config
from streamgnn.train.models import make_link_model, scoring_head
from streamgnn.train.protocol import Candidates, StepInput

SMALL = TPNetConfig(
    neighbors=4, time_dim=8, width=8, mixer_layers=1, walk_hops=2, walk_dim=16, walk_decay=0.01
)


def stream(n: int, seed: int) -> EventBatch:
    """Events over 30 nodes with many repeated pairs and tied times."""
    rng = np.random.default_rng(seed)
    t = np.sort(rng.integers(0, n // 3, n)).astype(np.float64)
    return EventBatch.from_columns(
        src=rng.integers(0, 30, n), dst=rng.integers(0, 30, n), t=t, eid=np.arange(n)
    )


def store_of(events: EventBatch) -> TemporalGraphStore:
    store = TemporalGraphStore()
    store.ingest(events)
    return store


def batch_of(store: TemporalGraphStore, events: EventBatch, neg: np.ndarray) -> tuple[StepInput, Candidates]:
    """``events`` as one batch queried at its first time (as ``query_time="batch"``), ranked against
    ``neg`` (external ids), every node already in ``store``."""
    n = len(events)
    src, dst = store.node_index(events.src), store.node_index(events.dst)
    batch = StepInput(src, dst, events.t, np.full(n, events.t[0]), 0, np.zeros(n, int), 0, 3)
    cand = store.node_index(neg.reshape(-1)).reshape(neg.shape)
    return batch, Candidates(cand, np.ones(neg.shape, bool), rank=True)


def model_on(store: TemporalGraphStore, weights: int = 0, config: TPNetConfig = SMALL) -> TPNetLinkModel:
    """A model on ``store``; ``weights`` seeds its weights (``TrainConfig.seed`` the walks' vectors)."""
    torch.manual_seed(weights)
    model = TPNetLinkModel(TrainConfig(model=config))
    model.attach(store)
    return model


def test_configs_name_it_and_refuse_bad_values():
    assert model_config({"variant": "tpnet"}) == TPNetConfig()
    built = make_link_model(
        TrainConfig(model=model_config({"variant": "tpnet"})), device="cpu", dist=DistContext()
    )
    assert isinstance(built, TPNetLinkModel) and built.out_dim == 172
    assert TrainConfig.from_checkpoint(TrainConfig(model=SMALL).to_dict()).model == SMALL
    assert "not from two served embeddings" in scoring_head(TrainConfig(model=SMALL), {})
    for bad in (
        {"neighbors": 0}, {"width": 2.5}, {"dropout": 1.0}, {"walk_decay": -1.0},
        {"walk_decay": float("inf")}, {"walk_clock": "days"}, {"edge_feature_dim": -1}, {"mask_padding": 1},
        {"walk_hops": True}, {"walk_ties": "yes"},
    ):  # fmt: skip
        with pytest.raises(ConfigError, match=f"TPNetConfig.{next(iter(bad))}"):
            TPNetConfig(**bad)
    with pytest.raises(ConfigError, match="one process only"):
        TPNetLinkModel(TrainConfig(model=SMALL), dist=DistContext(rank=0, world_size=2))


@pytest.mark.parametrize("ties", [False, True])
def test_each_token_carries_the_gram_matrix_of_its_neighbor_and_each_endpoint(ties):
    """Against ``WalkFeatures.products`` of (neighbor, endpoint): the walks before the query time, or with
    ``walk_ties`` those at it too (the query times here are event times: ties change the values)."""
    events = stream(300, seed=1)
    store = store_of(events)
    model = model_on(store, config=dataclasses.replace(SMALL, walk_ties=ties))
    rng = np.random.default_rng(2)
    a, b = rng.integers(0, store.num_nodes, 40), rng.integers(0, store.num_nodes, 40)
    t = rng.choice(events.t[100:], 40)
    nodes, pairs = model._read(a, b, t, 0, 0)
    tokens = model._tokens(nodes, pairs, 0, 40)
    m2 = 2 * (SMALL.walk_hops + 1)
    ids = np.stack([nodes.ids[pairs.a.numpy()], nodes.ids[pairs.b.numpy()]], 1)  # [p, side, k]
    real = ids >= 0
    w = ids.reshape(40, -1)
    tw = np.repeat(np.nextafter(t, np.inf) if ties else t, w.shape[1])
    other = np.repeat(t if ties else np.nextafter(t, np.inf), w.shape[1])
    walks = model.walks
    for anchor, x in enumerate((a, b)):
        x = np.repeat(x, w.shape[1])
        want = walks.products(store, w.reshape(-1), x, tw).reshape(40, 2, SMALL.neighbors, m2 * m2)
        not_it = walks.products(store, w.reshape(-1), x, other).reshape(40, 2, SMALL.neighbors, m2 * m2)
        got = tokens.gram[:, :, anchor].numpy()
        assert np.allclose(got[real], want[real], rtol=1e-5, atol=1e-6)
        assert not np.allclose(got[real], not_it[real], rtol=1e-5, atol=1e-6)
    assert real.sum() > 200 and tokens.mask.numpy().sum() == real.sum()


def test_a_batch_never_reaches_its_own_scores():
    events = stream(400, seed=3)
    batch_events = events.take(slice(300, 350))
    neg = np.random.default_rng(4).choice(np.unique(events.dst[:300]), (50, 3))
    before, with_batch = store_of(events.take(slice(0, 300))), store_of(events.take(slice(0, 350)))
    scores = []
    for store in (before, with_batch, store_of(events.take(slice(0, 200)))):
        model = model_on(store)
        batch, cand = batch_of(store, batch_events, neg)
        scores.append(model.score(model.prepare(batch, cand, None))[1])
    assert np.allclose(scores[0], scores[1], rtol=1e-5, atol=1e-6)  # the batch's own edges: no part
    assert not np.allclose(scores[0], scores[2], rtol=1e-3, atol=1e-4)  # earlier edges: part of every score


def test_a_state_dict_restores_the_same_scores():
    events = stream(400, seed=5)
    store = store_of(events.take(slice(0, 300)))
    neg = np.random.default_rng(6).choice(np.unique(events.dst[:300]), (50, 2))
    trained = model_on(store, weights=1)
    batch, cand = batch_of(store, events.take(slice(300, 350)), neg)
    trained.train(trained.prepare(batch, None, cand.neg[:, 0]), np.ones(50, bool), ())  # moves Adam's state
    fresh = model_on(store, weights=2)
    other = fresh.score(fresh.prepare(batch, cand, None))[1]
    fresh.load_state_dict(trained.state_dict())
    want = trained.score(trained.prepare(batch, cand, None))[1]
    assert np.array_equal(fresh.score(fresh.prepare(batch, cand, None))[1], want)
    assert not np.allclose(other, want)
    served = fresh.embed(batch.src[:5], float(batch.t[0]), -1, 0)
    assert served.shape == (5, SMALL.width) and np.array_equal(
        served, trained.embed(batch.src[:5], batch.t[0], -1, 0)
    )


@pytest.mark.parametrize("mask_padding", [True, False])
def test_it_learns_a_stream_of_repeated_pairs(mask_padding):
    rng = np.random.default_rng(7)
    pairs = rng.integers(0, 40, (30, 2))
    pairs[:, 1] += 40
    pick = rng.integers(0, 30, 1200)
    events = EventBatch.from_columns(
        src=pairs[pick, 0], dst=pairs[pick, 1], t=np.arange(1200.0), eid=np.arange(1200)
    )
    torch.set_num_threads(1)
    model = dataclasses.replace(SMALL, mask_padding=mask_padding, dropout=0.0)
    config = TrainConfig(
        model=model, batch_size=100, lr=3e-3, eval_negatives=0, serve_every=0, window_events=600
    )
    result = OnlineTrainer(config).fit(events.split(100), progress=False)
    assert result.windows[-1].ap > 0.8  # chance is 0.5; the first window starts untrained


def test_the_edges_features_reach_the_scores_and_a_store_of_another_width_is_refused():
    events = stream(300, seed=8)
    rng = np.random.default_rng(9)
    feats = [rng.normal(size=(300, 3)).astype(np.float32) for _ in range(2)]
    config = dataclasses.replace(SMALL, edge_feature_dim=3)
    scores = []
    for feat in feats:
        store = store_of(dataclasses.replace(events, features=feat).take(slice(0, 250)))
        model = model_on(store, config=config)
        batch, cand = batch_of(store, events.take(slice(250, 300)), events.dst[:50, None])
        scores.append(model.score(model.prepare(batch, cand, None))[0])
    assert np.isfinite(scores[0]).all() and not np.allclose(scores[0], scores[1])
    with pytest.raises(ConfigError, match="edge_feature_dim=3"):
        model_on(store)
