"""Temporal walk features of query pairs, kept per event (TPNet's random feature propagation).

TPNet (Lu et al., NeurIPS 2024) encodes a pair by the temporal walks between its endpoints: each node
carries random-projected counts of the walks of 1..K events that end at it (``walk_kernels``), updated in
O(K d) per event, and a pair's feature is the Gram matrix of the two endpoints' vectors over all hops
(u with v: walks between them; each with itself: how much walking ends there, a decayed activity).
That reaches what co-occurrence of the latest neighbors cannot: common neighbors and 2- and 3-step paths
over the whole history, with older walks decayed.

The state is a cache over the store, not a second source of truth: it advances through the store's events
in time order, and a query at ``t`` sees exactly the events with time ``< t`` (those not yet folded into
the state are applied to a scratch copy of the rows they touch). So the features depend only on the
store's content, never on how the stream was cut into batches or when queries came; an event that
arrives older than the state's horizon, a different store, or a query earlier than the horizon makes
the state replay the store from the start (O(events)). A restored store therefore restores the features
bit for bit. Deleted edges still count: a walk is a sequence of interactions that happened.

>>> import numpy as np
>>> from streamgnn import EventBatch
>>> from streamgnn.store import TemporalGraphStore
>>> store = TemporalGraphStore()
>>> _ = store.ingest(EventBatch.from_columns(src=[1, 2], dst=[2, 3], t=[1.0, 2.0], eid=[0, 1]))
>>> walks = WalkFeatures(hops=2, dim=256, decays=(0.0,))
>>> u, w = store.node_index([1, 3])
>>> x = walks.products(store, np.array([u]), np.array([w]), np.array([3.0]))[0, 0]
>>> bool(abs(x[0, 5] - 1.0) < 0.25)  # <P[1], 2-event walks ending at 3>: the walk 1 -> 2 -> 3, about 1
True
>>> bool(abs(x[1, 4] - 1.0) < 0.25)  # <1's 1-event walks, 3's>: both met node 2 (one common neighbor)
True
"""

from __future__ import annotations

import threading

import numpy as np

from ..errors import ConfigError
from ..growth import grown_size
from ..store import GraphStore
from . import walk_kernels as W

CLOCKS = ("events", "time")  # what a walk's decay counts (``WalkFeatures``)


class WalkFeatures:
    """Inner products of two nodes' walk vectors (``products``: each with the other and with itself), over
    ``hops`` hops (plus hop 0, the node's random vector) in ``dim`` random dimensions, one channel per
    decay rate in ``decays`` (0 keeps plain counts). ``clock``: ``"events"`` (per event: a walk's weight is
    ``exp(-rate * events since its first event)``) or ``"time"`` (per stream time unit, TPNet's: ``exp(-rate
    * sum over the walk's events of (query time - event time))``). ``seed`` fixes the nodes' random vectors
    (the trainer and a scorer must agree). A model's settings are ``TGNConfig``'s ``walk_*`` fields
    (``PairFeatures.of``)."""

    def __init__(self, hops: int, dim: int, decays: tuple[float, ...], seed: int = 0, clock: str = "events"):
        if not isinstance(hops, int) or hops < 1 or not isinstance(dim, int) or dim < 1:
            raise ConfigError(f"walk hops and dim must be ints >= 1, got {hops!r} and {dim!r}")
        rates = np.asarray(tuple(float(x) for x in decays), np.float64)
        if not len(rates) or not (np.isfinite(rates) & (rates >= 0)).all():
            raise ConfigError(f"walk decays must be one or more finite rates >= 0, got {list(decays)}")
        if clock not in CLOCKS:
            raise ConfigError(f"walk clock must be one of {list(CLOCKS)}, got {clock!r}")
        self.hops, self.dim, self.rates, self.seed, self.clock = hops, dim, rates, int(seed), clock
        self.timed = clock == "time"
        self.table = rate_table(rates, hops, self.timed)
        self._lock = threading.Lock()  # queries advance the state: a service's request threads take turns
        self.reset()

    @property
    def settings(self) -> tuple:
        """What the features depend on besides the store: two objects alike here give the same values."""
        return self.hops, self.dim, tuple(self.rates.tolist()), self.seed, self.clock

    @property
    def shape(self) -> tuple[int, int, int]:
        """One query's products: ``(channels, 2 (hops + 1), 2 (hops + 1))``."""
        return len(self.rates), 2 * (self.hops + 1), 2 * (self.hops + 1)

    def vectors(self, nodes: int | np.ndarray) -> np.ndarray:
        """``float64 [n, dim]``: the fixed random vectors (hop 0) of ``nodes`` (an array of ids, or a count
        ``n``: nodes ``0..n-1``); a node's vector depends on its id and ``seed`` only."""
        ids = np.arange(nodes) if np.isscalar(nodes) else np.asarray(nodes, np.int64)
        out = np.zeros((len(ids), self.dim))
        W.random_vectors(self.seed, ids, out)
        return out

    def nbytes(self) -> int:
        """The state's bytes: every node's random vector and walk rows (allocated capacity included)."""
        return self._P.nbytes + self._H.nbytes + self._lam.nbytes + self._slot.nbytes

    def reset(self) -> None:
        """Forget every event (the next query replays the store)."""
        self._store = None
        self._seen = 0  # edge ids examined
        self._seen_deg = np.zeros(0, np.int64)  # each node's rows in the store then
        self._horizon = -np.inf  # the state holds exactly the events with time < horizon
        self._clock = 0  # how many events that is
        self._newest = -np.inf
        self._P = np.zeros((0, self.dim))
        self._H = np.zeros((0, len(self.rates), self.hops, self.dim))
        self._lam = np.zeros(0)
        self._slot = np.zeros(0, np.int64)
        self._pending = (np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64))

    @property
    def relative_width(self) -> int:
        """One neighbor's values in ``relative`` (``relative_width``)."""
        return relative_width(self.hops, len(self.rates))

    def products(self, store: GraphStore, src: np.ndarray, dst: np.ndarray, t: np.ndarray) -> np.ndarray:
        """``float64 [n, channels, 2 (hops + 1), 2 (hops + 1)]``: per channel the Gram matrix of
        ``src[i]``'s hops 0..hops then ``dst[i]``'s over the events before ``t[i]`` (``[i, c, a, hops + 1
        + b]`` = <src's hop ``a``, dst's hop ``b``>). -1: unknown node (zeros)."""
        return self.relative(store, src, dst, t, np.zeros((len(np.reshape(src, -1)), 2, 0), np.int64))[0]

    def relative(
        self, store: GraphStore, src: np.ndarray, dst: np.ndarray, t: np.ndarray, nbr: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """``products`` and, from the same state, ``float32 [n, 2, k, relative_width]``: for each
        ``w = nbr[i, s, j]``, a neighbor of ``src[i]`` (``s = 0``) or ``dst[i]`` (``s = 1``; -1: none,
        zeros), TPNet's relative encoding: per channel ``<w's hop a, own endpoint's hop b>`` (``[c, a, b]``
        flat), the same against the other endpoint, then ``<w's hop a, w's hop a>``. Zeros for a query with
        an unknown endpoint; a real neighbor's row is never all zeros (its hop 0 with itself)."""
        src, dst = np.asarray(src, np.int64).reshape(-1), np.asarray(dst, np.int64).reshape(-1)
        t = np.ascontiguousarray(np.broadcast_to(np.asarray(t, np.float64), src.shape).reshape(-1))
        if len(dst) != len(src):
            raise ConfigError(f"walk queries need as many destinations as sources: {len(src)} != {len(dst)}")
        nbr = np.ascontiguousarray(nbr, np.int64)
        if nbr.ndim != 3 or nbr.shape[:2] != (len(src), 2):
            raise ConfigError(f"walk neighbors must be [queries, 2, k] ids, got shape {nbr.shape}")
        out = np.empty((len(src), *self.shape))  # ``answer`` writes every entry
        rel = np.empty((*nbr.shape, self.relative_width), np.float32)
        if len(src):
            with self._lock:
                self._answer(store, src, dst, t, out, nbr, rel)
        return out, rel

    def _answer(self, store: GraphStore, src: np.ndarray, dst: np.ndarray, t: np.ndarray, out, nbr, rel):
        self._sync(store, float(t.min()))
        known = self._store.view().num_nodes
        src, dst = np.where(src < known, src, -1), np.where(dst < known, dst, -1)
        answer(
            self._H, self._lam, self._P, self.table, self._slot, self._pending, self._clock, src, dst, t, out,
            np.where(nbr < known, nbr, -1), rel, self.timed,
        )  # fmt: skip

    def _sync(self, store: GraphStore, t_min: float) -> None:
        """Take in the store's new edges and fold the pending ones before ``min(t_min, newest)`` into the
        state, replaying from the start where the state already passed an edge's or the query's time."""
        view = store.view()
        if store is not self._store or view.num_edges < self._seen or t_min < self._horizon:
            self.reset()
            self._store = store
        self._grow(view.num_nodes)
        first, n = self._seen, view.num_edges - self._seen
        if n:
            s, d, self._seen_deg = new_edges(view, first, self._seen_deg)
            et = np.asarray(view.edge_t[first : first + n], np.float64)
            if (et < self._horizon).any():  # older than events the state holds: start over
                self.reset()
                self._store = store
                self._grow(view.num_nodes)
                return self._sync(store, t_min)
            new = by_time(et, s, d)
            joined = tuple(np.concatenate(x) for x in zip(self._pending, new, strict=True))
            pt = self._pending[0]
            # the usual case, every new edge after every pending one, appends; else one sort of them all
            self._pending = by_time(*joined) if len(pt) and et.min() <= pt[-1] else joined
            self._seen = view.num_edges
            self._newest = max(self._newest, float(et.max()))
        # The newest time stays pending: an edge arriving later at that same time must join its group.
        horizon = max(self._horizon, min(t_min, self._newest))
        pt, ps, pd = self._pending
        m = int(np.searchsorted(pt, horizon, side="left"))
        if m:
            self._clock = W.apply_groups(
                self._H, self._lam, self._P, self.table, ps, pd, ps, pd, pt, 0, m, self._clock, self.timed
            )
            self._pending = (pt[m:], ps[m:], pd[m:])
        self._horizon = horizon

    def _grow(self, num_nodes: int) -> None:
        have = len(self._P)
        if num_nodes <= have:
            return
        cap = grown_size(have, num_nodes)
        P = np.zeros((cap, self.dim))
        P[:have] = self._P
        W.random_vectors(self.seed, np.arange(have, cap), P[have:])
        H = np.zeros((cap, *self._H.shape[1:]))
        H[:have] = self._H
        self._P, self._H = P, H
        self._lam = np.concatenate([self._lam, np.zeros(cap - have)])
        self._slot = np.concatenate([self._slot, np.full(cap - have, -1, np.int64)])


def rate_table(rates: np.ndarray, hops: int, timed: bool) -> np.ndarray:
    """``[channels, hops]``: each hop's decay rate in each channel (``walk_kernels``). Per event a hop's walks
    decay as their first event ages; by time each of a walk's events ages at once, so a walk of ``k`` events
    decays ``k`` times as fast (TPNet's score)."""
    per_hop = np.arange(1.0, hops + 1) if timed else np.ones(hops)
    return np.ascontiguousarray(np.asarray(rates, np.float64)[:, None] * per_hop)


def relative_width(hops: int, channels: int) -> int:
    """One neighbor's values in ``WalkFeatures.relative``: per channel ``(hops + 1)^2`` products with its
    own endpoint, as many with the other, and ``hops + 1`` with itself (the encoder's input width)."""
    m = hops + 1
    return channels * (2 * m * m + m)


def new_edges(view, first: int, seen_deg: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(src, dst)`` of a store ``view``'s edges from ``first`` on, read from the rows of the nodes whose
    degree grew past ``seen_deg`` (their degrees when edge ``first`` was next; ``walk_kernels.new_edges``),
    and the degrees now, to pass as ``seen_deg`` next time."""
    n = view.num_edges - first
    s, d = np.empty(n, np.int64), np.empty(n, np.int64)
    if n == 0:
        return s, d, seen_deg
    deg = view.deg[: view.num_nodes].astype(np.int64)  # a copy: the store's grows in place
    before = np.zeros(view.num_nodes, np.int64)
    before[: len(seen_deg)] = seen_deg
    W.new_edges(view.start, deg, before, view.pool, np.flatnonzero(deg != before), first, s, d)
    return s, d, deg


def by_time(t: np.ndarray, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Events ``(t, src, dst)`` in the order the state applies them: by time, then source, then destination
    (a group's sums then round alike however its events arrived, or were split over ranks)."""
    order = np.lexsort((dst, src, t))
    return t[order], src[order], dst[order]


def answer(H, lam, P, table, slot, pending, clock: int, src, dst, t, out, nbr=None, rel=None, timed=False):
    """``out[i]``: query ``(src[i], dst[i], t[i])``'s products over the state ``H``/``lam`` (row = node id,
    ``clock`` events applied) plus the ``pending`` events ``(t, src, dst)`` (``by_time``) before ``t[i]``,
    which go to scratch rows only (``walk_kernels.answer``; ``slot``: all -1, of ``len(P)``). ``table``:
    ``rate_table``'s decay rates; ``timed``: decayed by stream time. ``nbr``: the endpoints' neighbors
    whose relative products go to ``rel`` (``WalkFeatures.relative``)."""
    pt, ps, pd = pending
    prefix = np.searchsorted(pt, t, side="left")
    m = int(prefix.max())
    if nbr is None:
        nbr, rel = np.zeros((len(src), 2, 0), np.int64), np.zeros((len(src), 2, 0, 0), np.float32)
    W.answer(
        H, lam, P, table, timed, slot, ps[:m], pd[:m], pt[:m], clock, src, dst, t, prefix,
        np.argsort(prefix, kind="stable"), out, nbr, rel,
    )  # fmt: skip
