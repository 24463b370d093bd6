"""The temporal graph store: growable per-node adjacency, deletions, versioned features, checkpoints."""

from .graph import EdgeTable, IngestReport, StoreConfig, TCSRView, TemporalGraphStore

__all__ = ["EdgeTable", "IngestReport", "StoreConfig", "TCSRView", "TemporalGraphStore"]
