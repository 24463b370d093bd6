"""The latest embedding of every node, as training produces them: the thread-safe table the trainers write
and the service reads (``EmbeddingTable``, with its approximate top-k index in ``ann``), the sink a table
publishes to (``EmbeddingSink``), and the arrival-to-queryable latency both report (``LatencyTracker``).

It sits below the trainers and the service, which both use it, so neither imports the other for it.
"""

from .latency import LatencyTracker
from .table import EmbeddingSink, EmbeddingTable

__all__ = ["EmbeddingSink", "EmbeddingTable", "LatencyTracker"]
