"""HDRF and DBH over an event stream: every edge placed in one partition, vertices replicated.

For power-law graphs a vertex-cut spreads a hub's edges instead of cutting most of them: HDRF replicates
high-degree vertices first and keeps low-degree ones whole. The partitioner keeps each edge's partition
(``edge_partition``, by the caller's internal edge id), each vertex's partial degree and replica set, and
labels each vertex with its first replica (its master). Kernels are in ``edge_kernels``.

    >>> import numpy as np
    >>> from streamgnn.partition import make_partitioner
    >>> p = make_partitioner("hdrf", 2)
    >>> labels = np.empty(3, np.int32)
    >>> p.add_vertices(labels, 0, 3, np.arange(3))
    >>> p.observe(labels, np.zeros(3, np.int8), np.array([0, 0, 1]), np.array([1, 2, 2]), np.zeros(3))
    >>> p.edge_partition[:3].tolist(), p.replication_factor()
    ([0, 0, 0], 1.0)
"""

from __future__ import annotations

import numpy as np

from ..growth import grow
from . import edge_kernels as E
from .base import PENDING, Partitioner, Routes
from .config import PartitionerConfig
from .hashing import hash_partition

_METHOD = {"hdrf": E.HDRF, "dbh": E.DBH}


class EdgePartitioner(Partitioner):
    def __init__(self, config: PartitionerConfig, num_partitions: int) -> None:
        super().__init__(config, num_partitions)
        if self.num_partitions > 32767:
            raise ValueError("edge partitioners hold up to 32767 partitions")
        self._method = _METHOD[config.name]
        self.words = (self.num_partitions + 63) // 64
        self.deg = np.zeros(0, np.int64)
        self.rep = np.zeros((0, self.words), np.uint64)
        self.vhash = np.zeros(0, np.int32)
        self.flushed = np.zeros(0, bool)  # placed by ``flush`` before any edge
        self.loads = np.zeros(self.num_partitions, np.int64)
        self.vcount = np.zeros(self.num_partitions, np.int64)
        self._edge_part = np.zeros(0, np.int16)
        self.num_edges = 0
        self.num_vertices = 0

    @property
    def edge_partition(self) -> np.ndarray:
        """Partition of each edge placed so far, by internal edge id."""
        return self._edge_part[: self.num_edges]

    def replication_factor(self) -> float:
        """Replicas per vertex that has an edge (1.0: no vertex is cut)."""
        placed = int((self.deg[: self.num_vertices] > 0).sum())
        return float(self.vcount.sum() / placed) if placed else 1.0

    def add_vertices(self, labels, lo, hi, external) -> None:
        labels[lo:hi] = PENDING
        self.deg = grow(self.deg, hi, 0)
        self.rep = grow(self.rep, hi, 0)
        self.vhash = grow(self.vhash, hi, 0)
        self.flushed = grow(self.flushed, hi, False)
        self.vhash[lo:hi] = hash_partition(external, self.num_partitions)
        self.num_vertices = hi

    def observe(self, labels, kind, src, dst, t, routes: bool = False, graph=None) -> Routes | None:
        n_add = int(np.count_nonzero(kind == E.ADD))
        self._edge_part = grow(self._edge_part, self.num_edges + n_add, -1)
        dest = np.empty(len(kind) if routes else 0, np.int32)
        log_v, log_at = (np.empty(2 * n_add if routes else 0, np.int64) for _ in range(2))
        both = np.zeros((len(kind) if routes else 0, self.words), np.uint64)
        c = self.config
        self.num_edges, logged = E.observe(
            kind, src.astype(np.int64, copy=False), dst.astype(np.int64, copy=False), self.num_edges, labels,
            self.deg, self.rep, self.vhash, self.loads, self.vcount, self._edge_part, self._method,
            c.hdrf_lambda, c.hdrf_epsilon, dest, log_v, log_at, both,
        )  # fmt: skip
        if not routes:
            return None
        bits = np.unpackbits(both.view(np.uint8), axis=1, bitorder="little")[:, : self.num_partitions]
        return Routes(dest, log_v[:logged], log_at[:logged], bits.astype(bool))

    def flush(self, labels) -> np.ndarray:
        """Vertices without an edge get their hash partition as master (no replica): the end of a stream."""
        waiting = np.flatnonzero(labels[: self.num_vertices] == PENDING)
        labels[waiting] = self.vhash[waiting]
        self.flushed[waiting] = True
        return waiting

    @property
    def pending(self) -> int:
        """Vertices without an edge and not flushed (no master yet)."""
        n = self.num_vertices
        return int(((self.deg[:n] == 0) & ~self.flushed[:n]).sum())

    def replicas(self, vertices: np.ndarray) -> np.ndarray:
        """``[len(vertices), k]`` bool: which partitions hold a replica of each vertex."""
        bits = np.unpackbits(self.rep[vertices].view(np.uint8), axis=1, bitorder="little")
        return bits[:, : self.num_partitions].astype(bool)

    def edge_partitions(self, labels, src, eid) -> np.ndarray:
        return self._edge_part[eid].astype(np.int32)

    def state(self) -> dict[str, np.ndarray]:
        n = self.num_vertices
        out = super().state()
        out.update(
            degree=self.deg[:n],
            replicas=self.rep[:n],
            vertex_hash=self.vhash[:n],
            flushed=self.flushed[:n],
            edge_partition=self.edge_partition,
        )
        return out

    def _load(self, arrays, labels, num_edges) -> None:
        super()._load(arrays, labels, num_edges)
        n, k = len(labels), self.num_partitions
        deg, rep, vhash, part = (arrays[x] for x in ("degree", "replicas", "vertex_hash", "edge_partition"))
        if (
            deg.shape != (n,)
            or rep.shape != (n, self.words)
            or vhash.shape != (n,)
            or part.shape != (num_edges,)
        ):
            raise ValueError("the edge partitioner's arrays do not match the store's vertices and edges")
        if (
            len(part)
            and (part.min() < 0 or part.max() >= k)
            or len(vhash)
            and (vhash.min() < 0 or vhash.max() >= k)
        ):
            raise ValueError("an edge or vertex hash names a partition out of range")
        flushed = arrays.get("flushed", np.zeros(n, bool))
        if flushed.shape != (n,):
            raise ValueError("the edge partitioner's flushed flags do not match the vertices")
        self.deg, self.rep, self.vhash = deg.astype(np.int64), rep.astype(np.uint64), vhash.astype(np.int32)
        self.flushed = flushed.astype(bool)
        self._edge_part, self.num_edges, self.num_vertices = part.astype(np.int16), num_edges, n
        self.loads = np.bincount(part, minlength=k).astype(np.int64)
        self.vcount = self.replicas(np.arange(n)).sum(axis=0).astype(np.int64)
        if int(self.deg.sum()) > 2 * num_edges or ((labels >= 0) != ((self.deg > 0) | self.flushed)).any():
            raise ValueError("the edge partitioner's degrees disagree with the edges and labels")


__all__ = ["EdgePartitioner"]
