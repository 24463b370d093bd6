"""Vertex-to-partition assignment. Hash is the default; streaming partitioners plug in the same way."""

from .hashing import hash_partition

__all__ = ["hash_partition"]
