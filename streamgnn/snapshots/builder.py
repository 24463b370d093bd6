"""SnapshotBuilder: snapshot t+1 from snapshot t plus the events between them, never from the history.

The builder reads the store's logs through a ``ChangeFeed`` (each read costs what changed), queues the
events by time, and at ``advance(t)`` applies the ones now due to its live state:

- ``state`` kind: a due edge that the store has not deleted by ``t`` adds one instance to its pair; a due
  delete makes its pair be recounted from the store's own edges of that pair (``edges_between``), so the
  deletion rules, late adds and deletes that cover them included, are the store's and exist once.
- ``window`` kind: due edges enter a time-ordered FIFO, edges older than ``t - width`` leave it.
- node features: the newest version (time, then arrival) due so far per node; nodes not seen yet are zeros.

Events that arrive after their snapshot was cut (later than the lateness the caller waited for) are applied
at the next one, so every later snapshot is still exact. ``num_nodes`` of snapshot ``t`` is one more than
the largest internal id in an edge or feature version with time <= t (ids are dense in order of first
appearance). Equality with ``snapshot_at`` (the same view from scratch) is tested with deletes, late
events and feature updates.

    >>> import numpy as np
    >>> from streamgnn import EventBatch
    >>> from streamgnn.store import TemporalGraphStore
    >>> from streamgnn.snapshots import SnapshotSpec
    >>> store = TemporalGraphStore()
    >>> events = EventBatch.from_columns(src=[1, 1, 2], dst=[2, 2, 3], t=[0.0, 1.0, 5.0], eid=[0, 1, 2])
    >>> _ = store.ingest(events)
    >>> b = SnapshotBuilder(store, SnapshotSpec(every=2.0, weight="count"))
    >>> s = b.advance(2.0)
    >>> s.edge_index.tolist(), s.edge_weight.tolist(), b.advance(6.0).edge_weight.tolist()
    ([[0], [1]], [2.0], [2.0, 1.0])
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ..configs import from_record, stamp
from ..errors import SnapshotError
from ..growth import grow, grown_size
from ..store import LogPosition, StoreChanges, TemporalGraphStore
from .pairs import PairTable, key_pairs, pair_keys
from .queue import TimeQueue
from .snapshot import Snapshot, emit
from .spec import SnapshotSpec


def canonical(src: np.ndarray, dst: np.ndarray, undirected: bool) -> tuple[np.ndarray, np.ndarray]:
    """Pair endpoints as the view keys them: undirected pairs as (min, max)."""
    return (np.minimum(src, dst), np.maximum(src, dst)) if undirected else (src, dst)


def decay_terms(spec: SnapshotSpec, t: float, times: np.ndarray) -> np.ndarray:
    if spec.weight != "decay":
        return np.zeros(len(times))
    return np.exp(-(t - times) / spec.tau)


class SnapshotBuilder:
    """Cuts snapshots of ``store`` at non-decreasing times with ``advance``; starts from ``position``
    (default: the beginning of the store's logs, so a store with history is read once). ``arrivals``: fill
    ``Snapshot.arrived`` (the pairs due since the last snapshot; link prediction needs them)."""

    def __init__(
        self,
        store: TemporalGraphStore,
        spec: SnapshotSpec,
        *,
        position: LogPosition | None = None,
        arrivals: bool = False,
    ):
        if not isinstance(spec, SnapshotSpec):
            raise SnapshotError(f"spec must be a SnapshotSpec, got {type(spec).__name__}")
        self.store, self.spec, self.arrivals = store, spec, arrivals
        self.feed = store.change_feed(position or LogPosition())
        self.pairs = PairTable()
        self.edges, self.deletes, self.updates = TimeQueue(), TimeQueue(), TimeQueue()
        self.fifo = {"t": np.zeros(0), "slot": np.zeros(0, np.int64), "w": np.zeros(0)}  # window kind
        self.x = np.zeros((0, 0), np.float32)
        self.ver_t = np.zeros(0)  # time and log index of each node's version in ``x`` (-inf, -1: none)
        self.ver_i = np.zeros(0, np.int64)
        self.high = 0  # 1 + the largest node id seen in an event due so far
        self.t = -math.inf
        self.index = 0
        self._x_out: np.ndarray | None = None  # the last emitted x, reused while nothing changes it

    # ------------------------------------------------------------------ reading
    def _read(self) -> None:
        ch: StoreChanges = self.feed.read()
        e = ch.edges
        w = np.ones(len(e)) if e.weight is None else e.weight.astype(np.float64)
        self.edges.push({"t": e.t, "id": e.eid, "src": e.src, "dst": e.dst, "w": w})
        if self.spec.kind == "state":  # a window ignores deletions: it shows what arrived
            self.deletes.push({"t": ch.del_t, "id": np.arange(ch.start.deletions, ch.end.deletions),
                               "src": ch.del_src, "dst": ch.del_dst})  # fmt: skip
        dim = self.store.node_feature_dim or 0
        feats = ch.upd_features if ch.upd_features is not None else np.zeros((len(ch.upd_t), dim), np.float32)
        queued = self.updates.cols.get("feat")
        if queued is not None and queued.shape[1] == 0 < dim:  # versions read before the stream had features
            self.updates.cols["feat"] = np.zeros((len(queued), dim), np.float32)
        self.updates.push({"t": ch.upd_t, "id": ch.upd_index, "node": ch.upd_node, "feat": feats})

    def earliest(self) -> float | None:
        """The earliest time among the events read but not yet due (None: nothing pending)."""
        self._read()
        heads = [float(q.cols["t"][q.head]) for q in (self.edges, self.deletes, self.updates) if len(q)]
        return min(heads, default=None)

    # ------------------------------------------------------------------ one step
    def advance(self, t: float) -> Snapshot:
        """The snapshot at ``t`` from everything the store holds now (call once the events up to ``t`` are
        in, e.g. when the watermark has passed ``t`` plus the allowed lateness)."""
        t = float(t)
        if not t >= self.t:
            raise SnapshotError(f"snapshot times must not go back: asked for t={t} after t={self.t}")
        spec = self.spec
        self._read()
        due = self.edges.pop(t, inclusive=spec.kind == "state")
        self._see(due)
        arrived = self._arrived(due) if self.arrivals else None
        if spec.kind == "window":  # edges at exactly t enter the next window, but their nodes exist at t
            self._see(self.edges.peek(t))
        if spec.kind == "state":
            self._advance_state(t, due)
        else:
            self._advance_window(t, due)
        self._apply_updates(self.updates.pop(t, inclusive=True))
        remap = self.pairs.compact()
        if remap is not None and spec.kind == "window":
            self.fifo["slot"] = remap[self.fifo["slot"]]
        live = np.flatnonzero(self.pairs.live())
        src, dst = self.pairs.endpoints()
        if spec.weight == "decay" and spec.kind == "window":
            terms = decay_terms(spec, t, self.fifo["t"])
            decay = np.bincount(self.fifo["slot"], terms, minlength=self.pairs.n)
        else:
            decay = self.pairs.decay[: self.pairs.n]
        n = self._num_nodes(t)
        snap = emit(
            spec, t, self.index, src[live], dst[live], self.pairs.count[live], self.pairs.wsum[live],
            decay[live], self._features(n), n,
        )  # fmt: skip
        self.t, self.index = t, self.index + 1
        return replace(snap, arrived=arrived)

    def _arrived(self, due: dict) -> np.ndarray:
        if not due or not len(due["src"]):
            return np.zeros((2, 0), np.int64)
        keys = np.unique(pair_keys(*canonical(due["src"], due["dst"], self.spec.undirected)))
        return np.stack(key_pairs(keys))

    def _see(self, edges: dict) -> None:
        if edges and len(edges["src"]):
            self.high = max(self.high, int(edges["src"].max()) + 1, int(edges["dst"].max()) + 1)

    def _advance_state(self, t: float, due: dict) -> None:
        spec, pairs = self.spec, self.pairs
        if spec.weight == "decay" and math.isfinite(self.t):
            pairs.decay[: pairs.n] *= math.exp(-(t - self.t) / spec.tau)
        if due:
            alive = self.store.deleted_at(due["id"]) > t
            src, dst = canonical(due["src"][alive], due["dst"][alive], spec.undirected)
            pairs.add(src, dst, due["w"][alive], decay_terms(spec, t, due["t"][alive]))
        dels = self.deletes.pop(t, inclusive=True)
        if dels:
            self._recount(t, *canonical(dels["src"], dels["dst"], spec.undirected))

    def _recount(self, t: float, src: np.ndarray, dst: np.ndarray) -> None:
        """Recount the pairs named by due deletes from the store's edges of those pairs."""
        pairs, spec = self.pairs, self.spec
        src, dst = key_pairs(np.unique(pair_keys(src, dst)))
        slots = pairs.find(src, dst)
        known = slots >= 0
        src, dst, slots = src[known], dst[known], slots[known]
        if not len(slots):
            return
        q = np.arange(len(slots))
        if spec.undirected:  # both directions feed an undirected pair (a self-loop only once)
            back = src != dst
            q = np.concatenate([q, q[back]])
            src, dst = np.concatenate([src, dst[back]]), np.concatenate([dst, src[back]])
        row_pair, table = self.store.edges_between(src, dst)
        ok = (table.t <= t) & (table.deleted_at > t)
        slot = slots[q[row_pair[ok]]]
        w = np.ones(len(slot)) if table.weight is None else table.weight[ok].astype(np.float64)
        n = pairs.n
        touched = slots
        pairs.count[touched], pairs.wsum[touched], pairs.decay[touched] = 0, 0.0, 0.0
        pairs.count[:n] += np.bincount(slot, minlength=n)
        pairs.wsum[:n] += np.bincount(slot, w, minlength=n)
        pairs.decay[:n] += np.bincount(slot, decay_terms(spec, t, table.t[ok]), minlength=n)

    def _advance_window(self, t: float, due: dict) -> None:
        spec, pairs, fifo = self.spec, self.pairs, self.fifo
        lo = t - spec.width
        if due:
            keep = due["t"] >= lo  # older ones (events that came after their window was cut) are past
            src, dst = canonical(due["src"][keep], due["dst"][keep], spec.undirected)
            slot = pairs.add(src, dst, due["w"][keep], np.zeros(int(keep.sum())))
            new = {"t": due["t"][keep], "slot": slot, "w": due["w"][keep]}
            late = len(fifo["t"]) and len(new["t"]) and new["t"][0] < fifo["t"][-1]
            fifo = {k: np.concatenate([fifo[k], new[k]]) for k in fifo}
            if late:
                order = np.argsort(fifo["t"], kind="stable")
                fifo = {k: v[order] for k, v in fifo.items()}
        cut = int(np.searchsorted(fifo["t"], lo, "left"))
        if cut:
            gone = fifo["slot"][:cut]
            n = pairs.n
            pairs.count[:n] -= np.bincount(gone, minlength=n)
            pairs.wsum[:n] -= np.bincount(gone, fifo["w"][:cut], minlength=n)
            fifo = {k: v[cut:].copy() for k, v in fifo.items()}
        self.fifo = fifo

    def _apply_updates(self, due: dict) -> None:
        if not due or not len(due["t"]):
            return
        node, feat = due["node"], due["feat"]
        self.high = max(self.high, int(node.max()) + 1)
        self._grow(self.high, feat.shape[1])
        last = len(node) - 1 - np.unique(node[::-1], return_index=True)[1]  # newest due version per node
        v = node[last]
        tt, ii = due["t"][last], due["id"][last]
        newer = (tt > self.ver_t[v]) | ((tt == self.ver_t[v]) & (ii > self.ver_i[v]))
        v, last = v[newer], last[newer]
        if len(v):
            self.x[v] = feat[last]
            self.ver_t[v], self.ver_i[v] = due["t"][last], due["id"][last]
            self._x_out = None

    def _grow(self, n: int, dim: int) -> None:
        rows, cols = self.x.shape
        if n <= rows and dim == cols:
            return
        if dim != cols and rows and cols:
            raise SnapshotError(f"node feature width changed from {cols} to {dim}")
        x = np.zeros((grown_size(rows, n) if n > rows else rows, dim), np.float32)
        x[:rows, : min(cols, dim)] = self.x[:, : min(cols, dim)]
        self.x = x
        self.ver_t, self.ver_i = grow(self.ver_t, len(x), -math.inf), grow(self.ver_i, len(x), -1)
        self._x_out = None

    def _num_nodes(self, t: float) -> int:
        fixed = self.spec.num_nodes
        if fixed is None:
            return self.high
        if self.high > fixed:
            raise SnapshotError(
                f"node id {self.high - 1} appears by t={t} but the spec fixes num_nodes={fixed}; "
                f"raise num_nodes or leave it None to grow with the stream"
            )
        return fixed

    def _features(self, n: int) -> np.ndarray | None:
        dim = self.store.node_feature_dim or 0
        if not dim:
            return None
        self._grow(n, dim)
        if self._x_out is None or len(self._x_out) != n:
            self._x_out = self.x[:n].copy()
        return self._x_out

    # ------------------------------------------------------------------ state
    def close(self) -> None:
        """Stop reading the store (its change journal is freed once no reader is left)."""
        self.feed.close()

    @property
    def position(self) -> LogPosition:
        return self.feed.position

    def nbytes(self) -> int:
        """Bytes of the builder's own state (pairs, queues, window, features): what a live run holds
        beside the store."""
        queues = self.edges.nbytes() + self.deletes.nbytes() + self.updates.nbytes()
        arrays = [*self.fifo.values(), self.x, self.ver_t, self.ver_i]
        return self.pairs.nbytes() + queues + sum(a.nbytes for a in arrays)

    def state(self) -> tuple[dict[str, np.ndarray], dict]:
        """``(arrays, values)`` to checkpoint; ``from_state`` continues exactly where this stands."""
        self._read()  # consume the logs, so the position is the store's now and a restore reads O(change)
        arrays = {**{f"pairs_{k}": v for k, v in self.pairs.state().items()},
                  **self.edges.state("edges_"), **self.deletes.state("deletes_"),
                  **self.updates.state("updates_"), **{f"fifo_{k}": v for k, v in self.fifo.items()},
                  "x": self.x, "ver_t": self.ver_t, "ver_i": self.ver_i}  # fmt: skip
        pos = self.position
        values = {"spec": stamp(self.spec.to_dict()), "t": self.t, "index": self.index, "high": self.high,
                  "position": [pos.edges, pos.deletions, pos.updates], "arrivals": self.arrivals}  # fmt: skip
        return arrays, values

    @classmethod
    def from_state(
        cls, store: TemporalGraphStore, arrays: dict[str, np.ndarray], values: dict, where: str = "snapshots"
    ) -> SnapshotBuilder:
        spec = from_record(SnapshotSpec, values["spec"], f"{where}: spec", "snapshots.spec")
        position = LogPosition(*(int(v) for v in values["position"]))
        b = cls(store, spec, position=position, arrivals=bool(values["arrivals"]))
        b.pairs = PairTable.from_state({k[6:]: v for k, v in arrays.items() if k.startswith("pairs_")})
        b.edges = TimeQueue.from_state(arrays, "edges_")
        b.deletes = TimeQueue.from_state(arrays, "deletes_")
        b.updates = TimeQueue.from_state(arrays, "updates_")
        b.fifo = {k: np.array(arrays[f"fifo_{k}"]) for k in ("t", "slot", "w")}
        b.x, b.ver_t, b.ver_i = (np.array(arrays[k]) for k in ("x", "ver_t", "ver_i"))
        b.t, b.index, b.high = float(values["t"]), int(values["index"]), int(values["high"])
        return b
