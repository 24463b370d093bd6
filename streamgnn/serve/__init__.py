"""Serving while training: the HTTP embeddings service (``streamgnn serve``) with its Prometheus metrics,
over the table, sinks and latency tracker of ``streamgnn.embeddings`` (re-exported here).

The service's parts (Starlette, uvicorn, a Kafka client) load on first use, so the trainer, which only needs
the table, does not import them.
"""

from ..embeddings import EmbeddingSink, EmbeddingTable, LatencyTracker
from .config import ServeConfig

_LAZY = {
    "EmbeddingService": "service",
    "EmbeddingsReader": "reader",
    "LinkScorer": "scoring",
    "ServiceMetrics": "metrics",
    "WorkerMetrics": "metrics",
    "create_app": "app",
}

__all__ = ["EmbeddingSink", "EmbeddingTable", "LatencyTracker", "ServeConfig", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
