"""The temporal graph store: growable per-node adjacency, deletions, versioned features, checkpoints."""

from .changes import ChangeFeed, LogPosition, StoreChanges
from .graph import EdgeTable, IngestReport, StoreConfig, TCSRView, TemporalGraphStore

__all__ = [
    "ChangeFeed",
    "EdgeTable",
    "IngestReport",
    "LogPosition",
    "StoreChanges",
    "StoreConfig",
    "TCSRView",
    "TemporalGraphStore",
]
