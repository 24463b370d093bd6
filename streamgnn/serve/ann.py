"""Approximate cosine top-k over an ``EmbeddingTable``'s rows: a faiss inverted file, kept as rows change.

Why faiss's IVF-Flat (``IndexIVFFlat``) and not a graph index (hnswlib, usearch, faiss HNSW): on this
project's host (2 shared cores) a graph index absorbed 200-330 rows/s as rows were written, far below the
trainer's 3-4k events/s, while an inverted file assigns a row to its nearest centroid (one small matrix
product) and absorbs tens of thousands per second, upserts included (``benchmarks/RESULTS.md``, serve).

The index holds unit vectors (so inner product is cosine) under the table's row numbers. It is trained
(k-means, ``sqrt(rows)`` lists) once the table has ``exact_below`` rows, and again from scratch each time
the table has grown 4x since, so lists stay near ``sqrt(rows)`` long; below that size a scan is as quick
and the table scans. A query probes ``probe`` of the lists (the rows nearest its nearest centroids).

    index = ApproximateTopK(exact_below=1000).index(dim=100)
    index.upsert(rows, unit_vectors)             # new rows and rewritten rows alike
    rows, scores = index.search(unit_queries, k)  # [q, k] each; -1 where fewer were found
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError

TOPK = ("exact", "approximate")


@dataclass(frozen=True)
class ApproximateTopK:
    """How ``EmbeddingTable.top_k`` answers cosine queries approximately (``ServeConfig.topk``).

    ``exact_below``: rows under which the table scans every row instead (the index is built when the table
    reaches it). ``probe``: the fraction of inverted lists a query scans, the recall/latency dial (0.05: at
    1M 100-d rows, recall@10 against the exact scan and p99 latency in ``benchmarks/RESULTS.md``).
    """

    exact_below: int = 100_000
    probe: float = 0.05

    def __post_init__(self) -> None:
        if self.exact_below < 1:
            raise ConfigError(f"serve.topk_exact_below must be >= 1, got {self.exact_below}")
        if not 0 < self.probe <= 1:
            raise ConfigError(f"serve.topk_probe must be in (0, 1], got {self.probe}")

    def index(self, dim: int) -> IVFIndex:
        return IVFIndex(dim, self)


class IVFIndex:
    """The index itself; not thread-safe (the table calls it under its lock)."""

    def __init__(self, dim: int, config: ApproximateTopK) -> None:
        import faiss

        self.dim, self.config = dim, config
        self._faiss = faiss
        self._index = None  # built by ``train``
        self.trained_rows = 0

    @property
    def ready(self) -> bool:
        return self._index is not None

    def wants_training(self, rows: int) -> bool:
        """Whether a table of ``rows`` rows should (re)build the index now."""
        if self._index is None:
            return rows >= self.config.exact_below
        return rows >= 4 * self.trained_rows

    def train(self, vectors: np.ndarray, seed: int = 0) -> None:
        """Build the index from every row (``vectors[r]`` is row ``r``, unit length or zero)."""
        faiss = self._faiss
        n = len(vectors)
        lists = max(1, int(math.sqrt(n)))
        sample = vectors
        if n > 40 * lists:  # faiss's k-means wants about 39 points per centroid; more adds time, not quality
            sample = vectors[np.random.default_rng(seed).choice(n, 40 * lists, replace=False)]
        kmeans = faiss.Kmeans(self.dim, lists, niter=10, seed=seed, spherical=True)
        kmeans.train(np.ascontiguousarray(sample, np.float32))
        index = faiss.IndexIVFFlat(kmeans.index, self.dim, lists, faiss.METRIC_INNER_PRODUCT)
        index.is_trained = True
        index.set_direct_map_type(faiss.DirectMap.Hashtable)  # so upserts can remove a row's old vector
        index.add_with_ids(np.ascontiguousarray(vectors, np.float32), np.arange(n, dtype=np.int64))
        index.nprobe = max(1, math.ceil(self.config.probe * lists))
        self._quantizer = kmeans.index  # the index refers to it without owning it: keep it alive
        self._index, self.trained_rows = index, n

    def upsert(self, rows: np.ndarray, vectors: np.ndarray) -> None:
        """Set ``rows`` (distinct) to ``vectors``: a row already indexed loses its old vector."""
        rows = np.ascontiguousarray(rows, np.int64)
        self._index.remove_ids(self._faiss.IDSelectorArray(len(rows), self._faiss.swig_ptr(rows)))
        self._index.add_with_ids(np.ascontiguousarray(vectors, np.float32), rows)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Row numbers and inner products, best first, ``[q, k]`` each; row -1 where the probed lists
        held fewer than ``k`` rows."""
        scores, rows = self._index.search(np.ascontiguousarray(queries, np.float32), k)
        return rows, scores


__all__ = ["TOPK", "ApproximateTopK", "IVFIndex"]
