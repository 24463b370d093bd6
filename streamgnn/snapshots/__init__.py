"""Discrete-time views of the live store, built incrementally, as PyTorch Geometric Temporal signals.

``SnapshotSpec`` says what a snapshot is and when it is cut; ``SnapshotBuilder`` cuts the next one from
the last plus the events between (``snapshot_at``: one from scratch); ``NodeTarget``/``NextLinks`` label
them; ``live_snapshots`` yields them from a running source as they become final; ``build_signal`` /
``to_signal`` make PGT signals; ``SnapshotTrainer`` trains PGT's recurrent layers on any of these.
"""

from .baselines import SnapshotEdgeBank, SnapshotPreferentialAttachment
from .builder import SnapshotBuilder
from .metrics import SnapshotMetrics, SnapshotTrainResult
from .scratch import snapshot_at
from .signal import build_signal, to_signal
from .snapshot import Snapshot
from .spec import SnapshotSpec
from .stream import SnapshotStream, live_snapshots
from .targets import NextLinks, NodeTarget
from .trainer import SnapshotTrainConfig, SnapshotTrainer

__all__ = [
    "NextLinks",
    "NodeTarget",
    "Snapshot",
    "SnapshotBuilder",
    "SnapshotEdgeBank",
    "SnapshotMetrics",
    "SnapshotPreferentialAttachment",
    "SnapshotSpec",
    "SnapshotStream",
    "SnapshotTrainConfig",
    "SnapshotTrainResult",
    "SnapshotTrainer",
    "build_signal",
    "live_snapshots",
    "snapshot_at",
    "to_signal",
]
