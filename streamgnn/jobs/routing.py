"""Where each event of a batch goes, in which order: the part of the router that needs no broker.

``RoutingState.route(batch)`` admits events as a store would (``store.admission``: field checks, dedup
by event id, lateness, the id map, deletes of unknown nodes), runs the partitioner and returns, per graph
partition, the events to publish in order, plus dead letters. An event goes to its source vertex's
partition (vertex partitioners) or its edge's partition (edge partitioners; a delete goes to every
partition holding replicas of both its ends, the only ones that can hold the edge); with a vertex
partitioner each published event carries its endpoints' partitions (``EventBatch.placement``), so that
sharded consumers own a vertex where the router put it (``ShardConfig(placement="stream")``). An event
whose vertex still waits to be placed (a buffered partitioner, or a node update before the vertex's first
edge) is held and published right where the vertex is placed; with a vertex partitioner an edge event
waits for both its ends, so that every published event names only placed vertices. The order within a
partition is a function of the events alone (placement positions from the partitioner's log), so a router
restarted mid-stream, fed different batches, publishes exactly what an uninterrupted one does.

    >>> from streamgnn import EventBatch
    >>> state = RoutingState("hdrf", 2)
    >>> out, letters = state.route(EventBatch.from_columns(src=[1, 2], dst=[2, 3], t=[0.0, 1.0], eid=[0, 1]))
    >>> {p: b.eid.tolist() for p, b in out.items()}
    {0: [0, 1]}
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..codec import CONTENT_BINARY, decode, encode_binary
from ..configs import from_record, stamp
from ..connectors.kafka.merge import join_rows
from ..events import DeadLetter, EventBatch, EventKind
from ..growth import grow
from ..partition import PartitionerConfig, make_partitioner
from ..partition.base import PENDING, Routes
from ..partition.metrics import PartitionReport, _balance
from ..store.admission import NO_PARTITION_HOLDS, Admission, AdmissionConfig, Admits, plain

ADD, DELETE, UPDATE = (int(k) for k in EventKind)
ALL_KINDS = (ADD, DELETE, UPDATE)
_NEVER = np.iinfo(np.int64).max


class RoutingState(Admits):
    """Everything a router must remember, and the routing itself (see the module doc)."""

    def __init__(self, partitioner, num_partitions: int, allowed_lateness: float = math.inf) -> None:
        self.partitioner = make_partitioner(partitioner, num_partitions)
        self.k = self.partitioner.num_partitions
        self.admission = Admission(AdmissionConfig(allowed_lateness))
        self.labels = np.zeros(0, np.int32)
        self.held = EventBatch.empty()
        self.held_vertex = np.zeros(0, np.int64)
        self.edge_loads = np.zeros(self.k, np.int64)  # edges published per partition
        self.last_eid = np.full(self.k, -1, np.int64)  # the last event id published to each partition
        names = ("events", "edges", "duplicates", "dead_letters", "published", "cut_edges", "placed_edges")
        self.counts = dict.fromkeys(names, 0)

    # ------------------------------------------------------------------ routing
    def route(
        self, batch: EventBatch, where: str = "router"
    ) -> tuple[dict[int, EventBatch], list[DeadLetter]]:
        """Per partition the events to publish now, in order; and dead letters (rows of ``batch``): those
        of admission (the store's, see ``store.admission``) and deletes no partition can hold the edge of.
        A batch of another id type or feature width than the events seen and held is refused whole (a
        reader feeds one stream: ``KafkaSource`` dead-letters events that do not fit); weights may differ:
        an event without one weighs 1.0, the codec's rule."""
        held = (("event", self.held.feature_dim, ALL_KINDS, True),) if len(self.held) else ()
        adm = self.admission.admit(batch, where, held)
        self.counts["duplicates"] += adm.duplicates
        self.counts["events"] += len(batch) - adm.duplicates
        if self.ids.size > adm.first_new:
            self.labels = grow(self.labels, self.ids.size, PENDING)
            ext = self.ids.external(np.arange(adm.first_new, self.ids.size))
            self.partitioner.add_vertices(self.labels, adm.first_new, self.ids.size, ext)
        ev, src, dst, letters = adm.events, adm.src, adm.dst, adm.dead_letters
        self.counts["edges"] += int((ev.kind == ADD).sum())
        routes = self.partitioner.observe(self.labels, ev.kind, src, dst, ev.t, routes=True)
        if routes.both is not None:  # a delete no partition can hold the edge of: no edge to delete
            for i in np.flatnonzero((ev.kind == DELETE) & ~routes.both.any(axis=1)).tolist():
                reason = NO_PARTITION_HOLDS.format(src=plain(ev.src[i]), dst=plain(ev.dst[i]))
                letters.append(DeadLetter(reason, where, None, int(adm.rows[i]), int(ev.eid[i])))
        self.counts["dead_letters"] += len(letters)
        out = self._emit(ev, src, dst, routes)
        return out, letters

    def _emit(self, ev: EventBatch, src, dst, routes) -> dict[int, EventBatch]:
        """Order this batch's events and the held ones by the stream position where each can go: an event
        at its own position ``2 i`` once its vertices are placed (its source; with a vertex partitioner
        its destination too), a held one where the later of them is placed (before the event that placed
        it), ties by placement order, then arrival."""
        n, held_n = len(ev), len(self.held)
        pool = join_rows([self.held, ev]) if held_n else ev  # a held event may lack the weights ev has
        by_vertex = np.argsort(routes.placed, kind="stable")
        placed_sorted = routes.placed[by_vertex]

        def placement(vertices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            """(position, log order) where each vertex was placed in this batch; -1 where it was not."""
            if not len(placed_sorted):
                return np.full(len(vertices), -1, np.int64), np.zeros(len(vertices), np.int64)
            idx = np.minimum(np.searchsorted(placed_sorted, vertices), len(placed_sorted) - 1)
            found = placed_sorted[idx] == vertices
            return np.where(found, routes.at[by_vertex[idx]], -1), np.where(found, by_vertex[idx], 0)

        own = 2 * np.arange(n, dtype=np.int64)
        vertex = np.r_[self.held_vertex, src].astype(np.int64)
        edge_mode = not self.partitioner.config.places_vertices
        if edge_mode:  # an edge partitioner routes edges itself: only the source's placement matters
            other = vertex
        else:  # the destination (an update's is its source): mapped for every held event when it arrived
            held_dst = np.where(self.held.kind == UPDATE, self.held.src, self.held.dst)
            other = np.r_[self.ids.lookup(held_dst) if held_n else np.zeros(0, np.int64), dst]
            other = other.astype(np.int64)
        pos = np.r_[np.full(held_n, -1, np.int64), own]  # a held event has no position of its own left
        direct = np.r_[np.zeros(held_n, bool), edge_mode & (ev.kind == ADD)]
        deletes = np.flatnonzero(edge_mode & (ev.kind == DELETE))
        by_vertex_unit = ~direct
        by_vertex_unit[held_n + deletes] = False
        (at, seq), (at_other, seq_other) = placement(vertex), placement(other)
        at, seq = np.maximum(at, at_other), np.where(at_other > at, seq_other, seq)  # the later placement
        label = np.where(by_vertex_unit, self.labels[vertex], -1).astype(np.int64)
        label[held_n:][direct[held_n:]] = routes.dest[direct[held_n:]]
        released = by_vertex_unit & (at > pos)
        key_pos = np.where(released, at, pos)
        key_tie = np.where(released, 0, 1)
        key_seq = np.where(released, seq, 0)
        rows = np.arange(held_n + n)
        waiting = by_vertex_unit & ((label == PENDING) | (self.labels[other] == PENDING))
        go = ~waiting & (label >= 0)
        units = [(key_pos[go], key_tie[go], key_seq[go], rows[go], label[go])]
        for i in deletes.tolist():  # the partitions that hold replicas of both ends
            both = np.flatnonzero(routes.both[i])
            one = np.ones(len(both), np.int64)
            units.append((own[i] * one, one, 0 * one, (held_n + i) * one, both.astype(np.int64)))
        key_pos, key_tie, key_seq, row, part = (np.concatenate(c) for c in zip(*units, strict=True))
        order = np.lexsort((row, key_seq, key_tie, key_pos))
        row, part = row[order], part[order]
        self.held = pool.take(rows[waiting]) if waiting.any() else EventBatch.empty()
        self.held_vertex = vertex[waiting]
        out = {p: self._placed(pool.take(row[part == p])) for p in np.unique(part).tolist()}
        for p, b in out.items():
            self._count(p, b)
        return out

    def _placed(self, b: EventBatch) -> EventBatch:
        """``b`` with its endpoints' partitions (vertex partitioners; -1 where a vertex still waits)."""
        if not self.partitioner.config.places_vertices:
            return b
        dst = np.where(b.kind == UPDATE, b.src, b.dst)  # a node update names only its source
        ends = self.ids.lookup(np.r_[b.src, dst])
        label = np.where(ends >= 0, self.labels[np.maximum(ends, 0)], PENDING).astype(np.int32)
        return dataclasses.replace(b, placement=np.ascontiguousarray(label.reshape(2, -1).T))

    def _count(self, p: int, b: EventBatch) -> None:
        self.last_eid[p] = b.eid[-1]
        adds = b.kind == ADD
        self.edge_loads[p] += int(adds.sum())
        self.counts["published"] += len(b)
        if self.partitioner.config.places_vertices and adds.any():
            a = self.labels[self.ids.lookup(b.src[adds])]
            c = self.labels[self.ids.lookup(b.dst[adds])]
            placed = (a >= 0) & (c >= 0)
            self.counts["placed_edges"] += int(placed.sum())
            self.counts["cut_edges"] += int((a != c)[placed].sum())

    def flush(self) -> dict[int, EventBatch]:
        """Place every waiting vertex and publish what was held for it (the end of a stream)."""
        placed = self.partitioner.flush(self.labels[: self.ids.size])
        empty = np.zeros(0, np.int64)
        routes = Routes(np.zeros(0, np.int32), placed, np.zeros(len(placed), np.int64))
        return self._emit(EventBatch.empty(), empty, empty, routes)

    # ------------------------------------------------------------------ checkpoints
    def state(self) -> tuple[dict[str, np.ndarray], dict]:
        """The state as plain arrays and a JSON-safe dict (for a ``streamgnn.checkpoint`` container)."""
        admitted, admission = self.admission.state()
        arrays = {f"partitioner_{k}": v for k, v in self.partitioner.state().items()}
        arrays.update(admitted)
        arrays["labels"] = self.labels[: self.ids.size]
        held = encode_binary(self.held) if len(self.held) else b""
        arrays["held"] = np.frombuffer(held, np.uint8)
        arrays["held_vertex"] = self.held_vertex
        arrays["edge_loads"] = self.edge_loads
        arrays["last_eid"] = self.last_eid
        meta = {"partitioner": stamp(self.partitioner.config.to_dict()), **admission, "counts": self.counts}
        return arrays, meta

    @classmethod
    def from_state(
        cls,
        a: dict[str, np.ndarray],
        meta: dict,
        num_partitions: int,
        allowed_lateness: float = math.inf,
        where: str = "router checkpoint",
    ) -> RoutingState:
        """The state ``state()`` saved, its partitioner as ``meta`` names it (``saved_partitioner``); raises
        ValueError (or KeyError) where it is inconsistent, ``ConfigError`` naming ``where`` for its config."""
        self = cls(saved_partitioner(meta, where), num_partitions, allowed_lateness)
        if "watermark" not in meta:  # written before the admission state had one layout: in an array, or none
            meta = {**meta, "watermark": float(a["watermark"][0]) if "watermark" in a else -math.inf}
        self.admission = Admission.from_state(a, meta, self.admission.config)
        self.labels = a["labels"].astype(np.int32).copy()
        self.counts.update({k: int(v) for k, v in meta["counts"].items()})
        state = {k[len("partitioner_") :]: v for k, v in a.items() if k.startswith("partitioner_")}
        config = self.partitioner.config
        self.partitioner = self.partitioner.from_state(
            config, num_partitions, state, self.labels, self.counts["edges"]
        )
        held = a["held"].tobytes()
        self.held = decode(held, CONTENT_BINARY, "router checkpoint")[0] if held else EventBatch.empty()
        self.held_vertex = a["held_vertex"].astype(np.int64)
        self.edge_loads = a["edge_loads"].astype(np.int64)
        self.last_eid = a["last_eid"].astype(np.int64)
        if self.edge_loads.shape != (self.k,) or self.last_eid.shape != (self.k,):
            raise ValueError("per-partition counters have the wrong shape")
        if len(self.labels) != self.ids.size or len(self.held) != len(self.held_vertex):
            raise ValueError("labels or held events do not match the id map")
        return self

    # ------------------------------------------------------------------ metrics
    def report(self) -> PartitionReport:
        p = self.partitioner
        labels = self.labels[: self.ids.size]
        vertex_loads = (
            np.bincount(labels[labels >= 0], minlength=self.k) if p.config.places_vertices else p.vcount
        )
        edges = int(self.edge_loads.sum())
        return PartitionReport(
            method=p.name,
            num_partitions=self.k,
            vertices=self.ids.size,
            edges=edges,
            pending=p.pending,
            edge_cut=self.counts["cut_edges"] / max(self.counts["placed_edges"], 1)
            if p.config.places_vertices
            else None,
            replication_factor=None if p.config.places_vertices else p.replication_factor(),
            vertex_balance=_balance(vertex_loads),
            edge_balance=_balance(self.edge_loads),
            vertices_moved=0,
            vertex_loads=vertex_loads.tolist(),
            edge_loads=self.edge_loads.tolist(),
        )


def saved_partitioner(meta: dict, where: str) -> PartitionerConfig:
    """The partitioner config a router checkpoint's ``meta`` holds, as this version reads it
    (``configs.from_record``, its place in a job file: ``partition.partitioner``)."""
    return from_record(
        PartitionerConfig, meta["partitioner"], f"{where}: partitioner", "partition.partitioner"
    )
