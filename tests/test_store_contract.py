"""The store contract: samplers read a store only through ``GraphStore``/``FeatureStore``, so any object
that keeps the contract is sampled exactly like a ``TemporalGraphStore``; views last until the next ingest."""

from __future__ import annotations

import numpy as np
import pytest

from streamgnn import EventBatch
from streamgnn.errors import ConfigError
from streamgnn.sampling import TemporalSampler
from streamgnn.store import FeatureStore, GraphStore, TemporalGraphStore


class ContractOnly:
    """Only the contract's members, over another store's views: no ``pool``, ``start`` or ``edge_feat``."""

    def __init__(self, store: TemporalGraphStore) -> None:
        self._view, self._features, self._store = store.view(), store.feature_view(), store
        self.num_nodes = store.num_nodes
        self.edge_feature_dim, self.node_feature_dim = store.edge_feature_dim, store.node_feature_dim

    def view(self):
        return self._view

    def feature_view(self):
        return self._features

    def node_features_internal(self, nodes, t):
        return self._store.node_features_internal(nodes, t)


def _stream(n: int = 400, seed: int = 0) -> EventBatch:
    rng = np.random.default_rng(seed)
    kind = np.where(rng.random(n) < 0.1, 2, 0).astype(np.int8)  # some node-feature updates
    return EventBatch.from_columns(
        kind=kind,
        src=rng.integers(0, 40, n),
        dst=rng.integers(0, 40, n),
        t=np.sort(rng.integers(0, 100, n)).astype(np.float64),
        eid=np.arange(n),
        features=rng.normal(size=(n, 3)).astype(np.float32),
    )


def test_a_store_keeps_the_contract_and_its_views_last_until_the_next_ingest():
    store = TemporalGraphStore()
    assert isinstance(store, GraphStore) and isinstance(store, FeatureStore)
    events = _stream()
    store.ingest(events[:200])
    view, features = store.view(), store.feature_view()
    assert store.view() is view and store.feature_view() is features
    assert view.num_edges == store.num_edges and view.watermark == store.watermark
    assert view.kernel_args[:5] == (store.start, store.deg, store.pool, store.edge_t, store.edge_del)
    store.ingest(events[200:])
    assert store.view() is not view and store.view().num_edges == store.num_edges > view.num_edges
    roots = np.arange(store.num_nodes)
    every = TemporalSampler(store, fanouts=(-1,)).sample(roots, np.inf).hops[0]
    assert set(every.eid.tolist()) == set(range(store.num_edges))  # the edges of the second ingest too


@pytest.mark.parametrize(
    "config",
    [
        dict(fanouts=(5,)),
        dict(fanouts=(4, 3), strategy="uniform", seed=7, edge_features=True, node_features=True),
        dict(fanouts=(-1,), direction="in", window=30.0, edge_features=True),
    ],
)
def test_the_sampler_reads_only_the_contract(config):
    store = TemporalGraphStore()
    store.ingest(_stream())
    rng = np.random.default_rng(1)
    roots = rng.integers(-1, store.num_nodes + 1, 300)
    t = rng.uniform(0, 110, 300)
    want = TemporalSampler(store, **config).sample(roots, t)
    got = TemporalSampler(ContractOnly(store), **config).sample(roots, t)
    for a, b in zip(want.hops, got.hops, strict=True):
        for name in ("ptr", "nbr", "eid", "t", "dt", "edge_features", "node_features"):
            x, y = getattr(a, name), getattr(b, name)
            assert (x is None and y is None) or np.array_equal(x, y), name
    if want.root_node_features is not None:
        assert np.array_equal(want.root_node_features, got.root_node_features)


def test_a_sampler_refuses_what_is_not_a_store():
    with pytest.raises(ConfigError, match="GraphStore"):
        TemporalSampler(object())

    class GraphOnly:
        num_nodes = 0

        def view(self):
            return TemporalGraphStore().view()

    with pytest.raises(ConfigError, match="FeatureStore"):
        TemporalSampler(GraphOnly(), edge_features=True).sample([0], 1.0)
