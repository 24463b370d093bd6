"""``features``' causal stream features kept up to date as a live job steps its batches, for the online head.

The same per-node figures as ``features.stream_features`` (degree, activity decayed over ``tau``, recency,
unseen) and, for rated edges, the reputation ones (the rater's past mean rating given, the ratee's past mean
received, each with a "none yet" flag), held in arrays by the store's dense node index and updated a batch
at a time after the batch is learned (``observe``), so a label scored before a batch reads only earlier
batches' events, as its embedding does. A batch's update is exact: a node's activity at its newest event
of the batch is its old activity decayed to then plus each of its events in the batch decayed to then.
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

    def node(self, nodes: np.ndarray, t: np.ndarray) -> np.ndarray:
        """``NODE``'s columns of dense indices ``nodes`` (-1 or beyond: not seen) at times ``t``."""
        out = np.zeros((len(nodes), len(NODE)))
        out[:, 3] = 1.0
        ok = (nodes >= 0) & (nodes < len(self.cols["degree"]))
        ok[ok] = ~np.isnan(self.cols["last"][nodes[ok]])
        k = nodes[ok]
        age = np.maximum(t[ok] - self.cols["last"][k], 0.0)
        out[ok] = np.stack([
            np.log1p(self.cols["degree"][k]), np.log1p(self.cols["activity"][k] * np.exp(-age / self.tau)),
            np.log1p(age), np.zeros(len(k)),
        ], axis=1)  # fmt: skip
        return out

    def rows(self, src: np.ndarray, dst: np.ndarray | None, t: np.ndarray) -> np.ndarray:
        """The features of labels on ``src`` (and edges to ``dst``) at ``t``, float32 ``[n, width]``."""
        parts = [self.node(src, t)]
        if dst is not None:
            parts.append(self.node(dst, t))
            if self.rated:
                parts.append(self._reputation(src, dst))
        return np.concatenate(parts, axis=1).astype(np.float32)

    def _reputation(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        c, size = self.cols, len(self.cols["degree"])
        out = np.zeros((len(src), 4))
        for col, (nodes, s, n) in enumerate(
            ((src, "given_sum", "given_n"), (dst, "received_sum", "received_n"))
        ):
            ok = (nodes >= 0) & (nodes < size)
            count = np.zeros(len(nodes))
            total = np.zeros(len(nodes))
            count[ok], total[ok] = c[n][nodes[ok]], c[s][nodes[ok]]
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
