"""The fast path for single-event JSON messages: a whole poll read in one call, in Numba or msgspec.

Most JSON topics carry one event per message, of the plain shape ``{"src", "dst", "t", "eid"}`` (maybe
``kind``, ``weight``, ``features``). ``fast_rows`` decodes such a run of messages straight into columns; it
returns None as soon as anything is unusual (a message that is not exactly one such object, a value of the
wrong type or range, a node update, mixed id types or feature widths, an event that fails validation), and
the caller then takes the codec's careful path, which finds the reason and the line for each dead letter.
So the fast path decides nothing on its own: it only ever accepts what the careful path accepts.

Three tiers, because a call into msgspec per message costs as much as the parse itself, and building and
unpacking a struct per event as much again:

* the plainest shape (int ids, no features; see ``jsonscan``) read by a Numba scanner straight into
  columns;
* the whole poll in one msgspec call: the messages joined as one JSON array, each element decoded into a
  strict struct (known fields only, so no element can nest an object). That the array's elements are
  exactly the messages follows from the joint: each message starts with ``{`` and ends with ``}`` and the
  joint is ``,`` plus a raw newline, which no JSON string may hold. The ``}`` ending a message therefore
  closes an object, and the only objects are events, so no event runs across a joint, each message holds
  whole events, and as many events as messages means one each;
* one message at a time into a lenient struct (unknown fields skipped, spaces around the object), when the
  others refuse the poll.

None takes a message with a line break inside its object: the codec reads JSON lines, where that is
two lines, each a dead letter.

>>> batch = fast_rows([b'{"src":1,"dst":2,"t":1.5,"eid":7}', b'{"src":3,"dst":1,"t":2,"eid":8}'], "e:0")
>>> batch.t.tolist(), batch.eid.tolist()
([1.5, 2.0], [7, 8])
>>> fast_rows([b'{"src":1,"dst":2,"t":NaN,"eid":7}'], "e:0") is None  # the careful path says why
True
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
import numpy as np
from msgspec.structs import astuple

from ..events import KIND_NAMES, EventBatch
from .jsonscan import scan

_I64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
_Kind = Literal["edge_add", "edge_delete", 0, 1]  # edges only: a node update (dst = src) takes the codec
_KIND_CODES = {0: 0, 1: 1, **{k: int(KIND_NAMES[k]) for k in ("edge_add", "edge_delete")}}
_ADD = ("edge_add", 0)
_DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError)
_JSON_SPACE = b" \t\r\n"


def _event_struct(name: str, ids, strict: bool) -> type:
    """An event struct with ids of type ``ids``; ``strict``: only known fields, ``dst`` required. They all
    share one field order, which ``_columns`` relies on. No cycles: gc=False spares the collector
    thousands of objects per poll."""
    dst = (ids,) if strict else (ids | None, None)
    fields = [("src", ids), ("t", float), ("eid", _I64), ("dst", *dst), ("kind", _Kind, 0),
              ("weight", float | None, None), ("features", list[float] | None, None)]  # fmt: skip
    return msgspec.defstruct(name, fields, gc=False, forbid_unknown_fields=strict)


_decode_one = msgspec.json.Decoder(_event_struct("Event", _I64 | str, strict=False)).decode  # lenient
_decode_all = {  # strict, for a whole poll
    strings: msgspec.json.Decoder(list[_event_struct("Event", str if strings else _I64, strict=True)]).decode
    for strings in (False, True)
}


def fast_rows(values: list[bytes], where: str, string_ids: bool | None = None) -> EventBatch | None:
    """The events of ``values`` (one per message) as a validated batch, or None to take the careful path.
    ``string_ids``: the stream's id type where known (str ids skip the scanner)."""
    if not values:
        return None
    poll = _Poll(values)
    batch = None if string_ids else _scanned(poll)
    if batch is None:
        whole = _whole(poll, string_ids)
        batch = _columns(*whole) if whole is not None else _one_by_one(values)
    if batch is None:
        return None
    valid, invalid = batch.validate(where)
    return None if invalid else valid


class _Poll:
    """The messages joined as one JSON array, ``[`` + ``,\\n``-joined + ``]``, and where each one starts."""

    def __init__(self, values: list[bytes]) -> None:
        self.n = len(values)
        self.lengths = np.fromiter(map(len, values), np.intp, self.n)
        self.joined = b"[" + b",\n".join(values) + b"]"
        self.starts = np.cumsum(self.lengths + 2) - self.lengths - 1  # after "[" and each ",\n"
        self.raw = np.frombuffer(self.joined, np.uint8)


def _scanned(poll: _Poll) -> EventBatch | None:
    """The poll read by the Numba scanner, or None if it does not read every message."""
    done, kind, src, dst, t, eid, weight, weighted = scan(poll.raw, poll.starts, poll.starts + poll.lengths)
    if done < poll.n:
        return None
    if not weighted.any():
        return EventBatch(kind, src, dst, t, eid)
    with np.errstate(over="ignore"):  # float32 overflow becomes inf, which validation refuses
        return EventBatch(kind, src, dst, t, eid, weight.astype(np.float32))


def _whole(poll: _Poll, string_ids: bool | None) -> tuple[list, bool] | None:
    """The poll decoded in one msgspec call, and whether its ids are strings; None if the strict tier
    refuses it (see the module docstring for why the elements are exactly the messages)."""
    starts, lengths, raw = poll.starts, poll.lengths, poll.raw
    if not ((raw[starts] == ord("{")).all() and (raw[starts + lengths - 1] == ord("}")).all()):
        return None
    if poll.joined.count(b"\n") != poll.n - 1:
        return None  # a line break inside a message: JSON lines make that two (bad) lines
    for strings in (False, True) if string_ids is None else (string_ids,):
        try:
            events = _decode_all[strings](poll.joined)
        except msgspec.ValidationError:
            continue  # maybe the other id type
        except msgspec.DecodeError:
            return None
        return (events, strings) if len(events) == poll.n else None
    return None


def _one_by_one(values: list[bytes]) -> EventBatch | None:
    """The lenient tier: a msgspec call per message."""
    if any(b"\n" in v.strip(_JSON_SPACE) for v in values):
        return None  # a line break inside the object: JSON lines make that two (bad) lines
    try:
        events = list(map(_decode_one, values))
    except _DECODE_ERRORS:
        return None
    return _columns(events, None)


def _columns(events: list, string_ids: bool | None) -> EventBatch | None:
    """Columns of decoded structs; ``string_ids`` None: lenient structs, whose id types are checked here."""
    n = len(events)
    src, t, eid, dst, kinds, weights, feats = zip(*map(astuple, events), strict=True)
    if string_ids is None:
        types = set(map(type, src)) | set(map(type, dst))  # (dst None: a node update or missing)
        if types != {int} and types != {str}:
            return None
        string_ids = types == {str}
    if kinds.count(_ADD[0]) + kinds.count(_ADD[1]) == n:
        kind = np.zeros(n, np.int8)
    else:
        kind = np.fromiter(map(_KIND_CODES.__getitem__, kinds), np.int8, n)
    weight = features = None
    if feats.count(None) != n and (None in feats or len(set(map(len, feats))) != 1):
        return None
    with np.errstate(over="ignore"):  # float32 overflow becomes inf, which validation refuses
        if weights.count(None) != n:
            weight = np.array([1.0 if w is None else w for w in weights], np.float32)
        if feats.count(None) != n:
            features = np.array(feats, np.float32).reshape(n, len(feats[0]))
    ids = object if string_ids else np.int64
    return EventBatch(
        kind, np.array(src, ids), np.array(dst, ids), np.array(t, np.float64), np.array(eid, np.int64),
        weight, features,
    )  # fmt: skip
