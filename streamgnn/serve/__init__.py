"""Serving while training: the latest node embeddings, arrival-to-queryable latency, publishing sinks."""

from .latency import LatencyTracker
from .table import EmbeddingSink, EmbeddingTable

__all__ = ["EmbeddingSink", "EmbeddingTable", "LatencyTracker"]
