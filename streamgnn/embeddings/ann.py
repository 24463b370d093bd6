"""Approximate cosine top-k over an ``EmbeddingTable``'s rows: a compressed scan of every row, re-scored.

Why this and not a graph (hnswlib, usearch, faiss HNSW) or an inverted file (faiss IVF): the service must
hold its recall on rows a user picks, isotropic random ones included, and absorb rows as fast as the trainer
writes them. Partitions (IVF) and graphs find near neighbors by locality that isotropic 100-d rows do not
have (at 1M such rows IVF-Flat probing 5% of lists recalled 0.39 of the exact top 10; hnswlib at only 50k
such rows recalled 0.89 at ef=256 and inserted about 1,000 rows per CPU-second). Product quantization with
4-bit codes (faiss ``IndexPQFastScan``: 2 dims per code, 25 bytes per 100-d row) scans all 1M rows in
about 6 ms of one core with SIMD lookups, so no row is skipped for being far from a centroid; the best
``candidates * k`` of that scan are re-scored exactly from the table's own float rows. Measured figures
(recall on isotropic and structured rows, latency, rows/s absorbed): ``benchmarks/RESULTS.md``, serve.

Rows are the table's row numbers (dense, appended in order), so a new row is appended to the codes and a
rewritten row's code is overwritten in place (faiss's code packer): there is nothing to delete, and since
answers are re-scored from the table's current vectors, a stale code can cost recall but never answer a
stale vector. The codebooks are trained (k-means per 2-d subspace) when the table reaches ``exact_below``
rows, and again each time it has grown 4x since; below that size a scan is as quick and the table scans.

    index = ApproximateTopK(exact_below=1000).index(dim=100)
    index.train(unit_rows)                        # every row, row r at index r
    index.upsert(rows, unit_vectors)             # new rows (appended in order) and rewritten rows alike
    candidates = index.candidates(unit_queries, k)  # [q, candidates * k] row numbers, -1 padded
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError

TOPK = ("exact", "approximate")
TRAIN_SAMPLE = 65_536  # rows the codebooks are trained on: 16 centroids per 2-d subspace need few
CODE_BITS = 4  # bits per code: 2**CODE_BITS centroids per 2-d subspace
MIN_TRAIN_ROWS = 1 << CODE_BITS  # faiss's k-means needs at least one training row per centroid


@dataclass(frozen=True)
class ApproximateTopK:
    """How ``EmbeddingTable.top_k`` answers cosine queries approximately (``ServeConfig.topk``).

    ``exact_below``: rows under which the table scans every row instead (the index is built when the table
    reaches it). ``candidates``: rows re-scored exactly per neighbor asked, the recall/latency dial (50: at
    1M 100-d isotropic rows, recall@10 against the exact scan in ``benchmarks/RESULTS.md``).
    ``search_threads``: OpenMP threads of one query's scan. One by default: the table answers queries one at
    a time under its lock, so a second thread can only split a 4-6 ms scan, and on a busy host a split scan
    waits for its slower half (1M isotropic rows on our 2-core host: p99 19-28 ms with 2 threads, 8.5-9.7 ms
    with 1; p50 5.6 vs 3.8 ms).
    """

    exact_below: int = 100_000
    candidates: int = 50
    search_threads: int = 1

    def __post_init__(self) -> None:
        if self.exact_below < MIN_TRAIN_ROWS:
            raise ConfigError(
                f"serve.topk_exact_below must be >= {MIN_TRAIN_ROWS}, got {self.exact_below}: the index is "
                f"trained on the rows the table holds then, and faiss needs at least {MIN_TRAIN_ROWS} "
                f"(one per centroid of its {CODE_BITS}-bit codes)"
            )
        if self.candidates < 1:
            raise ConfigError(f"serve.topk_candidates must be >= 1, got {self.candidates}")
        if self.search_threads < 1:
            raise ConfigError(f"search_threads must be >= 1, got {self.search_threads}")

    def index(self, dim: int) -> PQScanIndex:
        return PQScanIndex(dim, self)


class PQScanIndex:
    """The index itself; not thread-safe (the table calls it under its lock)."""

    def __init__(self, dim: int, config: ApproximateTopK) -> None:
        import faiss

        self.dim, self.config = dim, config
        self._faiss = faiss
        self._pad = dim % 2  # 4-bit codes of 2 dims each: an odd dim gets a zero column
        self._index = None  # built by ``train``
        self.trained_rows = 0

    @property
    def ready(self) -> bool:
        return self._index is not None

    @property
    def rows(self) -> int:
        return 0 if self._index is None else self._index.ntotal

    def wants_training(self, rows: int) -> bool:
        """Whether a table of ``rows`` rows should (re)build the index now."""
        if self._index is None:
            return rows >= self.config.exact_below
        return rows >= 4 * self.trained_rows

    def _padded(self, vectors: np.ndarray) -> np.ndarray:
        """Float32 rows of an even width; a row with a NaN or an infinity is coded as zero (faiss refuses
        them; the table's exact re-scoring never answers such a row)."""
        vectors = np.array(vectors, np.float32)
        vectors[~np.isfinite(vectors).all(axis=1)] = 0.0
        if self._pad:
            vectors = np.hstack([vectors, np.zeros((len(vectors), 1), np.float32)])
        return np.ascontiguousarray(vectors)

    def train(self, vectors: np.ndarray, seed: int = 0) -> None:
        """Build the index from every row (``vectors[r]`` is row ``r``, unit length or zero)."""
        faiss = self._faiss
        vectors = self._padded(vectors)
        n, d = vectors.shape
        sample = vectors
        if n > TRAIN_SAMPLE:
            sample = vectors[np.random.default_rng(seed).choice(n, TRAIN_SAMPLE, replace=False)]
        index = faiss.IndexPQFastScan(d, d // 2, CODE_BITS, faiss.METRIC_INNER_PRODUCT)
        index.pq.cp.seed = seed
        index.train(sample)
        index.add(vectors)
        self._index, self.trained_rows = index, n
        self._packer = index.get_CodePacker()

    def upsert(self, rows: np.ndarray, vectors: np.ndarray) -> None:
        """Set ``rows`` (distinct) to ``vectors``: rows past the index's end must be all of the new rows,
        whatever their order; the others have their codes overwritten in place."""
        rows = np.asarray(rows, np.int64)
        vectors = self._padded(vectors)
        end = self._index.ntotal
        new = rows >= end
        if new.any():
            order = np.argsort(rows[new])
            if not np.array_equal(rows[new][order], np.arange(end, end + new.sum())):
                raise ValueError(f"new rows must follow the index's {end} rows without gaps")
            self._index.add(np.ascontiguousarray(vectors[new][order]))
        old = ~new
        if old.any():
            codes = self._index.pq.compute_codes(np.ascontiguousarray(vectors[old]))
            blocks = self._index.codes.get()
            for row, code in zip(rows[old].tolist(), codes, strict=True):
                self._packer.pack_1_c(self._faiss.swig_ptr(code), row, blocks)

    def candidates(self, queries: np.ndarray, k: int) -> np.ndarray:
        """Row numbers ``[q, min(candidates * k, rows)]``, best estimated inner product first, for the
        caller to re-score exactly; -1 where fewer were found."""
        want = min(self.config.candidates * k, self._index.ntotal)
        self._faiss.omp_set_num_threads(self.config.search_threads)  # per calling thread (OpenMP's ICV)
        _, rows = self._index.search(self._padded(queries), want)
        return rows


__all__ = ["MIN_TRAIN_ROWS", "TOPK", "ApproximateTopK", "PQScanIndex"]
