"""Discrete-time views of the live store, built incrementally, as PyTorch Geometric Temporal signals."""

from .builder import SnapshotBuilder
from .scratch import snapshot_at
from .snapshot import Snapshot
from .spec import SnapshotSpec

__all__ = ["Snapshot", "SnapshotBuilder", "SnapshotSpec", "snapshot_at"]
