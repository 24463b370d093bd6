"""Discrete-time views of the live store, built incrementally, as PyTorch Geometric Temporal signals."""

from .builder import SnapshotBuilder
from .scratch import snapshot_at
from .snapshot import Snapshot
from .spec import SnapshotSpec
from .stream import SnapshotStream, live_snapshots
from .targets import NextLinks, NodeTarget

__all__ = [
    "NextLinks",
    "NodeTarget",
    "Snapshot",
    "SnapshotBuilder",
    "SnapshotSpec",
    "SnapshotStream",
    "live_snapshots",
    "snapshot_at",
]
