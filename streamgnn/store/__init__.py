"""The temporal graph store: growable per-node adjacency, deletions, versioned features, checkpoints."""

from .contract import FeatureStore, FeatureView, GraphStore, TCSRView
from .graph import EdgeTable, IngestReport, StoreConfig, TemporalGraphStore

__all__ = [
    "EdgeTable",
    "FeatureStore",
    "FeatureView",
    "GraphStore",
    "IngestReport",
    "StoreConfig",
    "TCSRView",
    "TemporalGraphStore",
]
