"""Who owns what in a sharded run: vertex -> graph partition -> rank, and the small index every rank keeps.

Ownership goes through graph partitions, never straight from vertices to ranks: producers key Kafka
messages by partition (``EventProducer``), so a rank that owns a partition owns its topic partition too,
and a partitioner decides only vertex -> partition: a stateless ``partition_fn`` (hash, the default) that
any process computes from the external id, or ``partition_fn=None``: the stream says, in each event's
``placement`` column, where a partition router (``streamgnn partition``: LDG, Fennel) put both endpoints,
and a vertex belongs to the partition the first event naming it gives (the router never moves a vertex).
Partitions go to ranks round-robin, so the same stream and ``P`` give the same partitions whatever the
world size.

``GlobalIndex`` is the one piece of state every rank holds whole, because every rank sees every global
batch: external id -> global id (dense, in order of first appearance, exactly the internal ids one
``TemporalGraphStore`` would give), each global id's partition, the seen event ids and the watermark.
It costs about 30 bytes per vertex and one bit per event, against about 400 bytes per vertex of TGN
memory and 30 per edge of adjacency, which are sharded. With it, everything ranks exchange is int64.

>>> import numpy as np
>>> from streamgnn import EventBatch
>>> own = Ownership(num_partitions=4, world_size=2, rank=1)
>>> own.partitions()
[1, 3]
>>> index = GlobalIndex(own)
>>> step = index.admit(EventBatch.from_columns(src=[7, 8], dst=[8, 9], t=[1.0, 2.0], eid=[0, 1]))
>>> step.src.tolist(), step.dst.tolist(), index.owner(np.array([0, 1, 2])).shape
([0, 1], [1, 2], (3,))
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError, PlacementError
from ..events import DeadLetter, EventBatch, EventKind
from ..growth import grow
from ..partition import hash_partition
from ..store.admission import (
    INGEST,
    NO_LIVE_EDGE,
    UNKNOWN_NODE,
    Admission,
    AdmissionConfig,
    Admits,
    event_payload,
    plain,
)

ADD, DELETE, UPDATE = (int(k) for k in EventKind)
PartitionFn = Callable[[np.ndarray, int], np.ndarray]


@dataclass(frozen=True)
class Ownership:
    """``num_partitions`` graph partitions over ``world_size`` ranks (partition ``p`` on rank
    ``p % world_size``); ``partition_fn(external_ids, num_partitions)`` places vertices, or, with None,
    each event's ``placement`` column does (see the module docstring)."""

    num_partitions: int
    world_size: int = 1
    rank: int = 0
    partition_fn: PartitionFn | None = hash_partition

    @classmethod
    def of(cls, config, world_size: int = 1, rank: int = 0) -> Ownership:
        """The ownership a ``ShardConfig`` describes (``placement`` "hash" or "stream")."""
        fn = hash_partition if config.placement == "hash" else None
        return cls(config.num_partitions, world_size, rank, fn)

    def __post_init__(self) -> None:
        if not isinstance(self.world_size, int) or self.world_size < 1:
            raise ConfigError(f"world_size must be an int >= 1, got {self.world_size!r}")
        if not isinstance(self.num_partitions, int) or self.num_partitions < self.world_size:
            raise ConfigError(
                f"num_partitions must be an int >= world_size ({self.world_size}): every rank owns at least "
                f"one partition, got {self.num_partitions!r}"
            )
        if not 0 <= self.rank < self.world_size:
            raise ConfigError(f"rank must lie in [0, {self.world_size}), got {self.rank!r}")

    def partitions(self, rank: int | None = None) -> list[int]:
        """The partitions ``rank`` (default: this one) owns."""
        return list(range(self.rank if rank is None else rank, self.num_partitions, self.world_size))

    def rank_of(self, partitions: np.ndarray) -> np.ndarray:
        return (np.asarray(partitions, np.int64) % self.world_size).astype(np.int32)

    def partition_of(self, external_ids: np.ndarray) -> np.ndarray:
        if self.partition_fn is None:
            raise ConfigError("this ownership takes partitions from the stream: use source_partitions(batch)")
        return np.asarray(self.partition_fn(np.asarray(external_ids), self.num_partitions), np.int32)

    def source_partitions(self, batch: EventBatch) -> np.ndarray:
        """The partition of each event's source: the topic partition its producer (or router) wrote it to."""
        if self.partition_fn is not None:
            return self.partition_of(batch.src) if len(batch) else np.zeros(0, np.int32)
        return self.placement(batch)[:, 0].copy()

    def placement(self, batch: EventBatch, where: str = "batch") -> np.ndarray:
        """``batch.placement``, checked: present, and every named endpoint (a node update names only its
        source) in ``[0, num_partitions)``; raises ``PlacementError`` naming the first bad event."""
        if batch.placement is None:
            if not len(batch):
                return np.zeros((0, 2), np.int32)
            raise PlacementError(
                f"{where}: events carry no placement, but ownership follows the stream's placement: read the "
                "binary output of a partition router with a vertex partitioner (hash, ldg, fennel), or use "
                "ShardConfig(placement='hash') for a topic keyed by hash"
            )
        p = batch.placement
        named = np.c_[np.ones(len(batch), bool), batch.kind != UPDATE]
        bad = named & ((p < 0) | (p >= self.num_partitions))
        if bad.any():
            i, j = (int(x[0]) for x in np.nonzero(bad))
            raise PlacementError(
                f"{where}: event {int(batch.eid[i])} places its {('source', 'destination')[j]} "
                f"{batch.src[i] if j == 0 else batch.dst[i]!r} in partition {int(p[i, j])}, outside "
                f"[0, {self.num_partitions}): the router has another partition count, or the events did not "
                "come from a partition router with a vertex partitioner"
            )
        return p


def rows_within_partition(part: np.ndarray) -> np.ndarray:
    """Each row's number among the rows of its own partition, in row order: one stable sort, so the work is
    the rows', whatever the partition count."""
    part = np.asarray(part)
    by_part = np.argsort(part, kind="stable")
    ordered = part[by_part]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if len(part) else np.zeros(0, np.int64)
    within = np.empty(len(part), np.int64)
    within[by_part] = np.arange(len(part)) - np.repeat(starts, np.diff(np.r_[starts, len(part)]))
    return within


def as_one_store(
    letter: DeadLetter, batch: EventBatch, row: int, shard: EventBatch | None = None
) -> DeadLetter:
    """``letter``, refusing row ``row`` of the global ``batch``, as one process's store writes it of the same
    event: the reason names the event's own node ids, the payload is the event as it came, the index is its
    row in ``batch`` and ``where`` the store's (``INGEST``), not the index's or the shard's. ``shard``: the
    batch in global ids of which a shard store wrote ``letter`` (its row ``letter.index``); without it the
    letter is the index's, whose reasons already name the event's ids.

    A shard store sees only events the index admitted, so the only reasons it can give that name nodes are
    about deletes: no live edge, and an end it never saw, which the index knows (another rank's vertex that
    never met this rank's): the edge was never added, so one store, which knows every vertex, says no live
    edge there too."""
    reason = letter.reason
    if shard is not None:
        j = letter.index
        gsrc, gdst, t = plain(shard.src[j]), plain(shard.dst[j]), plain(shard.t[j])
        if reason in (NO_LIVE_EDGE.format(src=gsrc, dst=gdst, t=t), UNKNOWN_NODE.format(src=gsrc, dst=gdst)):
            reason = NO_LIVE_EDGE.format(src=plain(batch.src[row]), dst=plain(batch.dst[row]), t=t)
    return dataclasses.replace(
        letter, reason=reason, where=INGEST, payload=event_payload(batch, row), index=row
    )


@dataclass(frozen=True)
class GlobalAdmitted:
    """One global batch as the index admitted it (``store.admission``): ``rows`` of the batch it kept (valid,
    first of their event id, not too late, not a delete naming an unknown vertex), their global
    ``src``/``dst``, and the ids known before the batch (``pre_*``, -1: new)."""

    rows: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    pre_src: np.ndarray
    pre_dst: np.ndarray
    dead_letters: list[DeadLetter]
    duplicates: int


class GlobalIndex(Admits):
    """The state every rank keeps whole (see the module docstring); ``admit`` each global batch in order."""

    def __init__(self, ownership: Ownership, allowed_lateness: float = math.inf) -> None:
        self.ownership = ownership
        self.admission = Admission(AdmissionConfig(allowed_lateness))
        self._partition = np.zeros(0, np.int32)  # grown by the growth policy: rows past num_nodes are spare

    @property
    def num_nodes(self) -> int:
        return self.ids.size

    @property
    def partition(self) -> np.ndarray:
        """Graph partition of each global id: a view, its buffer grown by ``streamgnn.growth``."""
        return self._partition[: self.num_nodes]

    def owner(self, gids: np.ndarray) -> np.ndarray:
        """Rank owning each global id (ids >= 0)."""
        return self.ownership.rank_of(self.partition[np.asarray(gids, np.int64)])

    def owned(self, gids: np.ndarray) -> np.ndarray:
        """Which global ids (-1 allowed: never owned) this rank owns."""
        gids = np.asarray(gids, np.int64)
        out = np.zeros(len(gids), bool)
        ok = gids >= 0
        out[ok] = self.owner(gids[ok]) == self.ownership.rank
        return out

    def lookup(self, external: np.ndarray) -> np.ndarray:
        """Global ids of external ids, -1 where unknown (nothing is added)."""
        external = np.asarray(external)
        if not self.ids.size or not len(external):
            return np.full(len(external), -1, np.int64)
        return self.ids.map(external, False)

    def external(self, gids: np.ndarray) -> np.ndarray:
        return self.ids.external(np.asarray(gids, np.int64))

    def admit(self, batch: EventBatch, where: str = "global batch") -> GlobalAdmitted:
        """Validate, deduplicate, check lateness and map ids of one global batch, as one store's ingest
        would (one ``Admission``); returns what was kept and the dead letters of the rest. Placement taken
        from the stream is checked (``PlacementError``) before anything changes."""
        stream_placed = self.ownership.partition_fn is None
        check = (lambda valid: self._checked_placement(valid, where)) if stream_placed else None
        adm = self.admission.admit(batch, where, check=check)
        before, size = adm.first_new, self.ids.size
        if size > before:
            self._partition = part = grow(self._partition, size)
            if not stream_placed:
                part[before:size] = self.ownership.partition_of(self.ids.external(np.arange(before, size)))
            else:  # a vertex's partition is the one its first event gives
                gids, col = np.c_[adm.src, adm.dst].ravel(), batch.placement[adm.rows].ravel()
                fresh = gids >= before
                new, first = np.unique(gids[fresh], return_index=True)
                part[new] = col[fresh][first]
        pre_src = adm.known_before(adm.src)
        pre_dst = np.where(adm.events.kind == UPDATE, pre_src, adm.known_before(adm.dst))
        return GlobalAdmitted(adm.rows, adm.src, adm.dst, pre_src, pre_dst, adm.dead_letters, adm.duplicates)

    def _checked_placement(self, ev: EventBatch, where: str) -> None:
        """Refuse the events' placement where it contradicts a partition given earlier, by an earlier event
        or one of this batch: one router never moves a vertex."""
        placed = self.ownership.placement(ev, where)
        pre_src, pre_dst = self.lookup(ev.src), self.lookup(ev.dst)
        ids = np.r_[ev.src, ev.dst[ev.kind != UPDATE]]
        parts = np.r_[placed[:, 0], placed[ev.kind != UPDATE, 1]]
        known = np.r_[pre_src, pre_dst[ev.kind != UPDATE]]
        was = np.where(known >= 0, self.partition[np.maximum(known, 0)] if len(self.partition) else -1, -1)
        clash = (was >= 0) & (was != parts)
        if not clash.any():  # and within the batch: one partition per new vertex
            _, inverse = np.unique(ids, return_inverse=True)
            most = np.full(inverse.max(initial=-1) + 1, -1, np.int64)
            np.maximum.at(most, inverse, parts)
            was = most[inverse]
            clash = parts != was
        if clash.any():
            i = int(np.flatnonzero(clash)[0])
            raise PlacementError(
                f"{where}: vertex {ids[i]!r} is placed in partition {int(parts[i])} and in {int(was[i])}: a "
                "partition router never moves a vertex, so the topic mixes writers (two routers, or a "
                "producer keyed by hash)"
            )

    def nbytes(self) -> int:
        return self.ids.nbytes() + self._partition.nbytes + self.seen.nbytes()

    def state(self) -> tuple[dict[str, np.ndarray], dict]:
        """``(arrays, values)`` for a checkpoint: the admission's (``Admission.state``) and each global
        id's partition; ``from_state`` builds an index of them, ``load_state`` loads them into this one."""
        arrays, values = self.admission.state()
        return {**arrays, "partition": self.partition}, values

    @classmethod
    def from_state(
        cls, arrays: dict[str, np.ndarray], values: dict | None, ownership: Ownership,
        allowed_lateness: float = math.inf,
    ) -> GlobalIndex:  # fmt: skip
        """The index ``state()`` gave, owned by ``ownership`` and admitting with ``allowed_lateness`` (this
        run's)."""
        index = cls(ownership, allowed_lateness)
        index.load_state(arrays, values)
        return index

    def load_state(self, arrays: dict[str, np.ndarray], values: dict | None) -> None:
        """``state()`` into this index, in place, keeping its ownership and admission settings (this run's):
        a sharded trainer's parts (pair features, baselines, rank states) hold the index by reference.
        ``values`` None: written before the admission state had one layout (the id type told by which
        arrays are there, the watermark in an array)."""
        if values is None:
            kind = "str" if "ext_str_offsets" in arrays else "int" if "ext_int" in arrays else None
            values = {"id_kind": kind, "watermark": float(arrays["watermark"][0])}
        admission = Admission.from_state(arrays, values, self.admission.config)
        partition = arrays["partition"].astype(np.int32)
        if len(partition) != admission.ids.size:
            raise ValueError(f"{len(partition)} partitions saved for {admission.ids.size} vertices")
        self.admission, self._partition = admission, partition
