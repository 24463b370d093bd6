"""Admission: what every event of a stream passes before anything applies it, written once.

The store, the sharded run's replicated index (``shard.ownership.GlobalIndex``) and the partition router
each take a stream of batches and must agree, event by event, on which events exist: a sharded run's
global ids are the internal ids one store would give, and a router must drop what a store downstream
would refuse. So all three admit through one ``Admission``, which keeps the state that decides it:

- the **field checks** of ``EventBatch.validate`` (kind, time, weight, features, string ids);
- the **stream's schema**: one id type per stream (and, where the caller fixes them, feature widths;
  with ``dense_ids``, ints >= 0). A batch that breaks it is refused whole, every row dead-lettered with
  one reason, and nothing changes;
- **event-id dedup** (``SeenIds``): the first event of an id is kept, later ones are skipped and counted
  (a replay re-delivers them; they are not errors, so they get no dead letter);
- **lateness**: an event more than ``allowed_lateness`` behind the newest time admitted so far (the
  watermark) is dead-lettered; one behind it, but within, is admitted and flagged ``late``;
- the **external -> internal id map**: ids enter in order of first appearance (a source unless the event
  deletes, a destination when it adds); a delete naming a node never seen is dead-lettered.

Dead letters name the batch row (``index``) and the event id; the payload is left to the caller (the store
writes the event as JSON, the router's source the raw message). What happens after admission (a delete
that matches no edge, placement) is the caller's, but its wording is here too, so that each reason reads
the same wherever it is raised (``REASONS``).

>>> from streamgnn import EventBatch
>>> admission = Admission(AdmissionConfig(allowed_lateness=1.0))
>>> out = admission.admit(EventBatch.from_columns(
...     kind=[0, 0, 0, 1, 0], src=[1, 1, 2, 8, 3], dst=[2, 2, 3, 9, 1], t=[5.0, 5.0, 4.5, 6.0, 1.0],
...     eid=[0, 0, 1, 2, 3]))
>>> out.rows.tolist(), out.src.tolist(), out.late.tolist(), out.duplicates
([0, 2], [0, 1], [False, True], 1)
>>> [(d.index, d.reason) for d in out.dead_letters]  # doctest: +NORMALIZE_WHITESPACE
[(3, 'delete names an unknown node (8 -> 9)'),
 (4, 'event at t=1.0 is 5 behind the stream (newest t=6.0), beyond allowed_lateness=1')]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..configs import Config
from ..events import FEATURE_WIDTH, ID_TYPE, DeadLetter, EventBatch, EventKind, Width, schema_refusal
from . import kernels as K
from .config import check_lateness
from .dedup import SeenIds
from .denseids import DenseIds
from .idmap import NodeIdMap

ADD, DELETE, UPDATE = (int(k) for k in EventKind)
_NO_WEIGHT = np.empty(0, np.float32)

# Every dead-letter reason of admission and of the deletes after it, one wording each (``str.format``
# fields). The field checks' reasons are ``EventBatch.validate``'s constants in events.py (``BAD_KIND``...),
# and so are the schema's (``ID_TYPE``, ``FEATURE_WIDTH``: ``events.schema_refusal``, which the Kafka
# reader's decoder, beside the store, asks too).
TOO_LATE = (
    "event at t={t!r} is {behind:g} behind the stream (newest t={newest!r}), "
    "beyond allowed_lateness={allowed:g}"
)
UNKNOWN_NODE = "delete names an unknown node ({src!r} -> {dst!r})"
NOT_DENSE = "this stream takes dense node ids (ints >= 0); the batch has {lowest}"
NO_LIVE_EDGE = "delete matched no live edge {src!r} -> {dst!r} at t={t!r}"
NO_PARTITION_HOLDS = "delete matched no edge: no partition holds both {src!r} and {dst!r}"
# the ``where`` of a store's letters (``TemporalGraphStore.ingest``'s): a sharded run's letters carry it too,
# so that a refused event reads the same however the run was laid out
INGEST = "ingest"
REASONS = (TOO_LATE, UNKNOWN_NODE, ID_TYPE, NOT_DENSE, FEATURE_WIDTH, NO_LIVE_EDGE, NO_PARTITION_HOLDS)


def plain(x):
    """A numpy scalar as a plain Python value, so that a reason reads ``7``, not ``np.int64(7)``."""
    return x.item() if hasattr(x, "item") else x


def event_payload(batch: EventBatch, i: int) -> str:
    """Row ``i`` of ``batch`` as a dead letter's payload: the event as JSON (a plain repr where JSON cannot
    hold it), in the ids it came with."""
    from ..codec import encode_json_event
    from ..errors import CodecError

    try:
        return encode_json_event(batch, i).decode()
    except CodecError:
        fields = {"kind": batch.kind[i], "src": batch.src[i], "dst": batch.dst[i], "t": batch.t[i],
                  "eid": batch.eid[i]}  # fmt: skip
        return repr({k: plain(v) for k, v in fields.items()})


@dataclass(frozen=True)
class AdmissionConfig(Config):
    """``allowed_lateness``: how far (in stream time) behind the newest admitted event an event may be and
    still be admitted; ``inf`` admits any order. ``dense_ids``: node ids are already dense ints >= 0 and
    serve as internal ids, with no id map (``DenseIds``)."""

    allowed_lateness: float = math.inf
    dense_ids: bool = False

    def __post_init__(self) -> None:
        check_lateness(self.allowed_lateness)


@dataclass
class Admitted:
    """One batch as admitted: ``events`` (the kept rows, in arrival order; the batch itself when all were
    kept), ``rows`` (their rows in the batch), their internal ``src``/``dst`` (an update's dst is its src),
    ``late`` (behind the watermark but within the allowed lateness; ``n_late`` of them), ``first_new`` (the
    first internal id this batch added: ids >= it are new), the ``duplicates`` skipped and the
    ``dead_letters`` of the rest (by batch row, payload None)."""

    events: EventBatch
    rows: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    late: np.ndarray
    n_late: int
    first_new: int
    duplicates: int = 0
    dead_letters: list[DeadLetter] = field(default_factory=list)

    def known_before(self, ids: np.ndarray) -> np.ndarray:
        """``ids`` (internal, of this batch) as they were known before it: -1 for those it added."""
        return np.where(ids < self.first_new, ids, -1)


class Admission:
    """The admission state of one stream (id map, seen event ids, watermark) and ``admit``; see the module
    docstring. Its owners (store, global index, router) read it through ``Admits`` and checkpoint it with
    ``state()``, rebuilt by ``from_state``: one layout for all three."""

    def __init__(self, config: AdmissionConfig | None = None) -> None:
        self.config = config or AdmissionConfig()
        self.ids: NodeIdMap | DenseIds = DenseIds() if self.config.dense_ids else NodeIdMap()
        self.seen = SeenIds()
        self.watermark = -math.inf

    def state(self) -> tuple[dict[str, np.ndarray], dict]:
        """``(arrays, values)``: the id map's arrays (``ext_int``, ``ext_str_*`` or ``dense_ids_size``), the
        seen event ids (``seen_bits``, ``seen_outliers``); the id type (``id_kind``) and ``watermark``."""
        arrays = {**self.ids.state(), **self.seen.state()}
        return arrays, {"id_kind": self.ids.id_type, "watermark": self.watermark}

    @classmethod
    def from_state(
        cls, arrays: dict[str, np.ndarray], values: dict, config: AdmissionConfig | None = None
    ) -> Admission:
        """The admission ``state()`` gave, admitting from now on by ``config`` (a setting of the run that
        resumes, not part of the state); ValueError or KeyError where the arrays are malformed."""
        self = cls(config)
        if self.config.dense_ids:
            self.ids = DenseIds.from_state(arrays)
        else:
            self.ids = NodeIdMap.from_state(arrays, values["id_kind"])
        self.seen = SeenIds.from_state(arrays)
        self.watermark = float(values["watermark"])
        return self

    def refusal(self, batch: EventBatch, widths: Sequence[Width] = ()) -> str | None:
        """Why ``batch`` cannot join this stream at all (another id type, a negative id where ids are dense,
        another feature width than one of ``widths`` for rows of its kinds), or None."""
        if not len(batch):
            return None
        if self.config.dense_ids and not batch.string_ids:
            lowest = min(int(batch.src.min()), int(batch.dst.min(where=batch.kind != UPDATE, initial=0)))
            if lowest < 0:
                return NOT_DENSE.format(lowest=lowest)
        return schema_refusal(batch, self.ids.id_type, widths)

    def admit(
        self,
        batch: EventBatch,
        where: str = "batch",
        widths: Sequence[Width] = (),
        check: Callable[[EventBatch], object] | None = None,
    ) -> Admitted:
        """Admit ``batch`` (see the module docstring). ``widths``: feature widths the caller holds the
        stream to. ``check(valid_rows)``: the caller's own refusal (it raises), run before anything
        changes."""
        screened = self._screen(batch, widths)
        if screened is not None:  # the common batch: every row valid and in time, no refusal
            if check is not None:
                check(batch)
            if self.seen.mark_new(batch.eid):
                late, n_late, n_delete, newest = screened
                self.watermark = newest + 0.0
                return self._mapped(batch, np.arange(len(batch)), late, n_late, 0, [], where, n_delete > 0)
            valid, letters, rows = batch, [], np.arange(len(batch))
        else:
            valid, letters = batch.validate(where)
            rows = np.delete(np.arange(len(batch)), [d.index for d in letters])
            reason = self.refusal(valid, widths)
            if reason is not None:  # refused whole: nothing changes
                letters += [DeadLetter(reason, where, None, int(i), int(batch.eid[i])) for i in rows.tolist()]
                return self._nothing(batch, sorted(letters, key=lambda d: d.index))
            if check is not None:
                check(valid)
        keep = self.seen.first_unseen(valid.eid)
        duplicates = int(len(keep) - np.count_nonzero(keep))
        ev = valid if not duplicates else valid.take(keep)
        rows = rows if not duplicates else rows[keep]
        newest = np.maximum.accumulate(np.concatenate([[self.watermark], ev.t]))[:-1]
        allowed = self.config.allowed_lateness
        too_late = ev.t < newest - allowed
        for i in np.flatnonzero(too_late).tolist():
            t, wm = plain(ev.t[i]), plain(newest[i])
            reason = TOO_LATE.format(t=t, behind=wm - t, newest=wm, allowed=allowed)
            letters.append(DeadLetter(reason, where, None, int(rows[i]), int(ev.eid[i])))
        late = ev.t < newest
        if too_late.any():
            ev, rows, late = ev.take(~too_late), rows[~too_late], late[~too_late]
        if len(ev):  # +0.0: a zero of either sign, so that state bytes do not depend on which came first
            self.watermark = max(self.watermark, float(ev.t.max())) + 0.0
        return self._mapped(ev, rows, late, int(late.sum()), duplicates, letters, where, True)

    def _screen(self, batch: EventBatch, widths: Sequence[Width]) -> tuple | None:
        """``K.screen``'s (lateness of each row, late rows, deletes, watermark after) when every row is
        valid, in time and the batch is not refused (int ids: the kernel's case); None, for the general
        path, otherwise. Changes nothing: most batches are clean, and for them the general path's
        dead-letter bookkeeping was most of the per-batch cost."""
        if batch.string_ids or self.refusal(batch, widths) is not None:
            return None
        if batch.features is not None and batch.features.size and not np.isfinite(batch.features).all():
            return None
        late = np.empty(len(batch), bool)
        weight = _NO_WEIGHT if batch.weight is None else batch.weight
        clean, n_late, n_delete, newest = K.screen(
            batch.kind, batch.t, weight, self.watermark, self.config.allowed_lateness, late
        )
        return (late, int(n_late), int(n_delete), float(newest)) if clean else None

    def _mapped(self, ev, rows, late, n_late, duplicates, letters, where, deletes: bool) -> Admitted:
        """Map the admitted events' ids and drop (dead-letter) deletes naming a node never seen (only a
        delete leaves an id unmapped: without ``deletes``, none can)."""
        first_new = self.ids.size
        src, dst = self.ids.map_events(ev.kind, ev.src, ev.dst)
        unknown = ((src < 0) | (dst < 0)) if deletes else None
        if unknown is not None and unknown.any():
            for i in np.flatnonzero(unknown).tolist():
                reason = UNKNOWN_NODE.format(src=plain(ev.src[i]), dst=plain(ev.dst[i]))
                letters.append(DeadLetter(reason, where, None, int(rows[i]), int(ev.eid[i])))
            ok = ~unknown
            ev, rows, late, src, dst = ev.take(ok), rows[ok], late[ok], src[ok], dst[ok]
            n_late = int(late.sum())
        if letters:
            letters.sort(key=lambda d: d.index)
        return Admitted(ev, rows, src, dst, late, n_late, first_new, duplicates, letters)

    def _nothing(self, batch: EventBatch, letters: list[DeadLetter]) -> Admitted:
        none = np.zeros(0, np.int64)
        return Admitted(batch.take(none), none, none, none, np.zeros(0, bool), 0, self.ids.size, 0, letters)


class Admits:
    """What admits a stream through ``self.admission`` (the store, the global index, the router): the
    admission state read by one set of names, kept in one place."""

    admission: Admission

    @property
    def ids(self) -> NodeIdMap | DenseIds:
        """External -> internal node ids."""
        return self.admission.ids

    @property
    def seen(self) -> SeenIds:
        """The event ids admitted so far."""
        return self.admission.seen

    @property
    def watermark(self) -> float:
        """The newest event time admitted so far."""
        return self.admission.watermark
