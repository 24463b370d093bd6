"""LDG and Fennel over an event stream: vertices placed once, near their neighbors, balanced.

A vertex's first edge says little about where its neighborhood lives, so a vertex may wait for its first
``buffer_edges`` edges (or ``buffer_time`` of stream time, or until ``max_pending`` others wait) and be
placed from all of them; meanwhile its label is ``PENDING``. The kernels are in ``greedy_kernels``.

    >>> import numpy as np
    >>> from streamgnn.partition import PartitionerConfig, make_partitioner
    >>> p = make_partitioner(PartitionerConfig("fennel", buffer_edges=2), 2)
    >>> labels = np.empty(4, np.int32)
    >>> p.add_vertices(labels, 0, 4, np.arange(4))
    >>> p.observe(labels, np.zeros(1, np.int8), np.array([0]), np.array([1]), np.array([0.0]))
    >>> labels.tolist(), p.pending  # both ends wait for a second edge
    ([-1, -1, -1, -1], 2)
"""

from __future__ import annotations

import numpy as np

from ..growth import grow, grown_size
from . import greedy_kernels as G
from . import rebalance
from .base import PENDING, Partitioner, Routes
from .config import PartitionerConfig

_METHOD = {"ldg": G.LDG, "fennel": G.FENNEL}


class GreedyPartitioner(Partitioner):
    def __init__(self, config: PartitionerConfig, num_partitions: int) -> None:
        super().__init__(config, num_partitions)
        self.method_id = _METHOD[config.name]
        self.rebalance_state = rebalance.RebalanceState()
        self.sizes = np.zeros(self.num_partitions, np.int64)
        self.slot = np.zeros(0, np.int64)
        self.st = np.zeros(G.NUM_ST, np.int64)
        self.fs = np.full(1, -np.inf)
        self._counts = np.zeros(self.num_partitions, np.int64)
        self.ring = np.zeros((config.window_edges, 2), np.int32)
        self._queue(64)

    def _queue(self, capacity: int) -> None:
        b = self.config.buffer_edges
        self.qv = np.full(capacity, -1, np.int64)
        self.qdl = np.zeros(capacity, np.float64)
        self.qn = np.zeros(capacity, np.int64)
        self.qnb = np.zeros((capacity, b), np.int64)

    @property
    def pending(self) -> int:
        return int(self.st[G.LIVE])

    @property
    def vertices_seen(self) -> int:
        return int(self.st[G.N_SEEN])

    @property
    def edges_seen(self) -> int:
        return int(self.st[G.M_SEEN])

    def add_vertices(self, labels, lo, hi, external) -> None:
        labels[lo:hi] = PENDING
        if hi > len(self.slot):
            self.slot = grow(self.slot, hi, -1)

    def _args(self):
        c = self.config
        alpha = 0.0 if c.alpha is None else c.alpha
        return self.method_id, c.expected_nodes, c.balance_slack, c.gamma, alpha

    def observe(self, labels, kind, src, dst, t, routes: bool = False, graph=None) -> Routes | None:
        every = self.config.rebalance.every_edges if graph is not None else 0
        n = len(kind)
        dest = np.empty(n if routes else 0, np.int32)
        cap = self.pending + 2 * n + 1 if routes else 0
        log_v, log_at = np.empty(cap, np.int64), np.empty(cap, np.int64)
        self.st[G.LOGGED] = 0
        src, dst = src.astype(np.int64, copy=False), dst.astype(np.int64, copy=False)
        i = 0
        while i < n:
            check_at = (self.edges_seen // every + 1) * every if every else -1
            i = G.observe(
                kind, src, dst, t, i, labels, self.slot, self.sizes, self.qv, self.qdl, self.qn, self.qnb,
                self.ring, self.st, self.fs, self._counts, *self._args(), self.config.buffer_time,
                self.config.max_pending, check_at, dest, log_v, log_at,
            )  # fmt: skip
            if self.edges_seen == check_at:
                rebalance.check(self, labels, graph(), self.edges_seen)
            elif i < n:
                self._make_room()
        if not routes:
            return None
        logged = int(self.st[G.LOGGED])
        return Routes(dest, log_v[:logged].copy(), log_at[:logged].copy())

    def _make_room(self) -> None:
        """The queue's tail reached its end: compact it, into a larger one (``streamgnn.growth``, to at least
        twice what it holds, so a compaction frees half of it) if still half full."""
        G.compact(self.slot, self.qv, self.qdl, self.qn, self.qnb, self.st)
        need = 2 * (int(self.st[G.TAIL]) + 2)
        if need > len(self.qv):
            old = (self.qv, self.qdl, self.qn, self.qnb)
            self._queue(grown_size(len(self.qv), need))
            w = int(self.st[G.TAIL])
            for new, prev in zip((self.qv, self.qdl, self.qn, self.qnb), old, strict=True):
                new[:w] = prev[:w]

    def flush(self, labels) -> np.ndarray:
        live = self.qv[self.st[G.HEAD] : self.st[G.TAIL]]
        order = live[live >= 0].copy()
        G.flush(labels, self.slot, self.sizes, self.qv, self.qn, self.qnb, self.st, self._counts,
                *self._args())  # fmt: skip
        return order

    def move(self, labels, vertices, to) -> None:
        vertices = np.asarray(vertices, np.int64)
        to = np.asarray(to, np.int32)
        old = labels[vertices]
        if (old < 0).any():
            raise ValueError("only placed vertices can move")
        np.subtract.at(self.sizes, old, 1)
        np.add.at(self.sizes, to, 1)
        labels[vertices] = to
        self.moved += int((old != to).sum())

    def rebalance(self, labels, graph) -> list[rebalance.Moves]:
        """Rebalance now against ``graph`` (the store's ``view()``): drain over-full partitions and refine
        the recent window whatever its cut (reason ``"manual"``)."""
        return rebalance.check(self, labels, graph, self.edges_seen, reason="manual")

    def recent_edges(self) -> np.ndarray:
        """The last ``window_edges`` edges seen (internal ``[src, dst]`` rows), oldest first."""
        m, w = self.edges_seen, len(self.ring)
        if m <= w:
            return self.ring[:m]
        r = m % w
        return np.concatenate([self.ring[r:], self.ring[:r]])

    def state(self) -> dict[str, np.ndarray]:
        live = np.arange(self.st[G.HEAD], self.st[G.TAIL])
        live = live[self.qv[live] >= 0]
        out = super().state()
        out.update(self.rebalance_state.state())
        out.update(
            counts=np.r_[self.st[[G.N_SEEN, G.M_SEEN]], self.sizes],
            watermark=self.fs.copy(),
            queue_vertex=self.qv[live],
            queue_deadline=self.qdl[live],
            queue_edges=self.qn[live],
            queue_neighbors=_used(self.qnb[live], self.qn[live]),
            recent_edges=self.recent_edges(),
        )
        return out

    def _load(self, arrays, labels, num_edges) -> None:
        super()._load(arrays, labels, num_edges)
        self.rebalance_state = rebalance.RebalanceState.from_state(arrays)
        k, n = self.num_partitions, len(labels)
        counts = arrays["counts"]
        if counts.shape != (2 + k,):
            raise ValueError(f"partitioner counts must hold {2 + k} values, got shape {counts.shape}")
        self.st[:] = 0
        self.st[G.N_SEEN], self.st[G.M_SEEN] = counts[:2]
        self.sizes[:] = counts[2:]
        if not np.array_equal(self.sizes, np.bincount(labels[labels >= 0], minlength=k)):
            raise ValueError("partitioner sizes disagree with the partition labels")
        self.fs[:] = arrays["watermark"].reshape(1)
        qv, qdl, qn, qnb = (arrays[f"queue_{x}"] for x in ("vertex", "deadline", "edges", "neighbors"))
        w = len(qv)
        b = self.config.buffer_edges
        if not (len(qdl) == len(qn) == w and qnb.shape == (w, b)):
            raise ValueError("the partitioner's wait queue columns differ in shape")
        if w and (
            qv.min() < 0 or qv.max() >= n or (labels[qv] != PENDING).any() or len(set(qv.tolist())) < w
        ):
            raise ValueError("the wait queue names a vertex that is not waiting")
        if w and (qn.min() < 0 or qn.max() >= b):
            raise ValueError("the wait queue's buffered edge counts are out of range")
        qnb = _used(qnb, qn)  # older checkpoints hold stale values in the unused columns
        used = qnb[qnb != -1]
        if (used < 0).any() or (used >= n).any() or int(qn.sum()) != len(used):
            raise ValueError("the wait queue's buffered edges are out of range")
        if int((labels == PENDING).sum()) != w:
            raise ValueError("a vertex is pending without a wait queue entry")
        self._queue(max(64, 2 * w + 2))
        self.qv[:w], self.qdl[:w], self.qn[:w], self.qnb[:w] = qv, qdl, qn, qnb
        self.st[G.TAIL], self.st[G.LIVE] = w, w
        self.slot = np.full(max(n, len(self.slot)), -1, np.int64)
        self.slot[qv] = np.arange(w)
        recent = arrays["recent_edges"]
        if recent.ndim != 2 or recent.shape[1] != 2 or len(recent) > len(self.ring):
            raise ValueError("recent_edges has the wrong shape")
        if len(recent) and (recent.min() < 0 or recent.max() >= n):
            raise ValueError("recent_edges names unknown vertices")
        m = self.edges_seen
        if len(recent) != min(m, len(self.ring)):
            raise ValueError("recent_edges does not match the edges seen")
        idx = (np.arange(m - len(recent), m) % len(self.ring)) if len(self.ring) else np.zeros(0, np.int64)
        self.ring[idx] = recent


def _used(neighbors: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Wait-queue rows with the columns past each entry's edge count set to -1: a reused queue slot keeps
    its previous vertex's neighbors there, which are no state (a restored run would hash otherwise)."""
    return np.where(np.arange(neighbors.shape[1]) < counts[:, None], neighbors, -1)


__all__ = ["GreedyPartitioner"]
