"""Snapshots as PyTorch Geometric Temporal signals, so PGT's models and ``temporal_signal_split`` take them.

The signal type follows what changes: ``StaticGraphTemporalSignal`` when every snapshot has the same edges
and weights, ``DynamicGraphStaticSignal`` when the edges change but the features do not,
``DynamicGraphTemporalSignal`` otherwise. ``extra`` arrays (e.g. ``link_index``) become the signal's
additional feature keys. Node ids are the store's dense ids; ``signal.node_ids`` maps them back.

``build_signal(store, spec, target=...)`` cuts the whole stream the store holds and returns the signal; it
holds every snapshot, which a live run never does (see ``stream``).

    >>> from streamgnn import EventBatch
    >>> from streamgnn.store import TemporalGraphStore
    >>> from streamgnn.snapshots import SnapshotSpec
    >>> store = TemporalGraphStore()
    >>> _ = store.ingest(EventBatch.from_columns(src=[1, 2], dst=[2, 3], t=[0.5, 1.5], eid=[0, 1]))
    >>> signal = build_signal(store, SnapshotSpec(every=1.0))
    >>> type(signal).__name__, signal.snapshot_count, signal[1].edge_index.tolist()
    ('DynamicGraphTemporalSignal', 2, [[0, 1], [1, 2]])
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..errors import SnapshotError
from ..store import TemporalGraphStore
from .snapshot import Snapshot
from .spec import SnapshotSpec
from .stream import SnapshotStream
from .targets import NextLinks, NodeTarget


def _same(arrays: list[np.ndarray | None]) -> bool:
    first = arrays[0]
    if first is None:
        return all(a is None for a in arrays)
    return all(a is not None and a.shape == first.shape and np.array_equal(a, first) for a in arrays[1:])


def to_signal(snapshots: Iterable[Snapshot], *, node_ids: np.ndarray | None = None):
    """The PGT signal of ``snapshots`` (in order); ``node_ids``: external ids by internal id."""
    from torch_geometric_temporal.signal import (
        DynamicGraphStaticSignal,
        DynamicGraphTemporalSignal,
        StaticGraphTemporalSignal,
    )

    snaps = list(snapshots)
    if not snaps:
        raise SnapshotError("no snapshots to make a signal of (is the store empty, or the schedule past it?)")
    keys = set(snaps[0].extra)
    if any(set(s.extra) != keys for s in snaps):
        raise SnapshotError("every snapshot must carry the same extra arrays")
    extra = {k: [s.extra[k] for s in snaps] for k in sorted(keys)}
    edges, weights = [s.edge_index for s in snaps], [s.edge_weight for s in snaps]
    xs, ys = [s.x for s in snaps], [s.y for s in snaps]
    if _same(edges) and _same(weights):
        signal = StaticGraphTemporalSignal(edges[0], weights[0], xs, ys, **extra)
    elif _same(xs) and xs[0] is not None:
        signal = DynamicGraphStaticSignal(edges, weights, xs[0], ys, **extra)
    else:
        signal = DynamicGraphTemporalSignal(edges, weights, xs, ys, **extra)
    signal.snapshot_times = np.array([s.t for s in snaps])
    if node_ids is not None:
        signal.node_ids = node_ids
    return signal


def build_signal(
    store: TemporalGraphStore,
    spec: SnapshotSpec,
    *,
    target: NodeTarget | NextLinks | None = None,
    until: float | None = None,
):
    """Every snapshot of the stream ``store`` holds (its events are final), as a PGT signal."""
    stream = SnapshotStream(store, spec, target=target)
    try:
        snaps = list(stream.finish(until))
    finally:
        stream.builder.close()
    n = max((s.num_nodes for s in snaps), default=0)
    return to_signal(snaps, node_ids=store.external_ids(np.arange(n)))
