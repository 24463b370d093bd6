"""Snapshots as PGT signals: the type follows what changes, PGT's split and recurrent layers take them,
and targets are what they say (lags as PGT's loaders, next links with our negatives)."""

import numpy as np
import pytest
import torch
from torch_geometric_temporal.nn import recurrent as R
from torch_geometric_temporal.signal import (
    DynamicGraphStaticSignal,
    DynamicGraphTemporalSignal,
    StaticGraphTemporalSignal,
    temporal_signal_split,
)

from streamgnn.datasets import pgt
from streamgnn.errors import ConfigError, SnapshotError
from streamgnn.events import EventBatch, EventKind
from streamgnn.snapshots import NextLinks, NodeTarget, SnapshotBuilder, SnapshotSpec, build_signal
from streamgnn.store import TemporalGraphStore

ADD, UPD = int(EventKind.EDGE_ADD), int(EventKind.NODE_UPDATE)


def chickenpox_store() -> TemporalGraphStore:
    store = TemporalGraphStore()
    store.ingest(pgt.series_events("chickenpox"))
    return store


def test_chickenpox_through_the_store_is_pgts_signal():
    ours = build_signal(
        chickenpox_store(), SnapshotSpec(every=1.0, start=0.0), target=NodeTarget(lags=4), until=520.0
    )
    theirs = pgt.chickenpox(lags=4)
    assert type(ours) is StaticGraphTemporalSignal and ours.snapshot_count == theirs.snapshot_count == 517
    assert np.array_equal(ours.edge_index, theirs.edge_index)
    assert np.array_equal(ours.edge_weight, theirs.edge_weight)
    for key in ("features", "targets"):
        for a, b in zip(getattr(ours, key), getattr(theirs, key), strict=True):
            assert np.array_equal(a, b.astype(np.float32)), key
    assert ours.node_ids.tolist() == list(range(20))


def small_store(
    static_edges: bool, static_features: bool, n: int = 8, periods: int = 6
) -> TemporalGraphStore:
    """``n`` nodes, ``periods`` periods; edges once or new each period, features once or each period."""
    rng = np.random.default_rng(0)
    rows, feats = [], []
    for p in range(periods):
        if p == 0 or not static_features:
            for v in range(n):
                rows.append((UPD, v, v, float(p)))
                feats.append([v + (0 if static_features else p), 1.0])
        if p == 0 or not static_edges:
            for _ in range(2 * n):
                rows.append((ADD, int(rng.integers(n)), int(rng.integers(n)), p + 0.5))
                feats.append([0.0, 0.0])
    kind, src, dst, t = (np.array(c) for c in zip(*rows, strict=True))
    store = TemporalGraphStore()
    store.ingest(EventBatch.from_columns(kind=kind, src=src, dst=dst, t=t, eid=np.arange(len(t)),
                                         features=np.array(feats, np.float32)))  # fmt: skip
    return store


@pytest.mark.parametrize(
    ("static_edges", "static_features", "kind", "want"),
    [
        (True, False, "state", StaticGraphTemporalSignal),
        (False, True, "window", DynamicGraphStaticSignal),
        (False, False, "window", DynamicGraphTemporalSignal),
    ],
)
def test_the_signal_type_follows_what_changes(static_edges, static_features, kind, want):
    spec = SnapshotSpec(kind=kind, every=1.0, start=1.0, width=1.0 if kind == "window" else None)
    signal = build_signal(small_store(static_edges, static_features), spec, until=6.0)
    assert type(signal) is want and signal.snapshot_count == 6
    train, test = temporal_signal_split(signal, train_ratio=0.5)
    assert type(train) is want and train.snapshot_count == 3 and test.snapshot_count == 3
    assert signal[5].x.shape == (8, 2) and signal[5].edge_index.shape[0] == 2


LAYERS = {
    "GConvGRU": lambda f, n: R.GConvGRU(f, 8, 2),
    "GConvLSTM": lambda f, n: R.GConvLSTM(f, 8, 2),
    "GCLSTM": lambda f, n: R.GCLSTM(f, 8, 2),
    "TGCN": lambda f, n: R.TGCN(f, 8),
    "DCRNN": lambda f, n: R.DCRNN(f, 8, 1),
    "A3TGCN": lambda f, n: R.A3TGCN(f, 8, periods=1),
    "EvolveGCNH": lambda f, n: R.EvolveGCNH(n, f),
    "EvolveGCNO": lambda f, n: R.EvolveGCNO(f),
}


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_pgt_recurrent_layers_run_on_our_signal_unchanged(layer):
    spec = SnapshotSpec(
        kind="window", every=1.0, start=1.0, weight="count", degree_features=True, num_nodes=8
    )
    signal = build_signal(small_store(False, False), spec, until=6.0)
    model = LAYERS[layer](4, 8)
    h = c = None
    for snap in signal:  # PGT's own loop: the Data objects the signal yields, as they are
        if layer in ("GConvLSTM", "GCLSTM"):
            h, c = model(snap.x, snap.edge_index, snap.edge_attr, h, c)
        elif layer.startswith("Evolve"):
            h = model(snap.x, snap.edge_index, snap.edge_attr)
        elif layer == "A3TGCN":
            h = model(snap.x.unsqueeze(-1), snap.edge_index, snap.edge_attr, h)
        else:
            h = model(snap.x, snap.edge_index, snap.edge_attr, h)
        assert h.shape[0] == 8 and torch.isfinite(h).all()


def test_next_links_are_the_next_arrivals_with_our_negatives():
    store = small_store(False, True)
    spec = SnapshotSpec(kind="window", every=1.0, start=1.0, width=1.0)
    target = NextLinks(negatives=3, seed=7)
    signal = build_signal(store, spec, target=target, until=6.0)
    assert signal.snapshot_count == 5  # the last snapshot's next links lie beyond the stream
    windows = [snap for snap in build_signal(store, spec, until=6.0)]
    for k in range(5):
        index, y = signal.link_index[k], signal.targets[k]
        p = int(y.sum())
        assert y.tolist() == [1.0] * p + [0.0] * (3 * p) and index.shape == (2, 4 * p)
        nxt = {tuple(e) for e in windows[k + 1].edge_index.T.tolist()}
        assert {tuple(e) for e in index[:, :p].T.tolist()} == nxt  # every node is known from the start here
        negatives = index[:, p:].reshape(2, p, 3)
        assert (negatives[0] == index[0, :p, None]).all()
        for i in range(p):
            assert not any((int(index[0, i]), int(d)) in nxt for d in negatives[1, i])
    again = build_signal(store, spec, target=target, until=6.0)
    assert all(np.array_equal(a, b) for a, b in zip(again.link_index, signal.link_index, strict=True))


def test_node_targets_horizon_classes_and_bad_columns():
    store = small_store(True, False)
    spec = SnapshotSpec(every=1.0, start=0.0)
    sig = build_signal(store, spec, target=NodeTarget(column=0, horizon=2, classes=True), until=5.0)
    assert sig.snapshot_count == 4 and sig.targets[0].dtype == np.int64
    assert sig.targets[0].tolist() == list(range(2, 10))  # feature 0 of node v at period p is v + p
    now = build_signal(store, spec, target=NodeTarget(column=0, horizon=0), until=5.0)
    assert now[0].x.shape == (8, 1) and now.targets[3].tolist() == list(range(3, 11))  # the column left x
    with pytest.raises(SnapshotError, match="column 5"):
        build_signal(store, spec, target=NodeTarget(column=5), until=5.0)
    with pytest.raises(ConfigError, match="horizon=0"):
        NodeTarget(lags=2, horizon=0)
    with pytest.raises(SnapshotError, match="arrivals=True"):
        NextLinks().labeler().push(
            SnapshotBuilder(store, spec).advance(1.0).__class__(0.0, 0, None, None, None, 0)
        )
