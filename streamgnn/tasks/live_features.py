"""``features``' causal stream features kept up to date as a live job steps its batches, for the online head.

The same per-node figures as ``features.stream_features`` (degree, activity decayed over ``tau``, recency,
unseen) and, for rated edges, the reputation ones (the rater's past mean rating given, the ratee's past mean
received, each with a "none yet" flag), held in arrays by the store's dense node index and updated a batch
at a time after the batch is learned (``observe``). A batch's update is exact: a node's activity at its
newest event of the batch is its old activity decayed to then plus each of its events in the batch decayed
to then. A label scored before a batch reads the state of the batches before it plus the batch's own
events strictly before the label's time (``Recent``), so it reads exactly what ``stream_features`` reads
event by event. Why not the earlier batches alone: on Bitcoin OTC a rater's ratings come in bursts, most
of a rating's predecessors by its rater fall in its own batch of 200, and an online regression on the
features without them scored a test AUC of 0.757 where it scores 0.817 with them (benchmarks/RESULTS.md).
(The pair's past event count, which the offline features add, is not kept: it needs a table of pairs.)

``ids`` maps the dense index back to external ids, so the embeddings service, which has no store, reads
the features of the nodes it is asked about from a checkpoint's state.
"""

from __future__ import annotations

import numpy as np
import torch

from .features import NODE, REPUTATION

COLUMNS = ("degree", "activity", "last", "given_sum", "given_n", "received_sum", "received_n")


class LiveFeatures:
    """Per-node stream state for ``n`` nodes (grows), decayed over ``tau``; ``rated``: edge labels read
    the reputation features too (the events' weights are ratings)."""

    def __init__(self, tau: float, rated: bool) -> None:
        self.tau, self.rated = float(tau), rated
        self.cols = {c: np.zeros(0) for c in COLUMNS}
        self.cols["last"] = np.full(0, np.nan)
        self.ids = np.zeros(0, np.int64)

    def width(self, on_edges: bool) -> int:
        return len(self.names(on_edges))

    def names(self, on_edges: bool) -> tuple[str, ...]:
        if not on_edges:
            return NODE
        return (
            tuple(f"src_{n}" for n in NODE)
            + tuple(f"dst_{n}" for n in NODE)
            + (REPUTATION if self.rated else ())
        )

    def _grow(self, n: int, ids: np.ndarray) -> None:
        have = len(self.cols["degree"])
        if n <= have:
            return
        for c, col in self.cols.items():
            fill = np.nan if c == "last" else 0.0
            self.cols[c] = np.concatenate([col, np.full(n - have, fill)])
        self.ids = np.concatenate([self.ids.astype(ids.dtype, copy=False), ids]) if have else ids.copy()

    def observe(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, w: np.ndarray | None, ids) -> None:
        """Apply a learned batch's edges (dense indices ``src``, ``dst``, times ``t``, weights ``w``);
        ``ids(lo, hi)``: the external ids of dense indices ``lo..hi-1`` (the store's new nodes)."""
        if not len(t):
            return
        n = int(max(src.max(), dst.max())) + 1
        have = len(self.cols["degree"])
        if n > have:
            self._grow(n, ids(have, n))
        c = self.cols
        loops = src == dst
        ends = np.concatenate([src, dst[~loops]])
        times = np.concatenate([t, t[~loops]])
        newest = np.full(n, -np.inf)
        np.maximum.at(newest, ends, times)
        touched = np.unique(ends)
        last = c["last"][touched]
        decay = np.where(np.isnan(last), 0.0, np.exp(-(newest[touched] - np.nan_to_num(last)) / self.tau))
        added = np.zeros(n)
        np.add.at(added, ends, np.exp(-(newest[ends] - times) / self.tau))
        c["activity"][touched] = c["activity"][touched] * decay + added[touched]
        c["last"][touched] = np.fmax(last, newest[touched])
        np.add.at(c["degree"], ends, 1.0)
        if w is not None:
            np.add.at(c["given_sum"], src, w)
            np.add.at(c["given_n"], src, 1.0)
            np.add.at(c["received_sum"], dst, w)
            np.add.at(c["received_n"], dst, 1.0)

    def node(self, nodes: np.ndarray, t: np.ndarray, recent: Recent | None = None) -> np.ndarray:
        """``NODE``'s columns of dense indices ``nodes`` (-1 or beyond: not seen) at times ``t``, counting
        ``recent``'s events strictly before each time too."""
        n, c = len(nodes), self.cols
        ok = (nodes >= 0) & (nodes < len(c["degree"]))
        degree, activity, last = np.zeros(n), np.zeros(n), np.full(n, np.nan)
        degree[ok], last[ok] = c["degree"][nodes[ok]], c["last"][nodes[ok]]
        had = ~np.isnan(last)
        activity[had] = c["activity"][nodes[had]] * np.exp(-np.maximum(t[had] - last[had], 0.0) / self.tau)
        if recent is not None:
            count, added, newest = recent.node(nodes, t, self.tau)
            degree, activity, last = degree + count, activity + added, np.fmax(last, newest)
        out = np.zeros((n, len(NODE)))
        out[:, 3] = 1.0
        seen = ~np.isnan(last)
        age = np.maximum(t[seen] - last[seen], 0.0)
        out[seen] = np.stack([
            np.log1p(degree[seen]), np.log1p(activity[seen]), np.log1p(age), np.zeros(len(age)),
        ], axis=1)  # fmt: skip
        return out

    def rows(
        self, src: np.ndarray, dst: np.ndarray | None, t: np.ndarray, recent: Recent | None = None
    ) -> np.ndarray:
        """The features of labels on ``src`` (and edges to ``dst``) at ``t``, float32 ``[n, width]``;
        ``recent``: the batch about to be stepped, whose events before each label count too."""
        parts = [self.node(src, t, recent)]
        if dst is not None:
            parts.append(self.node(dst, t, recent))
            if self.rated:
                parts.append(self._reputation(src, dst, t, recent))
        return np.concatenate(parts, axis=1).astype(np.float32)

    def _reputation(
        self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, recent: Recent | None
    ) -> np.ndarray:
        c, size = self.cols, len(self.cols["degree"])
        out = np.zeros((len(src), 4))
        for col, (nodes, s, n) in enumerate(
            ((src, "given_sum", "given_n"), (dst, "received_sum", "received_n"))
        ):
            ok = (nodes >= 0) & (nodes < size)
            count = np.zeros(len(nodes))
            total = np.zeros(len(nodes))
            count[ok], total[ok] = c[n][nodes[ok]], c[s][nodes[ok]]
            if recent is not None:
                more, added = recent.rated(col, nodes, t)
                count, total = count + more, total + added
            out[:, 2 * col] = np.divide(total, count, out=np.zeros(len(nodes)), where=count > 0)
            out[:, 2 * col + 1] = count == 0
        return out

    def index(self, ids: np.ndarray) -> np.ndarray:
        """Dense indices of external ``ids`` (-1: never seen), for a reader without the store."""
        order = np.argsort(self.ids, kind="stable")
        pos = np.searchsorted(self.ids[order], ids)
        pos = np.minimum(pos, max(len(order) - 1, 0))
        found = len(order) > 0
        hit = found & (self.ids[order][pos] == ids) if found else np.zeros(len(ids), bool)
        return np.where(hit, order[pos] if found else -1, -1)

    def state(self) -> dict:
        ids = self.ids.tolist() if self.ids.dtype == object else torch.from_numpy(self.ids.astype(np.int64))
        return {"tau": self.tau, "rated": self.rated, "ids": ids,
                "cols": {c: torch.from_numpy(v.copy()) for c, v in self.cols.items()}}  # fmt: skip

    @classmethod
    def from_state(cls, state: dict) -> LiveFeatures:
        live = cls(float(state["tau"]), bool(state["rated"]))
        live.cols = {c: state["cols"][c].numpy().astype(np.float64) for c in COLUMNS}
        ids = state["ids"]
        live.ids = ids.numpy().copy() if isinstance(ids, torch.Tensor) else np.array(ids, dtype=object)
        return live


class Recent:
    """The edges of the batch about to be stepped (dense ``src``, ``dst``, times ``t``, weights ``w`` or
    None), which ``LiveFeatures`` has not taken in yet: what a label at a time within the batch reads of
    them is its nodes' events strictly before that time (module docstring)."""

    def __init__(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, w: np.ndarray | None) -> None:
        loops = src == dst
        self.ends = _Sorted(np.concatenate([src, dst[~loops]]), np.concatenate([t, t[~loops]]))
        # the ratings given by each source and received by each destination
        self.roles = None if w is None else (_Sorted(src, t, w), _Sorted(dst, t, w))

    def node(self, nodes: np.ndarray, t: np.ndarray, tau: float) -> tuple[np.ndarray, ...]:
        """Each node's events before its time: their count, their activity decayed to the time, and the
        newest one's time (NaN: none)."""
        e = self.ends
        lo, hi = e.before(nodes, t)
        count = hi - lo
        owner = np.repeat(np.arange(len(nodes)), count)
        at = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count - lo, count)
        added = np.bincount(owner, weights=np.exp(-(t[owner] - e.t[at]) / tau), minlength=len(nodes))
        newest = np.where(count > 0, e.t[np.maximum(hi - 1, 0)] if len(e.t) else np.nan, np.nan)
        return count.astype(np.float64), added, newest

    def rated(self, role: int, nodes: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The count and sum of the ratings each node gave (``role`` 0) or received (1) before its time
        (none where the edges carry none, as ``LiveFeatures.observe`` counts them)."""
        if self.roles is None:
            return np.zeros(len(nodes)), np.zeros(len(nodes))
        side = self.roles[role]
        lo, hi = side.before(nodes, t)
        return (hi - lo).astype(np.float64), side.cumulative[hi] - side.cumulative[lo]


class _Sorted:
    """Events by (node, time), for the range of a node's events before a time; with weights, their
    running sum."""

    def __init__(self, nodes: np.ndarray, t: np.ndarray, w: np.ndarray | None = None) -> None:
        order = np.lexsort((t, nodes))
        self.nodes, self.t = np.asarray(nodes, np.int64)[order], np.asarray(t, np.float64)[order]
        self.cumulative = None if w is None else np.r_[0.0, np.cumsum(np.asarray(w, np.float64)[order])]

    def before(self, nodes: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each node and time, the positions ``lo:hi`` of its events strictly before that time."""
        lo = np.searchsorted(self.nodes, nodes, side="left")
        keys = np.rec.fromarrays([self.nodes, self.t])
        asked = np.rec.fromarrays([np.asarray(nodes, np.int64), np.asarray(t, np.float64)])
        return lo, np.searchsorted(keys, asked, side="left")
