"""The latest embedding of every node, readable from any thread while training goes on.

The trainer (or the embeddings service, reading the topic) writes rows; readers copy rows out or scan them
for the nearest neighbors under the same lock, so a reader never sees a half-written row or a table being
resized. Rows are keyed by external node id through the table's own id map (the store's is not safe to read
while it ingests).

    table = EmbeddingTable(dim=2)
    table.update([1, 2, 3], [[1, 0], [0.9, 0.1], [0, 1]], t=5.0)
    ids, scores = table.top_k(table.embeddings([1]), k=2, exclude=[1])  # ids [[2, 3]], cosine scores

Top-k scans every row, or, given ``approximate`` (``ServeConfig.topk="approximate"``), once the table is
large enough for a scan to be slow, re-scores exactly the candidates of a compressed index kept with the
rows (``embeddings.ann``).
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from ..errors import ConfigError, UnknownNodeError
from ..growth import grow
from ..store.idmap import NodeIdMap
from .ann import ApproximateTopK

log = logging.getLogger(__name__)

METRICS = ("cosine", "dot")
RERANK_ROWS = 1 << 18  # candidate rows gathered at once for exact re-scoring (100 MB at 100-d)


@runtime_checkable
class EmbeddingSink(Protocol):
    """Where published embeddings go; ``streamgnn.connectors.sink.KafkaSink`` is one. Rows align with ids,
    all computed at stream time ``t``."""

    def publish_embeddings(self, node_ids, embeddings: np.ndarray, t: float | None = None) -> int: ...


class EmbeddingTable:
    """``embeddings(ids)``: the vector each node got at its latest refresh, and ``updated_at(ids)`` its time.

    ``publish(sink)`` sends the rows changed since the previous publish.
    """

    def __init__(self, dim: int, approximate: ApproximateTopK | None = None) -> None:
        if dim < 1:
            raise ConfigError(f"embedding dim must be >= 1, got {dim}")
        self.dim = dim
        self.approximate = approximate
        self.index_error: str | None = None  # why the approximate index was dropped (scans answer since)
        self._lock = threading.Lock()
        self._generation = 0  # bumped by clear(): a publish in flight must not mark rows of a cleared table
        self.clear()

    def __len__(self) -> int:
        return self._ids.size

    def clear(self) -> None:
        """Forget every row (a new pass over the stream starts); readers then get ``UnknownNodeError``."""
        with self._lock:
            self._generation += 1
            self._ids = NodeIdMap()
            self._vectors = np.zeros((0, self.dim), np.float32)
            self._norms = np.zeros(0, np.float32)  # row norms, kept with the rows, for cosine scans
            self._time = np.zeros(0, np.float64)
            self._version = np.zeros(0, np.int64)  # bumped by every write; 0: never written
            self._sent = np.zeros(0, np.int64)  # the version a sink last took
            self._index = self.approximate.index(self.dim) if self.approximate else None

    def update(self, node_ids, vectors, t: float) -> None:
        """Set the rows of ``node_ids`` (external ids, unique) to ``vectors [n, dim]``, computed at ``t``."""
        node_ids = np.asarray(node_ids)
        if node_ids.dtype.kind in "US":  # a plain list of strings: numpy makes it fixed-width text
            node_ids = node_ids.astype(object)
        vectors = np.asarray(vectors, np.float32)
        if vectors.shape != (len(node_ids), self.dim):
            raise ConfigError(f"expected vectors of shape ({len(node_ids)}, {self.dim}), got {vectors.shape}")
        with self._lock:
            try:
                rows = self._ids.map(node_ids)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"node ids must be ints or strs, one kind per table: {exc}") from None
            if self._ids.size > len(self._vectors):
                self._grow(self._ids.size)
            self._vectors[rows] = vectors
            self._norms[rows] = np.linalg.norm(vectors, axis=1)
            self._time[rows] = t
            self._version[rows] += 1
            self._index_rows(rows)

    def state_dict(self) -> dict:
        """Every row as plain values (``ids``: a list of str or an int64 array; ``vectors``, ``time``, and
        ``unsent``: rows no sink has taken yet), e.g. for a checkpoint: a table given them by
        ``load_state_dict`` serves and publishes what this one would."""
        with self._lock:
            n = self._ids.size
            ids = self._ids.all_external()
            return {
                "ids": ids.tolist() if self._ids.id_type == "str" else ids.astype(np.int64),
                "vectors": self._vectors[:n].copy(),
                "time": self._time[:n].copy(),
                "unsent": self._version[:n] != self._sent[:n],
            }

    def load_state_dict(self, state: dict) -> None:
        """Replace every row by those of ``state_dict()``."""
        ids = state["ids"]
        ids = np.array(ids, dtype=object) if isinstance(ids, list) else np.asarray(ids, np.int64)
        vectors = np.asarray(state["vectors"], np.float32)
        time, unsent = np.asarray(state["time"], np.float64), np.asarray(state["unsent"], bool)
        n = len(ids)
        if vectors.shape != (n, self.dim) or time.shape != (n,) or unsent.shape != (n,):
            raise ConfigError(f"a table state of {vectors.shape} vectors does not fit {n} {self.dim}-d rows")
        self.clear()
        if not n:
            return
        with self._lock:
            rows = self._ids.map(ids)
            self._grow(self._ids.size)
            self._vectors[rows], self._time[rows] = vectors, time
            self._version[rows] = 1
            self._sent[rows] = np.where(unsent, 0, 1)
            self._index_rows(rows)

    def _index_rows(self, rows: np.ndarray) -> None:
        """Bring the approximate index up to date with ``rows`` just written (under the lock): upsert them,
        or build it from every row when the table has grown enough."""
        if self._index is None:
            return
        n = self._ids.size
        try:
            if self._index.wants_training(n):
                self._index.train(self._unit(np.arange(n)))
            elif self._index.ready:
                self._index.upsert(rows, self._unit(rows))
        except Exception as exc:  # the rows are written: answer every query by a scan rather than lose rows
            self._index = None
            why = " ".join(str(exc).split())[:300]
            self.index_error = f"the approximate top-k index failed at {n} rows ({type(exc).__name__}: {why})"
            log.error("%s; every top-k query scans all rows from now on", self.index_error)

    def _unit(self, rows: np.ndarray) -> np.ndarray:
        """The rows scaled to unit length (a zero row stays zero): their inner products are cosines."""
        norms = self._norms[rows, None]
        with np.errstate(invalid="ignore"):  # a non-finite row stays non-finite; the index codes it as zero
            return np.divide(self._vectors[rows], norms, out=np.zeros((len(rows), self.dim), np.float32),
                             where=norms > 0)  # fmt: skip

    def _grow(self, n: int) -> None:
        self._vectors, self._norms, self._time, self._version, self._sent = (
            grow(a, n) for a in (self._vectors, self._norms, self._time, self._version, self._sent)
        )

    def _rows(self, node_ids) -> np.ndarray:
        ids = np.asarray(node_ids)
        if ids.ndim == 0:
            ids = ids.reshape(1)
        rows = self._ids.lookup(ids) if len(ids) else np.zeros(0, np.int64)
        if (rows < 0).any():
            raise UnknownNodeError(f"no embedding yet for node ids {ids[rows < 0][:5].tolist()}")
        return rows

    def known(self, node_ids) -> np.ndarray:
        """Whether each id has a row (bool array)."""
        with self._lock:
            return self._ids.lookup(np.asarray(node_ids).reshape(-1)) >= 0

    def embeddings(self, node_ids) -> np.ndarray:
        """``float32 [n, dim]`` copies of the latest embeddings; unknown ids raise ``UnknownNodeError``."""
        with self._lock:
            return self._vectors[self._rows(node_ids)].copy()

    def updated_at(self, node_ids) -> np.ndarray:
        """Stream time at which each row was computed."""
        with self._lock:
            return self._time[self._rows(node_ids)].copy()

    def read(self, node_ids) -> tuple[np.ndarray, np.ndarray]:
        """``(embeddings(ids), updated_at(ids))`` under one lock: each vector with the time of the write that
        set it. Two separate calls may straddle a write and pair one write's vector with the next one's time.
        """
        with self._lock:
            rows = self._rows(node_ids)
            return self._vectors[rows].copy(), self._time[rows].copy()

    def top_k(self, queries, k: int, metric: str = "cosine", exclude=None) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` rows most similar to each query vector (``[q, dim]``), best first: their external ids
        ``[q, k']`` and scores ``[q, k']`` (``k' = min(k, rows)``, less one row per query when ``exclude``
        names a node per query, e.g. the query node itself).

        ``metric``: "cosine" (dot product of unit vectors; a zero row or query scores 0) or "dot". Exact: one
        matrix product over every row, then a partial sort. With ``approximate`` and an index built, cosine
        queries re-score the index's candidates instead (answers in the same form, scores exact); "dot"
        always scans.
        """
        if metric not in METRICS:
            raise ConfigError(f"metric must be one of {METRICS}, got {metric!r}")
        q = np.asarray(queries, np.float32)
        if q.ndim != 2 or q.shape[1] != self.dim:
            raise ConfigError(f"queries must be of shape (q, {self.dim}), got {q.shape}")
        if not isinstance(k, int | np.integer) or k < 1:
            raise ConfigError(f"k must be an int >= 1, got {k!r}")
        if metric == "cosine":
            qn = np.linalg.norm(q, axis=1, keepdims=True)
            q = np.divide(q, qn, out=np.zeros_like(q), where=qn > 0)
        with self._lock:
            n = self._ids.size
            skip = None if exclude is None else self._rows(exclude)
            if skip is not None and len(skip) != len(q):
                raise ConfigError(f"exclude names {len(skip)} nodes for {len(q)} queries; give one each")
            kk = max(0, min(k, n - (skip is not None)))
            if kk and metric == "cosine" and self._index is not None and self._index.ready:
                top, best = self._search(q, kk, skip)
            else:
                top, best = self._scan(q, kk, skip, metric)
            ids = self._ids.external(top.reshape(-1)).reshape(top.shape)
        return ids, best

    def scan_size(self, metric: str = "cosine") -> int:
        """Floats one ``top_k`` query with ``metric`` reads in full: every row's for a scan, 0 when the index
        answers it (its cost is then about a scan of the 4-bit codes, bounded whatever the table's size)."""
        if metric == "cosine" and self._index is not None and self._index.ready:
            return 0
        return self._ids.size * self.dim

    def _search(self, q: np.ndarray, kk: int, skip: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Top ``kk`` rows of unit queries ``q`` (under the lock): the index's candidates, re-scored exactly
        from the current rows, so a score is always the row's true cosine; a row whose score is not finite
        is never answered, and a query with too few candidates left is scanned."""
        cand = self._index.candidates(q, kk + (skip is not None))
        top, best = np.empty((len(q), kk), np.int64), np.empty((len(q), kk), np.float32)
        step = max(1, RERANK_ROWS // cand.shape[1])  # queries re-scored at once: bounds the gathered rows
        for lo in range(0, len(q), step):
            at = slice(lo, lo + step)
            rows = np.maximum(cand[at], 0)
            norms = self._norms[rows]
            scores = np.einsum("qcd,qd->qc", self._vectors[rows], q[at])
            np.divide(scores, norms, out=scores, where=norms > 0)
            scores[norms == 0] = 0.0
            drop = (cand[at] < 0) | ~np.isfinite(scores)
            if skip is not None:
                drop |= rows == skip[at, None]
            scores[drop] = -np.inf
            order = np.argsort(-scores, axis=1, kind="stable")[:, :kk]
            top[at], best[at] = np.take_along_axis(rows, order, 1), np.take_along_axis(scores, order, 1)
        short = ~np.isfinite(best).all(axis=1)
        if short.any():
            some = None if skip is None else skip[short]
            top[short], best[short] = self._scan(q[short], kk, some, "cosine")
        return top, best

    def _scan(
        self, q: np.ndarray, kk: int, skip: np.ndarray | None, metric: str
    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact top ``kk`` rows of ``q`` over every row (under the lock)."""
        n = self._ids.size
        # torch's matmul (zero-copy views): it honours torch.set_num_threads, and numpy's BLAS pool took
        # 10-40 ms to wake for a 9k-row product on a loaded 2-core host (torch: 0.1-0.2 ms)
        scores = (torch.from_numpy(q) @ torch.from_numpy(self._vectors[:n]).T).numpy()
        if metric == "cosine":
            norms = self._norms[:n]
            np.divide(scores, norms, out=scores, where=norms > 0)
            scores[:, norms == 0] = 0.0
        if skip is not None:
            scores[np.arange(len(q)), skip] = -np.inf
        top = np.argpartition(-scores, kk - 1, axis=1)[:, :kk] if 0 < kk < n else np.argsort(-scores, 1)
        top = top[:, :kk]
        best = np.take_along_axis(scores, top, 1)
        order = np.argsort(-best, axis=1, kind="stable")
        return np.take_along_axis(top, order, 1), np.take_along_axis(best, order, 1)

    def publish(self, sink: EmbeddingSink) -> int:
        """Send the rows changed since the last successful publish, one call per computation time; returns
        how many rows were sent. A row counts as sent at the version the sink took: a failure retries it,
        and a row rewritten while the sink worked goes out again next time (even at the same time)."""
        with self._lock:
            n = self._ids.size
            rows = np.flatnonzero(self._version[:n] != self._sent[:n])
            ids = self._ids.external(rows)
            vectors = self._vectors[rows].copy()
            stamp = self._time[rows].copy()
            version = self._version[rows].copy()
            generation = self._generation
        for t in np.unique(stamp):
            at = stamp == t
            sink.publish_embeddings(ids[at], vectors[at], float(t))
            with self._lock:
                if self._generation != generation:  # cleared meanwhile: these rows are gone
                    return len(rows)
                self._sent[rows[at]] = version[at]
        return len(rows)
