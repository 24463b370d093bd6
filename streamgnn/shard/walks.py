"""Temporal walk features over shards, exact: each vertex's walk rows live with its owner.

``sampling.WalkFeatures`` keeps, per node, random-projected counts of the temporal walks ending at it,
advanced through the store's events in time order; a query at ``t`` sees exactly the events before ``t``.
Over shards the same state is divided: the owner of a vertex keeps its rows (``[channels, hops, dim]`` and
the clock they were last brought to), and what every rank keeps whole is small: the count of events applied
(the clock), the horizon (the state holds exactly the events before it) and the pending events (those at
or after it, typically the newest time stamp only). Hop 0, a node's random vector, is seeded by its global
id (the id one store gives it), so any rank computes it.

Each ``sync`` (a collective, every rank at once; ``ShardPairs.read`` carries step 1 in its request round):

1. every rank sends every other the events its shard took since the last sync whose source it owns (each
   event once: a cut edge sits in both owners' shards), and its earliest query time;
2. every rank, alike: the new events join the pending ones (``walks.by_time``: a time stamp's group is
   applied in one order, however it was split over ranks), and the horizon moves to the earliest query time
   or the newest event time, whichever is earlier, as one process moves it;
3. the pending events before the horizon are applied in chunks of whole groups: each chunk's endpoints' rows
   come from their owners in one exchange (their sizes known to all, so one ``all_to_all``), every rank
   replays the chunk on that working set identically, and each owner keeps its own vertices' new rows. The
   last chunk's working set also holds the endpoints of the events left pending, which a query applies to
   scratch copies (``walk_kernels.answer``).

A query ``(u, v, t)`` is then answered by u's owner from u's rows, v's rows (``ShardPairs`` brings them in
its reply round) and the pending rows. Every operation is one process's, in its order, so the products are
one store's to the bit. An event older than the horizon (a late one), a query before it, or a rank that was
reset or given another shard makes every rank start over: the state is rebuilt from every shard's events
(step 1 with all of them), in chunks, so no rank ever holds more than its own rows and a chunk's working
set. A restored checkpoint therefore rebuilds the same state (nothing of it is saved), and ``reset`` (each
pass) makes the next sync rebuild.
"""

from __future__ import annotations

import numpy as np

from ..growth import grow
from ..sampling import walk_kernels as W
from ..sampling.walks import WalkFeatures, answer, by_time, new_edges
from ..store import TemporalGraphStore
from .comm import Collectives
from .ownership import GlobalIndex

CHUNK = 20_000  # events applied per exchange of rows: bounds a rebuild's or a long catch-up's working set


class ShardWalks:
    """This rank's part of the walk state over ``shard`` (in global ids), with ``config``'s ``walk_*``."""

    def __init__(self, shard: TemporalGraphStore, config, index: GlobalIndex, exchange: Collectives) -> None:
        self.walks = WalkFeatures(config.walk_hops, config.walk_dim, config.walk_decays)
        self.store, self.index, self.exchange = shard, index, exchange
        self.reset()

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.walks.shape

    def reset(self) -> None:
        """Forget every event: the next ``sync`` rebuilds from the shards (every rank resets alike)."""
        w = self.walks
        self._H = np.zeros((0, len(w.rates), w.hops, w.dim))  # owned rows, in the order they came
        self._lam = np.zeros(0)
        self._row = np.full(0, -1, np.int64)  # each global id's row here (-1: none)
        self._seen = 0  # shard edges examined
        self._seen_deg = np.zeros(0, np.int64)  # each shard node's degree then (``walks.new_edges``)
        self._clock = 0
        self._horizon = self._newest = -np.inf
        self._pending = (np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64))
        self._table = (np.zeros(0, np.int64), self._H[:0], self._lam[:0])  # rows of the pending endpoints
        self._restarted = True

    def held(self) -> np.ndarray:
        """The global ids whose walk rows this rank keeps, ascending: its own vertices only (the state is
        divided), those the events applied so far reached."""
        return np.flatnonzero(self._row >= 0)

    def nbytes(self) -> int:
        """This rank's state: its owned rows, the row map and the pending events (the replicated part)."""
        return self._H.nbytes + self._lam.nbytes + self._row.nbytes + sum(x.nbytes for x in self._pending)

    # ------------------------------------------------------------------ advancing the state
    def sync(self, t_min: float) -> None:
        """Bring the state to the shards' events before ``min(t_min over ranks, newest event)``: a
        collective (``t_min``: this rank's earliest query, inf with none). ``ShardPairs`` carries
        ``outgoing`` in its own request round and calls ``advance`` instead."""
        self.advance(self.exchange.all_gather(self.outgoing(t_min), "walk_events"))

    def outgoing(self, t_min: float) -> tuple[np.ndarray, ...]:
        """What this rank sends every other rank for the next ``advance``: its new events (those whose
        source it owns) and ``(t_min, whether it started over)``."""
        return (*self._new_events(), np.array([t_min, float(self._restarted)]))

    def advance(self, got: list[tuple[np.ndarray, ...]]) -> None:
        """``sync``'s work once every rank's ``outgoing`` is here (``got``, in rank order): every rank
        decides alike whether all start over (then one more round brings every event), takes the new
        events in and applies those before the horizon."""
        t, s, d = (np.concatenate([g[i] for g in got]) for i in range(3))
        flags = [bool(g[3][1]) for g in got]
        t_first = min(float(g[3][0]) for g in got)
        self._restarted = False
        late = (len(t) and t.min() < self._horizon) or t_first < self._horizon
        if late or (any(flags) and not all(flags)):
            self.reset()
            self._restarted = False
            return self.sync(t_first)
        if len(t):
            self._pending = by_time(*(np.concatenate(x) for x in zip(self._pending, (t, s, d), strict=True)))
            self._newest = max(self._newest, float(t.max()))
        # the newest time stays pending: an event arriving later at that time must join its group
        horizon = max(self._horizon, min(t_first, self._newest))
        m = int(np.searchsorted(self._pending[0], horizon, side="left"))
        if len(t) or m:  # (else the state and the pending rows stand as the last sync left them)
            self._fold(m)
        self._horizon = horizon

    def _new_events(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(t, src, dst)`` of the shard's edges since the last call whose source this rank owns."""
        view = self.store.view()
        first, n = self._seen, view.num_edges - self._seen
        s, d, self._seen_deg = new_edges(view, first, self._seen_deg)
        t = np.asarray(view.edge_t[first : first + n], np.float64)
        self._seen = view.num_edges
        mine = self.index.owned(s)
        return t[mine], s[mine], d[mine]

    def _fold(self, m: int) -> None:
        """Apply pending events ``0..m-1`` (whole groups) in chunks; keep the rest pending, their endpoints'
        rows in ``_table``."""
        pt, ps, pd = self._pending
        if not len(pt):  # nothing to apply or to keep at hand (every rank knows it alike)
            self._table = (np.zeros(0, np.int64), self._H[:0], self._lam[:0])
            return
        lo = 0
        while True:
            hi = m if m - lo <= CHUNK else int(np.searchsorted(pt, pt[lo + CHUNK - 1], side="right"))
            hi = min(hi, m)
            last = hi >= m
            ends = [ps[lo:hi], pd[lo:hi]] + ([ps[m:], pd[m:]] if last else [])
            ws = np.unique(np.concatenate(ends))
            H, lam = self._gather(ws)
            if hi > lo:
                P = self.walks.vectors(ws)
                rs, rd = np.searchsorted(ws, ps[lo:hi]), np.searchsorted(ws, pd[lo:hi])
                self._clock = W.apply_groups(
                    H, lam, P, self.walks.table, rs, rd, rs, rd, pt[lo:hi], 0, hi - lo, self._clock, False
                )
                self._keep(ws, H, lam)
            if last:
                self._table = (ws, H, lam)
                break
            lo = hi
        self._pending = (pt[m:], ps[m:], pd[m:])

    def _gather(self, ws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rows of global ids ``ws`` (sorted, known to every rank alike) from their owners."""
        ex = self.exchange
        owner = self.index.owner(ws) if len(ws) else np.zeros(0, np.int64)
        sel = [np.flatnonzero(owner == r) for r in range(ex.world_size)]
        mine = self.rows(ws[sel[ex.rank]])
        got = ex.all_to_all([mine] * ex.world_size, "walk_rows", [[len(s)] * 2 for s in sel])
        H, lam = np.empty((len(ws), *self._H.shape[1:])), np.empty(len(ws))
        for s, (g_H, g_lam) in zip(sel, got, strict=True):
            H[s], lam[s] = g_H, g_lam
        return H, lam

    def rows(self, gids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows of owned (or unknown, -1) ``gids`` as the state holds them; no row yet: zeros, clock 0."""
        gids = np.asarray(gids, np.int64)
        row = np.full(len(gids), -1, np.int64)
        ok = (gids >= 0) & (gids < len(self._row))
        row[ok] = self._row[gids[ok]]
        H, lam = np.zeros((len(gids), *self._H.shape[1:])), np.zeros(len(gids))
        H[row >= 0], lam[row >= 0] = self._H[row[row >= 0]], self._lam[row[row >= 0]]
        return H, lam

    def _keep(self, ws: np.ndarray, H: np.ndarray, lam: np.ndarray) -> None:
        """Store the rows of the owned ids among ``ws``."""
        mine = self.index.owned(ws)
        gids = ws[mine]
        if len(gids):
            self._row = grow(self._row, int(gids.max()) + 1, fill=-1)
        new = gids[self._row[gids] < 0]
        if len(new):
            have = int((self._row >= 0).sum())
            self._H, self._lam = grow(self._H, have + len(new)), grow(self._lam, have + len(new))
            self._row[new] = np.arange(have, have + len(new))
        self._H[self._row[gids]], self._lam[self._row[gids]] = H[mine], lam[mine]

    # ------------------------------------------------------------------ queries
    def products(
        self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, dst_rows: tuple[np.ndarray, np.ndarray]
    ) -> np.ndarray:
        """``WalkFeatures.products`` of queries whose sources this rank owns (-1: unknown), after ``sync``;
        ``dst_rows``: each destination's rows from its owner (``rows`` there)."""
        out = np.zeros((len(src), *self.shape))
        if not len(src):
            return out
        ws, ws_H, ws_lam = self._table
        u_H, u_lam = self.rows(src)
        # one table: the pending endpoints' rows (a query replays pending events on them), then the other
        # queried nodes' rows, each once (u's own products are then reused along a row of candidates)
        q = np.concatenate([src, dst])
        q_H, q_lam = np.concatenate([u_H, dst_rows[0]]), np.concatenate([u_lam, dst_rows[1]])
        extra, first, inv = np.unique(q, return_index=True, return_inverse=True)
        gids = np.concatenate([ws, extra])
        H, lam = np.concatenate([ws_H, q_H[first]]), np.concatenate([ws_lam, q_lam[first]])
        idx = len(ws) + inv
        if len(ws):
            at = np.minimum(np.searchsorted(ws, q), len(ws) - 1)
            idx = np.where(ws[at] == q, at, idx)
        idx = np.where(q < 0, -1, idx)
        pt, ps, pd = self._pending
        pending = (pt, np.searchsorted(ws, ps), np.searchsorted(ws, pd))
        P = self.walks.vectors(np.maximum(gids, 0))
        slot = np.full(len(gids), -1, np.int64)
        t = np.ascontiguousarray(t, np.float64)
        n = len(src)
        answer(H, lam, P, self.walks.table, slot, pending, self._clock, idx[:n], idx[n:], t, out)
        return out
