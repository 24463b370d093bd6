"""EventBatch: the one currency between sources and the store.

A batch is columnar (numpy) so that decoding, validation and insertion all run over arrays,
never per-event Python objects. Row-level problems (NaN time, unknown kind) become dead letters;
structural problems (columns of different lengths, wrong shapes) raise, since no row can be trusted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from .errors import EventValidationError


class EventKind(IntEnum):
    EDGE_ADD = 0
    EDGE_DELETE = 1
    NODE_UPDATE = 2


KIND_NAMES = {
    "edge_add": EventKind.EDGE_ADD,
    "edge_delete": EventKind.EDGE_DELETE,
    "node_update": EventKind.NODE_UPDATE,
}
KIND_LABELS = {v: k for k, v in KIND_NAMES.items()}


# The reasons ``EventBatch.validate`` gives a row (followed by the row's time); admission's own are in
# ``store.admission``.
BAD_KIND = "unknown event kind (expected 0/1/2)"
BAD_TIME = "time is NaN or infinite"
NEGATIVE_TIME = "time is negative"
BAD_WEIGHT = "weight is NaN or infinite"
BAD_FEATURES = "features hold NaN or infinite values"
EMPTY_ID = "empty node id"
# a stream's schema (``schema_refusal``): one id type, one feature width
ID_TYPE = "batch has {kind} node ids but this stream uses {stream} ids; use one id type per stream"
FEATURE_WIDTH = "{label} feature width changed from {was} to {now}; use one feature width per stream"

Width = tuple[str, "int | None", tuple[int, ...], bool]
"""A feature width the caller holds a stream to: (label, width, the event kinds it binds, exact). Not exact:
a width of None is not fixed yet, and a batch without features fits any (the store pads). Exact: the
batch's width must equal it, None (no features) included (a router joins batches row-wise)."""

NOT_UTF8 = "node id is not valid UTF-8 (a lone surrogate)"


@dataclass(frozen=True)
class DeadLetter:
    """An event that was not applied, with the reason and enough context to find and replay it."""

    reason: str
    where: str
    payload: bytes | str | None = None
    index: int = -1
    eid: int | None = None


def _not_utf8(ids: np.ndarray) -> np.ndarray:
    """Ids that cannot be UTF-8 encoded (lone surrogates): no message key, hash or checkpoint holds them."""
    return np.array([not (s.isascii() or encodes_utf8(s)) for s in ids], bool)


def encodes_utf8(s: str) -> bool:
    """False for text with lone surrogates (JSON escapes can spell them): no key, hash or file holds it."""
    try:
        s.encode()
    except UnicodeEncodeError:
        return False
    return True


def _id_array(values) -> np.ndarray:
    """Array-like ids as an array; a list mixing ints and strs stays mixed (numpy would turn [1, "a"] into
    ["1", "a"] silently), so that the check below refuses it."""
    arr = np.asarray(values)
    if arr.dtype.kind == "U" and not isinstance(values, np.ndarray):
        arr = np.array(list(values), dtype=object)
    return arr


def _as_ids(name: str, arr: np.ndarray) -> np.ndarray:
    """A 1-D id column as int64, or as an object array of ``str``; anything else is refused.

    Text arrays (numpy ``'U'``) are string ids, also when they hold digits: ``"7"`` and ``7`` are different
    nodes. An object array holds either ints or strs, never both.
    """
    if arr.ndim != 1:
        raise EventValidationError(f"column '{name}' must be 1-D, got shape {arr.shape}")
    if arr.dtype == np.int64:
        return arr
    if arr.dtype.kind in "iuf":
        return to_int64(name, arr, "node ids must be int or str")
    if arr.dtype.kind == "U":
        return arr.astype(object)
    if arr.dtype.kind != "O":
        raise EventValidationError(f"column '{name}' has dtype {arr.dtype}; node ids must be int64 or str")
    if not arr.size:
        return np.empty(0, dtype=object)
    types = set(map(type, arr.tolist()))
    if all(issubclass(k, str) for k in types):
        return arr
    if all(issubclass(k, int | np.integer) and not issubclass(k, bool) for k in types):
        try:
            return arr.astype(np.int64)
        except OverflowError:
            raise EventValidationError(f"column '{name}' has ids outside the int64 range") from None
    kinds = [type(v) for v in arr.tolist()]
    bad = next(
        (i for i, k in enumerate(kinds) if not issubclass(k, str | int | np.integer) or k is bool), None
    )
    if bad is not None:
        raise EventValidationError(
            f"column '{name}' row {bad}: node id must be int or str, got {kinds[bad].__name__}"
        )
    raise EventValidationError(f"column '{name}' mixes int and str node ids; use one id type per stream")


def to_int64(name: str, arr: np.ndarray, hint: str) -> np.ndarray:
    """An integer or integral-float column as int64: a value outside int64 is refused, never wrapped (a
    wrapped id would name another node or event, e.g. a duplicate that is then dropped)."""
    if arr.dtype.kind == "u" and arr.size and arr.max() > np.iinfo(np.int64).max:
        raise EventValidationError(f"column '{name}' has values above the int64 range; {hint}")
    if arr.dtype.kind == "f" and arr.size:
        ok = (
            np.isfinite(arr) & (arr == np.round(arr)) & (np.abs(arr) <= 2.0**53)
        )  # beyond, floats are not exact
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            raise EventValidationError(
                f"column '{name}' row {i} holds {arr[i].item()!r}: non-integer floats, and floats beyond "
                f"2**53 (not exact: outside the int64 range or rounded), are refused; {hint}"
            )
    return arr.astype(np.int64, copy=False)


def _as_numeric(name: str, values, dtype, ndim: int) -> np.ndarray:
    try:
        arr = np.asarray(values)
    except ValueError as exc:  # ragged rows
        raise EventValidationError(f"column '{name}' is not a rectangular array: {exc}") from None
    if arr.ndim != ndim:
        raise EventValidationError(f"column '{name}' must be {ndim}-D, got shape {arr.shape}")
    if arr.dtype.kind not in "iufb" or arr.dtype.kind == "b":
        raise EventValidationError(f"column '{name}' must be numeric, got dtype {arr.dtype}")
    if dtype is np.int64:
        return to_int64(name, arr, f"'{name}' must hold integers")
    return arr.astype(dtype, copy=False)


def _is(col, dtype, ndim: int) -> bool:
    return col.__class__ is np.ndarray and col.dtype == dtype and col.ndim == ndim


def _as_kind(values) -> np.ndarray:
    """The kind column as int8; unknown kinds that fit stay (rows to dead-letter), others are refused."""
    kind = _as_numeric("kind", values, np.int64, 1)
    if kind.size and (kind.min() < -128 or kind.max() > 127):
        raise EventValidationError("column 'kind' out of int8 range")
    return kind.astype(np.int8)


@dataclass(frozen=True, eq=False)
class EventBatch:
    """A columnar batch of graph events.

    ``src``/``dst`` hold external node ids (int64, or Python str in an object array). For a node
    update ``dst`` is ignored (by convention equal to ``src``). ``features`` has one row per event:
    edge features for edge adds, the new node features for node updates; its width is fixed per stream.
    ``placement`` (int32, one ``(src, dst)`` row per event) carries the graph partitions a partition router
    gave the endpoints (-1: not placed yet), so that consumers own vertices where the router put them.
    """

    kind: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    t: np.ndarray
    eid: np.ndarray
    weight: np.ndarray | None = None
    features: np.ndarray | None = None
    placement: np.ndarray | None = None

    def __post_init__(self) -> None:
        """Check every column and bring it to its canonical dtype, so that a batch that exists is one the
        store can apply or dead-letter row by row: a structural problem raises here, before anything
        consumes the batch, never halfway through an ingest."""
        if (
            _is(self.kind, np.int8, 1)
            and _is(self.src, np.int64, 1)
            and _is(self.dst, np.int64, 1)
            and _is(self.t, np.float64, 1)
            and _is(self.eid, np.int64, 1)
            and (self.weight is None or _is(self.weight, np.float32, 1))
            and (self.features is None or _is(self.features, np.float32, 2))
            and (self.placement is None or _is(self.placement, np.int32, 2))
        ):  # the codecs' columns: only the lengths are left to check
            n = len(self.kind)
            if (
                len(self.src) == len(self.dst) == len(self.t) == len(self.eid) == n
                and all(col is None or len(col) == n for col in (self.weight, self.features, self.placement))
                and (self.placement is None or self.placement.shape[1] == 2)
            ):
                return
        cols = {
            "kind": _as_kind(self.kind),
            "src": _as_ids("src", _id_array(self.src)),
            "dst": _as_ids("dst", _id_array(self.dst)),
            "t": _as_numeric("t", self.t, np.float64, 1),
            "eid": _as_numeric("eid", self.eid, np.int64, 1),
        }
        if self.weight is not None:
            cols["weight"] = _as_numeric("weight", self.weight, np.float32, 1)
        if self.features is not None:
            cols["features"] = _as_numeric("features", self.features, np.float32, 2)
        if self.placement is not None:
            cols["placement"] = _as_numeric("placement", self.placement, np.int32, 2)
            if cols["placement"].shape[1] != 2:
                raise EventValidationError(
                    f"column 'placement' needs 2 columns (src, dst partition), got {cols['placement'].shape}"
                )
        n = len(cols["kind"])
        for name, col in cols.items():
            if len(col) != n:
                raise EventValidationError(f"column '{name}' has {len(col)} rows but 'kind' has {n}")
            object.__setattr__(self, name, col)
        if n and self.src.dtype != self.dst.dtype:
            raise EventValidationError(
                f"src holds {self.src.dtype} ids but dst holds {self.dst.dtype}; use one id type"
            )

    @classmethod
    def from_columns(
        cls,
        *,
        src,
        dst=None,
        t,
        eid,
        kind=None,
        weight=None,
        features=None,
        placement=None,
    ) -> EventBatch:
        """Build a batch from array-likes (``kind`` may hold names such as "edge_add"); structural errors
        raise ``EventValidationError``."""
        src_a = _id_array(src)
        if kind is None:
            kind = np.zeros(len(src_a), dtype=np.int8)
        else:
            kind = np.asarray(kind)
            if kind.dtype.kind in "UO":
                try:
                    kind = np.array([int(KIND_NAMES.get(k, k)) for k in kind.tolist()], dtype=np.int64)
                except (TypeError, ValueError) as exc:
                    raise EventValidationError(
                        f"column 'kind': {exc}; use one of {sorted(KIND_NAMES)}"
                    ) from exc
        dst_a = src_a if dst is None else _id_array(dst)
        return cls(kind, src_a, dst_a, t, eid, weight, features, placement)

    @classmethod
    def empty(cls, feature_dim: int | None = None, weighted: bool = False) -> EventBatch:
        ids = np.empty(0, dtype=np.int64)
        return cls(
            np.empty(0, np.int8),
            ids,
            ids,
            np.empty(0, np.float64),
            np.empty(0, np.int64),
            np.empty(0, np.float32) if weighted else None,
            None if feature_dim is None else np.empty((0, feature_dim), np.float32),
        )

    def __len__(self) -> int:
        return len(self.kind)

    @property
    def feature_dim(self) -> int | None:
        return None if self.features is None else self.features.shape[1]

    @property
    def string_ids(self) -> bool:
        return self.src.dtype == object

    @classmethod
    def _of_checked(cls, *columns) -> EventBatch:
        """A batch of columns taken from checked batches (rows, concatenations): nothing to check again."""
        batch = object.__new__(cls)
        for f, col in zip(_FIELDS, columns, strict=True):
            object.__setattr__(batch, f, col)
        return batch

    def take(self, index) -> EventBatch:
        """Rows ``index`` (a mask, slice or integer array) as a new batch."""
        if not isinstance(index, slice) and np.ndim(index) != 1:
            raise EventValidationError("take() needs a mask, a slice or a 1-D array of rows")
        return EventBatch._of_checked(
            self.kind[index],
            self.src[index],
            self.dst[index],
            self.t[index],
            self.eid[index],
            None if self.weight is None else self.weight[index],
            None if self.features is None else self.features[index],
            None if self.placement is None else self.placement[index],
        )

    def __getitem__(self, index) -> EventBatch:
        if isinstance(index, int | np.integer):
            index = slice(int(index), int(index) + 1 if index != -1 else None)
        return self.take(index)

    def split(self, size: int) -> Iterable[EventBatch]:
        """Consecutive batches of at most ``size`` events."""
        for start in range(0, len(self), size):
            yield self.take(slice(start, start + size))

    def sorted_by_time(self) -> EventBatch:
        """Stable sort by time (ties keep arrival order)."""
        order = np.argsort(self.t, kind="stable")
        return self.take(order)

    def validate(self, where: str = "batch") -> tuple[EventBatch, list[DeadLetter]]:
        """Split into the valid rows and a dead letter for each invalid one."""
        checks = [
            (~((self.kind >= 0) & (self.kind <= 2)), BAD_KIND),
            (~np.isfinite(self.t), BAD_TIME),
            (self.t < 0, NEGATIVE_TIME),
        ]
        if self.weight is not None:
            checks.append((~np.isfinite(self.weight), BAD_WEIGHT))
        if self.features is not None and self.features.size:
            checks.append((~np.isfinite(self.features).all(axis=1), BAD_FEATURES))
        if self.string_ids:
            empty = np.array([not s for s in self.src], bool) | np.array([not s for s in self.dst], bool)
            checks.append((empty, EMPTY_ID))
            unencodable = _not_utf8(self.src) | _not_utf8(self.dst)
            checks.append((unencodable, NOT_UTF8))
        bad = np.logical_or.reduce([mask for mask, _ in checks])
        if not bad.any():
            return self, []
        reasons: dict[int, str] = {}
        for mask, reason in checks:
            for i in np.flatnonzero(mask).tolist():
                reasons.setdefault(i, reason)
        letters = [
            DeadLetter(
                reason=f"{reasons[i]} (t={self.t[i].item()!r})",
                where=where,
                index=int(i),
                eid=int(self.eid[i]),
            )
            for i in sorted(reasons)
        ]
        return self.take(~bad), letters


_FIELDS = ("kind", "src", "dst", "t", "eid", "weight", "features", "placement")


def schema_refusal(batch: EventBatch, id_kind: str | None, widths: Sequence[Width] = ()) -> str | None:
    """Why ``batch`` breaks its stream's schema: node ids of another type than ``id_kind`` ("int", "str";
    None: not fixed yet), or, for rows of the kinds a ``Width`` binds, another feature width than it (a
    width of None reads "none": no features). The one check and wording wherever a stream is held to its
    schema: admission, and a Kafka reader's decoder before a store sees the events."""
    if not len(batch):
        return None
    kind = "str" if batch.string_ids else "int"
    if id_kind is not None and kind != id_kind:
        return ID_TYPE.format(kind=kind, stream=id_kind)
    now = batch.feature_dim
    for label, was, kinds, exact in widths:
        differs = was != now and (exact or None not in (was, now))
        if differs and np.isin(batch.kind, kinds).any():
            return FEATURE_WIDTH.format(label=label, was=_width(was), now=_width(now))
    return None


def _width(width: int | None) -> str:
    return "none" if width is None else str(width)


def joined_placement(batches: Sequence[EventBatch]) -> np.ndarray | None:
    """The placement column of batches joined row-wise: -1 (not placed) for rows of batches without one."""
    if all(b.placement is None for b in batches):
        return None
    return np.concatenate(
        [np.full((len(b), 2), -1, np.int32) if b.placement is None else b.placement for b in batches]
    )


def concat(batches: Sequence[EventBatch]) -> EventBatch:
    """Concatenate batches of one stream (same id type, same feature width)."""
    batches = [b for b in batches if len(b)]
    if not batches:
        return EventBatch.empty()
    if len(batches) == 1:
        return batches[0]
    widths = {b.feature_dim for b in batches}
    if len(widths) > 1:
        raise EventValidationError(
            f"cannot concatenate batches with feature widths {sorted(map(str, widths))}"
        )
    weighted = {b.weight is not None for b in batches}
    if len(weighted) > 1:
        raise EventValidationError("cannot concatenate weighted and unweighted batches")
    id_obj = {b.string_ids for b in batches}
    if len(id_obj) > 1:
        raise EventValidationError("cannot concatenate batches with int and str node ids")
    return EventBatch._of_checked(
        np.concatenate([b.kind for b in batches]),
        np.concatenate([b.src for b in batches]),
        np.concatenate([b.dst for b in batches]),
        np.concatenate([b.t for b in batches]),
        np.concatenate([b.eid for b in batches]),
        None if batches[0].weight is None else np.concatenate([b.weight for b in batches]),
        None if batches[0].features is None else np.concatenate([b.features for b in batches]),
        joined_placement(batches),
    )
