"""The temporal graph store: growable per-node adjacency, deletions, versioned features, checkpoints."""

from .changes import ChangeFeed, LogPosition, StoreChanges
from .config import StoreConfig
from .contract import FeatureStore, FeatureView, GraphStore, TCSRView
from .graph import IngestReport, TemporalGraphStore
from .tables import EdgeTable

__all__ = [
    "ChangeFeed",
    "EdgeTable",
    "FeatureStore",
    "FeatureView",
    "GraphStore",
    "IngestReport",
    "LogPosition",
    "StoreChanges",
    "StoreConfig",
    "TCSRView",
    "TemporalGraphStore",
]
