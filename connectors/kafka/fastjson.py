"""The fast path for single-event JSON messages: msgspec parses and type-checks each message in C.

Most JSON topics carry one event per message, of the plain shape ``{"src", "dst", "t", "eid"}`` (maybe
``kind``, ``weight``, ``features``). ``fast_rows`` decodes such a run of messages straight into columns; it
returns None as soon as anything is unusual (a message that is not exactly one such object, a value of the
wrong type or range, a node update, mixed id types or feature widths, an event that fails validation), and
the caller then takes the codec's careful path, which finds the reason and the line for each dead letter.
So the fast path decides nothing on its own: it only ever accepts what the careful path accepts.

>>> batch = fast_rows([b'{"src":1,"dst":2,"t":1.5,"eid":7}', b'{"src":3,"dst":1,"t":2,"eid":8}'], "e:0")
>>> batch.t.tolist(), batch.eid.tolist()
([1.5, 2.0], [7, 8])
>>> fast_rows([b'{"src":1,"dst":2,"t":NaN,"eid":7}'], "e:0") is None  # the careful path says why
True
"""

from __future__ import annotations

import operator
from typing import Annotated

import msgspec
import numpy as np

from ...events import KIND_NAMES, EventBatch

_I64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
_EDGE_KINDS = {0: 0, 1: 1, **{k: int(KIND_NAMES[k]) for k in ("edge_add", "edge_delete")}}


class _Event(msgspec.Struct, gc=False):  # no cycles: the collector need not track thousands per poll
    src: _I64 | str
    t: float
    eid: _I64
    dst: _I64 | str | None = None
    kind: int | str = 0
    weight: float | None = None
    features: list[float] | None = None


_decode = msgspec.json.Decoder(_Event).decode


def fast_rows(values: list[bytes], where: str) -> EventBatch | None:
    """The events of ``values`` (one per message) as a validated batch, or None to take the careful path."""
    try:
        events = list(map(_decode, values))
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    n = len(events)
    kinds = list(map(_KIND, events))
    if kinds.count(0) == n:
        kind = np.zeros(n, np.int8)
    elif set(kinds) <= _EDGE_KINDS.keys():  # not node updates (dst = src) or unknown kinds
        kind = np.array([_EDGE_KINDS[k] for k in kinds], np.int8)
    else:
        return None
    src, dst = _ids(list(map(_SRC, events))), _ids(list(map(_DST, events)))
    if src is None or dst is None or src.dtype != dst.dtype:
        return None
    weights, feats = list(map(_WEIGHT, events)), list(map(_FEATURES, events))
    weight = features = None
    if feats.count(None) != n and (None in feats or len(set(map(len, feats))) != 1):
        return None
    with np.errstate(over="ignore"):  # float32 overflow becomes inf, which validation refuses
        if weights.count(None) != n:
            weight = np.array([1.0 if w is None else w for w in weights], np.float32)
        if feats.count(None) != n:
            features = np.array(feats, np.float32).reshape(n, len(feats[0]))
    t = np.array(list(map(_T, events)), np.float64)
    eid = np.array(list(map(_EID, events)), np.int64)
    batch = EventBatch(kind, src, dst, t, eid, weight, features)
    valid, invalid = batch.validate(where)
    return None if invalid else valid


_KIND, _SRC, _DST, _T, _EID, _WEIGHT, _FEATURES = (
    operator.attrgetter(name) for name in ("kind", "src", "dst", "t", "eid", "weight", "features")
)


def _ids(ids: list) -> np.ndarray | None:
    """One id column, all int or all str (validation checks the strings), else None (``dst`` missing)."""
    types = set(map(type, ids))
    if types == {int}:
        return np.array(ids, np.int64)
    return np.array(ids, dtype=object) if types == {str} else None
