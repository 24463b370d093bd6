"""TemporalGraphStore: a temporal graph that grows in O(batch) and answers time-travel queries.

Every node owns one time-ordered block of incident edges (both directions, see ``kernels``), so a
sampler finds "edges before t" with one binary search and inserting a batch touches only the blocks of
the batch's endpoints. Events are applied in arrival order by one sequential kernel, so the content
never depends on where batch boundaries fell.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import checkpoint
from ..configs import from_record
from ..errors import CheckpointError, ConfigError, EventValidationError, UnknownNodeError
from ..events import DeadLetter, EventBatch, EventKind
from ..growth import grow
from ..partition import make_partitioner
from . import kernels as K
from . import state as persist
from .admission import (
    INGEST,
    NO_LIVE_EDGE,
    Admission,
    AdmissionConfig,
    Admits,
    Admitted,
    event_payload,
    plain,
)
from .changes import ChangeFeed, ChangeLog, LogPosition, StoreChanges, pair_edges
from .config import StoreConfig
from .contract import FeatureView, TCSRView
from .tables import EdgeTable, live, to_pyg

ADD, DELETE, UPDATE = (int(k) for k in EventKind)
COMPACT_AT = 0.15  # a compacted pool fuller than this fraction of free rows grows instead


@dataclass
class IngestReport:
    applied: int = 0
    duplicates: int = 0
    late: int = 0
    dead_letters: list[DeadLetter] = field(default_factory=list)


def _rows(pool: np.ndarray) -> np.ndarray:
    """A [capacity, 2] int32 pool as one int64 word per row (a view), for kernels that move whole rows."""
    return pool.view(np.int64).reshape(-1)


class TemporalGraphStore(Admits):
    """The graph (see the module docstring); its admission state (``ids``, ``seen``, ``watermark``) is
    ``self.admission``'s, its persistence in ``state``, its change log in ``changes``."""

    def __init__(self, config: StoreConfig | None = None) -> None:
        self.config = config or StoreConfig()
        self.admission = Admission(AdmissionConfig(self.config.allowed_lateness, self.config.dense_ids))
        self.counters = np.zeros(K.NUM_COUNTERS, np.int64)
        self.partition = np.zeros(0, np.int32)  # written by the partitioner (-1: a vertex waits)
        self.partitioner = make_partitioner(self.config.partitioner, self.config.num_partitions)
        self.start = np.zeros(0, np.int64)
        self.deg = np.zeros(0, np.int64)
        self.cap = np.zeros(0, np.int64)
        self.pool = np.zeros((0, 2), np.int32)
        self.edge_t = np.zeros(0, np.float64)
        self.edge_del = np.zeros(0, np.float64)
        self.edge_weight: np.ndarray | None = None
        self.edge_feat: np.ndarray | None = None
        self.ustart = np.zeros(0, np.int64)
        self.udeg = np.zeros(0, np.int64)
        self.ucap = np.zeros(0, np.int64)
        self.upool = np.zeros((0, 2), np.int32)
        self.upd_t = np.zeros(0, np.float64)
        self.upd_node = np.zeros(0, np.int32)
        self.node_feat: np.ndarray | None = None
        self.del_src = np.zeros(0, np.int32)
        self.del_dst = np.zeros(0, np.int32)
        self.del_t = np.zeros(0, np.float64)
        self.source_offsets: dict[str, int] = {}
        self._log = ChangeLog(self.changes_since)  # the feeds' journal of new edges' endpoints
        self._views: tuple[TCSRView, FeatureView] | None = None  # until the next mutation (``_changed``)

    # ------------------------------------------------------------------ sizes
    @property
    def num_nodes(self) -> int:
        return self.ids.size

    @property
    def num_edges(self) -> int:
        return int(self.counters[K.EDGES])

    @property
    def num_node_updates(self) -> int:
        return int(self.counters[K.UPDATES])

    @property
    def edge_feature_dim(self) -> int | None:
        return None if self.edge_feat is None else self.edge_feat.shape[1]

    @property
    def node_feature_dim(self) -> int | None:
        return None if self.node_feat is None else self.node_feat.shape[1]

    # ------------------------------------------------------------------ ingest
    def ingest(self, batch: EventBatch, where: str = INGEST) -> IngestReport:
        """Apply a batch; bad, late or unmatched events become dead letters, duplicates are skipped."""
        if not len(batch):
            return IngestReport()
        return self.apply(batch, self.admit(batch, where), where)

    def admit(self, batch: EventBatch, where: str = INGEST) -> Admitted:
        """The first half of ``ingest``: admission's decision on ``batch`` (new nodes get their ids and empty
        rows; no edge is applied yet), for a caller that reads the graph as it was before ``apply``."""
        if not len(batch):
            none = np.zeros(0, np.int64)
            return Admitted(batch, none, none, none, np.zeros(0, bool), 0, self.ids.size)
        self._changed()
        widths = (
            ("edge", self.edge_feature_dim, (ADD,), False),
            ("node", self.node_feature_dim, (UPDATE,), False),
        )
        adm = self.admission.admit(batch, where, widths)
        if self.ids.size > adm.first_new:
            self._add_nodes(adm.first_new, self.ids.size)
        return adm

    def apply(self, batch: EventBatch, adm: Admitted, where: str = INGEST) -> IngestReport:
        """The second half of ``ingest``: apply what ``admit`` admitted of ``batch``."""
        report = IngestReport()
        if not len(batch):
            return report
        self._changed()  # (the views handed out between admit and apply are of the graph before)
        letters, ev = adm.dead_letters, adm.events
        report.duplicates, report.late = adm.duplicates, adm.n_late
        if len(ev):
            counts = np.bincount(ev.kind.astype(np.intp, copy=False), minlength=3)
            status, edge_of, upd_of = self._apply(ev, adm.src, adm.dst, adm.late, counts)
            self._log.record(edge_of, adm.src, adm.dst)
            self.partitioner.observe(self.partition, ev.kind, adm.src, adm.dst, ev.t, graph=self.view)
            nomatch = np.flatnonzero(status).tolist() if counts[DELETE] else []
            for i in nomatch:
                reason = NO_LIVE_EDGE.format(src=plain(ev.src[i]), dst=plain(ev.dst[i]), t=plain(ev.t[i]))
                letters.append(DeadLetter(reason, where, None, int(adm.rows[i]), int(ev.eid[i])))
            self._write_payloads(ev, edge_of, upd_of)
            report.applied = len(ev) - len(nomatch)
        report.dead_letters = [dataclasses.replace(d, payload=event_payload(batch, d.index)) for d in letters]
        return report

    def allow_lateness(self, allowed: float) -> None:
        """Admit from now on what lags the watermark by up to ``allowed`` (``StoreConfig.allowed_lateness``):
        a setting of the run that feeds the store, not part of what it holds, so a run resumed from a
        checkpoint's store sets its own."""
        self.config = dataclasses.replace(self.config, allowed_lateness=allowed)
        self.admission.config = dataclasses.replace(self.admission.config, allowed_lateness=allowed)

    def _add_nodes(self, lo: int, hi: int) -> None:
        self._grow_together(("start", "deg", "cap", "ustart", "udeg", "ucap", "partition"), hi)
        self.partitioner.add_vertices(self.partition, lo, hi, self.ids.external(np.arange(lo, hi)))

    def _grow_together(self, names: tuple[str, ...], n: int) -> None:
        """``grow`` arrays that always share one length, checking it once: most batches need no room."""
        if n > len(getattr(self, names[0])):
            for name in names:
                setattr(self, name, grow(getattr(self, name), n))

    def _apply(self, ev, src, dst, late, counts):
        n_add, n_del, n_upd = counts.tolist()
        c = self.counters
        self.edge_t = grow(self.edge_t, int(c[K.EDGES]) + n_add)
        if n_del and not len(self.edge_del):
            self.edge_del = np.full(len(self.edge_t), np.inf)
        if len(self.edge_del):
            self.edge_del = grow(self.edge_del, len(self.edge_t), np.inf)
        self._grow_together(("del_src", "del_dst", "del_t"), int(c[K.DELETIONS]) + n_del)
        self._grow_together(("upd_t", "upd_node"), int(c[K.UPDATES]) + n_upd)
        n = len(ev)
        status = np.empty(n, np.int8)
        edge_of = np.empty(n, np.int64)
        upd_of = np.empty(n, np.int64)
        i = 0
        while True:
            i = K.apply_events(
                ev.kind,
                src,
                dst,
                ev.t,
                late,
                i,
                self.start,
                self.deg,
                self.cap,
                self.pool,
                self.edge_t,
                self.edge_del,
                self.del_src,
                self.del_dst,
                self.del_t,
                self.ustart,
                self.udeg,
                self.ucap,
                self.upool,
                self.upd_t,
                self.upd_node,
                c,
                status,
                edge_of,
                upd_of,
            )
            if i >= n:
                break
            self._make_room(i, ev, src, dst)
        return status, edge_of, upd_of

    def _make_room(self, i: int, ev: EventBatch, src: np.ndarray, dst: np.ndarray) -> None:
        """The pool that stopped event ``i`` is full: compact it, into a larger array if still too full.

        Compacting only when full bounds a pool at 1/(1 - COMPACT_AT) of its blocks' capacity with one
        copy per fill, so both garbage and slack stay small without a separate sweep.
        """
        adj = ev.kind[i] != UPDATE
        if adj:
            start, deg, cap, pool = self.start, self.deg, self.cap, self.pool
            need = K.rows_needed(deg, cap, src[i], dst[i])
            used, garbage = K.USED, K.GARBAGE
        else:
            start, deg, cap, pool = self.ustart, self.udeg, self.ucap, self.upool
            need = K.grown(cap[src[i]])
            used, garbage = K.UUSED, K.UGARBAGE
        live = int(self.counters[used] - self.counters[garbage]) + need
        size = max(len(pool), int(live / (1 - COMPACT_AT)) + 1024)
        fresh = np.zeros((size, 2), np.int32)
        self.counters[used] = K.compact(start, deg, cap, _rows(pool), self.num_nodes, _rows(fresh))
        self.counters[garbage] = 0
        if adj:
            self.pool = fresh
        else:
            self.upool = fresh

    def _write_payloads(self, ev: EventBatch, edge_of: np.ndarray, upd_of: np.ndarray) -> None:
        if (
            ev.weight is None
            and ev.features is None
            and self.edge_weight is None
            and self.edge_feat is None
            and self.node_feat is None
        ):
            return  # a stream without payloads, the common case: skip the masks below
        made = edge_of >= 0
        n_edges = self.num_edges
        if ev.weight is not None and self.edge_weight is None and made.any():
            self.edge_weight = np.ones(len(self.edge_t), np.float32)
        if self.edge_weight is not None:
            self.edge_weight = grow(self.edge_weight, n_edges, 1.0)
            if ev.weight is not None and made.any():
                self.edge_weight[edge_of[made]] = ev.weight[made]
        if ev.features is not None and self.edge_feat is None and made.any():
            self.edge_feat = np.zeros((len(self.edge_t), ev.feature_dim), np.float32)
        if self.edge_feat is not None:
            self.edge_feat = grow(self.edge_feat, n_edges)
            if ev.features is not None and made.any():  # a batch of another width may hold only updates
                self.edge_feat[edge_of[made]] = ev.features[made]
        upd = upd_of >= 0
        if ev.features is not None and self.node_feat is None and upd.any():
            self.node_feat = np.zeros((len(self.upd_t), ev.feature_dim), np.float32)
        if self.node_feat is not None:
            self.node_feat = grow(self.node_feat, self.num_node_updates)
            if ev.features is not None and upd.any():
                self.node_feat[upd_of[upd]] = ev.features[upd]

    # ------------------------------------------------------------------ queries
    def _changed(self) -> None:
        """Forget the views handed out: every mutation of the arrays or sizes calls this first."""
        self._views = None

    def _current_views(self) -> tuple[TCSRView, FeatureView]:
        if self._views is None:
            graph = TCSRView(
                self.start, self.deg, self.pool, self.edge_t, self.edge_del, self.num_nodes, self.num_edges,
                self.watermark,
            )  # fmt: skip
            feats = FeatureView(
                self.edge_feat, self.ustart, self.udeg, self.upool, self.upd_t, self.node_feat
            )
            self._views = (graph, feats)
        return self._views

    def view(self) -> TCSRView:
        """The adjacency arrays (``GraphStore`` contract); the same object until the next ingest."""
        return self._current_views()[0]

    def feature_view(self) -> FeatureView:
        """The feature arrays (``FeatureStore`` contract); the same object until the next ingest."""
        return self._current_views()[1]

    def node_index(self, ext_ids, *, strict: bool = True) -> np.ndarray:
        """Internal ids of external ids; unknown ids raise (``strict``) or map to -1."""
        arr = np.asarray(ext_ids, dtype=object if self.ids.id_type == "str" else None)
        if arr.ndim == 0:
            arr = arr.reshape(1)
        if arr.ndim != 1:
            raise ConfigError(f"node ids must be a scalar or 1-D, got shape {arr.shape}")
        got = self.ids.lookup(arr)
        if strict and (got < 0).any():
            bad = arr[got < 0][:5].tolist()
            raise UnknownNodeError(f"unknown node ids {bad}: the store has not seen them in any event")
        return got

    def external_ids(self, internal) -> np.ndarray:
        return self.ids.external(internal)

    def neighbors(self, node, t: float = math.inf, direction: str = "both") -> EdgeTable:
        """Edges incident to external ``node`` valid at ``t``, in time order (``direction``: out/in/both)."""
        if direction not in ("out", "in", "both"):
            raise EventValidationError(f"direction must be 'out', 'in' or 'both', got {direction!r}")
        v = int(self.node_index([node])[0])
        block = self.pool[self.start[v] : self.start[v] + self.deg[v]]
        codes = block[:, 1].astype(np.int64)
        e = np.where(codes >= 0, codes, -codes - 1)
        ok = self.edge_t[e] <= t
        if len(self.edge_del):
            ok &= live(self.edge_del[e], t)
        if direction == "out":
            ok &= codes >= 0
        elif direction == "in":
            ok &= codes < 0
        e, nbr, codes = e[ok], block[ok, 0].astype(np.int64), codes[ok]
        src = np.where(codes >= 0, v, nbr)
        dst = np.where(codes >= 0, nbr, v)
        return self._table(e, src, dst)

    def _table(self, e: np.ndarray, src: np.ndarray, dst: np.ndarray) -> EdgeTable:
        deleted = self.edge_del[e] if len(self.edge_del) else np.full(len(e), np.inf)
        weight = None if self.edge_weight is None else self.edge_weight[e]
        return EdgeTable(e, src, dst, self.edge_t[e], weight, deleted)

    def edges(self) -> EdgeTable:
        """Every stored edge (deleted ones too, with their deletion time), by internal edge id."""
        n = self.num_edges
        src = np.empty(n, np.int64)
        dst = np.empty(n, np.int64)
        K.edge_endpoints(self.start, self.deg, self.pool, self.num_nodes, src, dst)
        return self._table(np.arange(n), src, dst)

    def snapshot(self, t: float) -> EdgeTable:
        """The edges valid at ``t``: time <= t and not deleted at t."""
        table = self.edges()
        return table.subset((table.t <= t) & live(table.deleted_at, t))

    def window(self, t0: float, t1: float) -> EdgeTable:
        """The edges that arrived in [t0, t1), whatever happened to them later."""
        table = self.edges()
        return table.subset((table.t >= t0) & (table.t < t1))

    def to_pyg(self, table: EdgeTable, t: float | None = None):
        """A PyG ``Data`` over all current nodes; node features are those in force at ``t``."""
        return to_pyg(self, table, t)

    def node_features_internal(self, nodes: np.ndarray, t) -> np.ndarray:
        """Features in force at ``t`` (scalar or per node); zeros where a node has no update yet."""
        nodes = np.asarray(nodes, np.int64)
        times = np.broadcast_to(np.asarray(t, np.float64), nodes.shape).copy()
        ver = np.empty(len(nodes), np.int64)
        K.latest_version(self.ustart, self.udeg, self.upool, self.upd_t, nodes, times, ver)
        dim = self.node_feature_dim or 0
        out = np.zeros((len(nodes), dim), np.float32)
        if dim:
            has = ver >= 0
            out[has] = self.node_feat[ver[has]]
        return out

    def features(self, nodes, t: float = math.inf) -> np.ndarray:
        """Node features (external ids) in force at time ``t``."""
        return self.node_features_internal(self.node_index(nodes), t)

    def edge_features(self, eids: np.ndarray) -> np.ndarray | None:
        """Feature rows of internal edge ids (as samplers return them); None if the stream has none."""
        if self.edge_feat is None:
            return None
        return self.edge_feat[self._edge_ids(eids)]

    # ------------------------------------------------------------------ change logs (see ``changes``)
    def log_position(self) -> LogPosition:
        """The end of each log now: a reader that has consumed everything stands here."""
        c = self.counters
        return LogPosition(int(c[K.EDGES]), int(c[K.DELETIONS]), int(c[K.UPDATES]))

    def change_feed(self, position: LogPosition | None = None) -> ChangeFeed:
        """A reader of everything appended after ``position`` (default: now); see ``changes``."""
        position = self.log_position() if position is None else position
        self._check_position(position)
        return self._log.open(position, self.num_edges)

    def changes_since(self, position: LogPosition) -> StoreChanges:
        """The log entries after ``position``: O(change) when an open feed's journal covers it, else one
        pass over the adjacency for the new edges' endpoints."""
        self._check_position(position)
        end = self.log_position()
        lo, hi = position.edges, end.edges
        journaled = self._log.endpoints(lo, hi)
        if journaled is not None:
            src, dst = journaled
        elif hi > lo:
            full = self.edges()
            src, dst = full.src[lo:hi], full.dst[lo:hi]
        else:
            src = dst = np.zeros(0, np.int64)
        d0, d1, u0, u1 = position.deletions, end.deletions, position.updates, end.updates
        return StoreChanges(
            position,
            end,
            self._table(np.arange(lo, hi), src, dst),
            self.del_src[d0:d1].astype(np.int64),
            self.del_dst[d0:d1].astype(np.int64),
            self.del_t[d0:d1].copy(),
            self.upd_node[u0:u1].astype(np.int64),
            self.upd_t[u0:u1].copy(),
            np.arange(u0, u1),
            None if self.node_feat is None else self.node_feat[u0:u1].copy(),
        )

    def _check_position(self, position: LogPosition) -> None:
        if not isinstance(position, LogPosition):
            raise ConfigError(f"position must be a LogPosition, got {type(position).__name__}")
        end = self.log_position()
        if position.edges > end.edges or position.deletions > end.deletions or position.updates > end.updates:
            raise ConfigError(f"{position} is beyond this store's logs ({end}): a position of another store?")

    def deleted_at(self, eids) -> np.ndarray:
        """Deletion time of internal edge ids (inf: live); a delete arriving later may still lower it."""
        e = self._edge_ids(eids)
        return self.edge_del[e] if len(self.edge_del) else np.full(len(e), np.inf)

    def edges_between(self, src, dst) -> tuple[np.ndarray, EdgeTable]:
        """Every edge ``src[i] -> dst[i]`` (internal ids), deleted ones too: ``(pair, table)`` where
        ``table`` row j is an edge of pair ``pair[j]``. Costs O(out-degree of each src)."""
        src, dst = self._node_ids(src), self._node_ids(dst)
        if len(src) != len(dst):
            raise ConfigError(f"src has {len(src)} ids but dst has {len(dst)}")
        room = int(self.deg[src].sum()) if len(src) else 0
        pair, e = np.empty(room, np.int64), np.empty(room, np.int64)
        n = pair_edges(self.start, self.deg, self.pool, src, dst, pair, e)
        pair, e = pair[:n], e[:n]
        return pair, self._table(e, src[pair], dst[pair])

    def _edge_ids(self, eids) -> np.ndarray:
        e = np.asarray(eids)
        if e.size and (e.dtype.kind not in "iu" or e.min() < 0 or e.max() >= self.num_edges):
            raise ConfigError(f"edge ids must be ints in [0, {self.num_edges}): the store's internal ids")
        return e.astype(np.int64, copy=False)

    def _node_ids(self, nodes) -> np.ndarray:
        v = np.asarray(nodes)
        if v.ndim != 1 or (v.size and (v.dtype.kind not in "iu" or v.min() < 0 or v.max() >= self.num_nodes)):
            raise ConfigError(f"internal node ids must be a 1-D array of ints in [0, {self.num_nodes})")
        return v.astype(np.int64, copy=False)

    # ------------------------------------------------------------------ partitions
    def partition_sizes(self) -> np.ndarray:
        """Vertices per partition (placed ones: a vertex waiting for the partitioner is in none)."""
        p = self.partition[: self.num_nodes]
        return np.bincount(p[p >= 0], minlength=self.config.num_partitions)

    def edge_cut(self) -> float:
        """Fraction of edges (with both ends placed) whose endpoints live in different partitions."""
        table = self.edges()
        p_src, p_dst = self.partition[table.src], self.partition[table.dst]
        placed = (p_src >= 0) & (p_dst >= 0)
        return float((p_src != p_dst)[placed].mean()) if placed.any() else 0.0

    # ------------------------------------------------------------------ accounting, identity, persistence
    def nbytes(self) -> dict[str, int]:
        """Bytes held, by part, counting allocated capacity (slack included)."""
        parts = {
            "adjacency_pool": self.pool.nbytes,
            "node_blocks": self.start.nbytes + self.deg.nbytes + self.cap.nbytes + self.partition.nbytes,
            "edge_times": self.edge_t.nbytes,
            "edge_deletions": self.edge_del.nbytes
            + self.del_src.nbytes
            + self.del_dst.nbytes
            + self.del_t.nbytes,
            "edge_weights": 0 if self.edge_weight is None else self.edge_weight.nbytes,
            "edge_features": 0 if self.edge_feat is None else self.edge_feat.nbytes,
            "node_updates": self.upool.nbytes
            + self.ustart.nbytes
            + self.udeg.nbytes
            + self.ucap.nbytes
            + self.upd_t.nbytes
            + self.upd_node.nbytes
            + (0 if self.node_feat is None else self.node_feat.nbytes),
            "id_map": self.ids.nbytes(),
            "seen_event_ids": self.seen.nbytes(),
            "change_journal": self._log.nbytes(),
            "partitioner": sum(a.nbytes for a in self.partitioner.state().values()),
        }
        parts["total"] = sum(parts.values())
        return parts

    def logical_arrays(self) -> dict[str, np.ndarray]:
        """The content, free of layout (slack, garbage, pool order): what checkpoints and hashes hold."""
        return persist.logical_arrays(self)

    def content_hash(self) -> str:
        """SHA-256 over the logical content: equal stores hash equal whatever their batch history."""
        return persist.content_hash(self)

    # ------------------------------------------------------------------ checkpoints
    def state(self) -> tuple[dict[str, np.ndarray], dict]:
        """The store as plain arrays and JSON values (``from_state`` rebuilds it; ``save`` writes them)."""
        return persist.state(self)

    @classmethod
    def from_state(
        cls, a: dict[str, np.ndarray], values: dict, where: str = "checkpoint"
    ) -> TemporalGraphStore:
        """The store ``state()`` gave, every index checked before a kernel reads it and the content hash
        compared; anything inconsistent is a ``CheckpointError`` naming ``where``."""
        try:  # the config as this version reads it (``configs.from_record``): a newer one is refused
            config = from_record(StoreConfig, values.get("config"), f"{where}: store config", "store")
        except ConfigError as exc:
            raise CheckpointError(str(exc)) from None
        try:
            store = cls(config)
            persist.fill(store, a, values)
        except (KeyError, ValueError, TypeError, AttributeError, IndexError) as exc:
            raise CheckpointError(f"checkpoint under {where} is inconsistent: {exc!r}") from exc
        if store.content_hash() != values.get("content_hash"):
            raise CheckpointError(
                f"checkpoint under {where} does not reproduce its content hash; refusing it"
            )
        return store

    def save(self, path: str | Path, source_offsets: dict[str, int] | None = None, keep: int = 2) -> Path:
        """Checkpoint the store (with ``source_offsets``, the positions a source resumes at) under ``path``
        as the next version, keeping the newest ``keep`` (``streamgnn.checkpoint``)."""
        if source_offsets is not None:
            self.source_offsets = dict(source_offsets)
        return checkpoint.save(Path(path), "store", *self.state(), keep=keep)

    @classmethod
    def load(cls, path: str | Path, version: int | None = None) -> TemporalGraphStore:
        """The store checkpointed under ``path``: the version ``LATEST`` names, or ``version``."""
        ckpt = checkpoint.load(Path(path), "store", version)
        return cls.from_state(ckpt.arrays, ckpt.manifest, str(path))
