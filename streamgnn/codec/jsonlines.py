"""JSON lines: one object per event, ``{"kind", "src", "dst", "t", "eid", "weight"?, "features"?}``.

The one place JSON lines are decoded, for every source (files, Kafka messages, HTTP bodies):
``decode_json_lines`` first tries the fast path (``fastjson.fast_rows``: a Numba scanner, then msgspec),
which accepts only what the careful path below accepts, and takes the careful path (``json``, a reason and
a line for each dead letter) for any payload the fast path refuses. A bad line never sinks the payload: it
becomes a dead letter naming the line, and the other lines still decode.
"""

from __future__ import annotations

import json

import numpy as np

from ..errors import CodecError
from ..events import KIND_LABELS, KIND_NAMES, DeadLetter, EventBatch, encodes_utf8
from .fastjson import fast_rows

_I64_MIN, _I64_END = -(2**63), 2**63
_KIND_JSON = {int(k): json.dumps(name) for k, name in KIND_LABELS.items()}
_KIND_FROM_JSON: dict[object, int] = {**{name: int(k) for name, k in KIND_NAMES.items()}, 0: 0, 1: 1, 2: 2}
_NODE_UPDATE = int(KIND_NAMES["node_update"])
_NODE_UPDATE_JSON = _KIND_JSON[_NODE_UPDATE]
_BOM = b"\xef\xbb\xbf"


# ---------------------------------------------------------------------------------------------- JSON encode


def _finite_or_raise(batch: EventBatch) -> None:
    """JSON has no NaN or infinity, so refuse rather than emit lines no decoder accepts."""
    cols = {"t": batch.t, "weight": batch.weight, "features": batch.features}
    for name, col in cols.items():
        if col is not None and col.size and not np.isfinite(col).all():
            row = int(np.flatnonzero(~np.isfinite(col.reshape(len(batch), -1)).all(axis=1))[0])
            raise CodecError(
                f"row {row}: '{name}' is NaN or infinite; run batch.validate() before encoding to JSON"
            )


def _id_texts(ids: np.ndarray) -> list[str]:
    if ids.dtype == object:
        return [json.dumps(v) for v in ids.tolist()]
    return list(map(str, ids.tolist()))


def _json_lines(batch: EventBatch) -> list[str]:
    _finite_or_raise(batch)
    kinds = [_KIND_JSON.get(k) or str(k) for k in batch.kind.tolist()]
    srcs = _id_texts(batch.src)
    dsts = _id_texts(batch.dst)
    # float repr round-trips exactly; float32 columns widen to float64 exactly, so they round-trip too.
    ts = list(map(repr, batch.t.tolist()))
    eids = list(map(str, batch.eid.tolist()))
    n = len(batch)
    weights = [""] * n if batch.weight is None else [f',"weight":{w!r}' for w in batch.weight.tolist()]
    if batch.features is None:
        feats = [""] * n
    else:
        feats = [',"features":[' + ",".join(map(repr, row)) + "]" for row in batch.features.tolist()]
    return [
        f'{{"kind":{k},"src":{s},"t":{t},"eid":{e}{w}{f}}}'
        if k == _NODE_UPDATE_JSON
        else f'{{"kind":{k},"src":{s},"dst":{d},"t":{t},"eid":{e}{w}{f}}}'
        for k, s, d, t, e, w, f in zip(kinds, srcs, dsts, ts, eids, weights, feats, strict=True)
    ]


def encode_json_lines(batch: EventBatch) -> bytes:
    """The batch as UTF-8 JSON lines, one event per line, each ending in a newline."""
    lines = _json_lines(batch)
    return ("\n".join(lines) + "\n").encode() if lines else b""


def encode_json_event(batch: EventBatch, i: int) -> bytes:
    """Event ``i`` as one JSON object without a newline: the value of a single-event Kafka message."""
    n = len(batch)
    if not -n <= i < n:
        raise IndexError(f"event {i} is out of range for a batch of {n} events")
    i %= n
    return _json_lines(batch.take(slice(i, i + 1)))[0].encode()


# ---------------------------------------------------------------------------------------------- JSON decode


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not allowed; send finite numbers only")


_loads = json.JSONDecoder(parse_constant=_reject_constant).decode


_NUMBER_TYPES = frozenset({int, float})
_FLOAT_LIMIT = 2**1023  # Python ints at or beyond this cannot become a float64


def _is_number(v: object) -> bool:
    return type(v) is float or (type(v) is int and -_FLOAT_LIMIT < v < _FLOAT_LIMIT)


def _node_id(obj: dict, key: str) -> object:
    """The id, or a reason string wrapped in a tuple (ids may themselves be str)."""
    if key not in obj:
        return (f"missing '{key}'",)
    v = obj[key]
    if type(v) is int:
        return v if _I64_MIN <= v < _I64_END else (f"'{key}' {v} is outside the int64 range",)
    if type(v) is str:
        if not v:
            return (f"'{key}' is an empty string",)
        if v.isascii() or encodes_utf8(v):
            return v
        return (f"'{key}' holds a lone surrogate (an unpaired \\ud800-\\udfff escape), not text",)
    return (f"'{key}' must be an int or str node id, got {type(v).__name__}",)


def _fields(obj: object) -> tuple | str:
    """The event's fields, or the reason the line cannot be an event."""
    if type(obj) is not dict:
        return f"not a JSON object (got {type(obj).__name__})"
    raw_kind = obj.get("kind", 0)
    kind = _KIND_FROM_JSON.get(raw_kind) if type(raw_kind) is str or type(raw_kind) is int else None
    if kind is None:
        return f"unknown kind {raw_kind!r}; use edge_add, edge_delete, node_update or 0/1/2"
    src = _node_id(obj, "src")
    if type(src) is tuple:
        return src[0]
    if kind == _NODE_UPDATE:
        dst = src
    else:
        dst = _node_id(obj, "dst")
        if type(dst) is tuple:
            return dst[0]
        if type(dst) is not type(src):
            return "'src' and 'dst' must have the same id type (both int or both str)"
    if "t" not in obj:
        return "missing 't'"
    t = obj["t"]
    if not _is_number(t):
        return f"'t' must be a finite number, got {type(t).__name__} {t!r:.40}"
    if "eid" not in obj:
        return "missing 'eid'"
    eid = obj["eid"]
    if type(eid) is not int:
        return f"'eid' must be an int, got {type(eid).__name__}"
    if not _I64_MIN <= eid < _I64_END:
        return f"'eid' {eid} is outside the int64 range"
    weight = obj.get("weight")
    if weight is not None and not _is_number(weight):
        return f"'weight' must be a finite number, got {type(weight).__name__} {weight!r:.40}"
    feats = obj.get("features")
    if feats is not None and (
        type(feats) is not list
        or not {*map(type, feats)} <= _NUMBER_TYPES
        or (int in {*map(type, feats)} and not all(map(_is_number, feats)))
    ):
        return "'features' must be a list of finite numbers"
    return kind, src, dst, t, eid, weight, feats


_JOINT = "NaN"  # the bulk parse's sentinel: a bare token, which no escape can spell
_JOINED = object()  # what each joint parses to in the bulk parse


def _joint_constant(name: str) -> object:
    if name == _JOINT:
        return _JOINED
    return _reject_constant(name)


_loads_joined = json.JSONDecoder(parse_constant=_joint_constant).decode


def _parse_all(lines: list[str]) -> list[object] | None:
    """Parse every line in one ``json.loads`` call, or None where that cannot be trusted (the careful path
    then parses line by line).

    Lines are joined with ``\n,NaN,`` into one array, and the result is used only when no line holds the
    text ``NaN`` and every odd element is a joint's ``NaN``, every even one an object. That proves each line
    was exactly one element: no line spells the token (and no JSON escape can: it is a bare token, not a
    string), a raw newline cannot sit inside a string, so every ``NaN`` parsed is a joint's, and all of them
    being top-level elements puts every joint's commas at the top level: what lies between two joints,
    one line, parsed on its own. A line that left a container open would pull a joint inside it, and a
    line that spelled the sentinel itself, to make up for that, is not taken. Lines are parsed exactly as
    they would be alone, so neighbours can never absorb, split or hide a line.
    """
    joined = "[" + "\n,NaN,".join(lines) + "]"
    if joined.count(_JOINT) != len(lines) - 1:
        return None
    try:
        parsed = _loads_joined(joined)
    except (ValueError, RecursionError):
        return None
    if len(parsed) != 2 * len(lines) - 1 or parsed[1::2].count(_JOINED) != len(lines) - 1:
        return None
    events = parsed[::2]
    return events if all(type(e) is dict for e in events) else None


def _parse_one(line: str) -> object:
    """The parsed line, or a reason string wrapped in a tuple."""
    try:
        line.encode()
    except UnicodeEncodeError:
        return ("line is not valid UTF-8",)
    try:
        return _loads(line)
    except json.JSONDecodeError as exc:
        return (f"invalid JSON: {exc.msg} at column {exc.colno}",)
    except ValueError as exc:
        return (f"invalid JSON: {exc}",)
    except RecursionError:
        return ("invalid JSON: nested too deeply",)


def decode_json_lines(
    data: bytes | str, where: str = "json", *, first_line: int = 1, fast: bool = True
) -> tuple[EventBatch, list[DeadLetter]]:
    """Decode JSON lines into a validated batch plus a dead letter for every line that is not a valid event.

    Blank lines are skipped. A dead letter's ``where`` is ``"{where}:line {n}"``, counting lines from
    ``first_line`` (pass the file position when decoding a file in chunks), its ``index`` is ``n - 1`` and
    its ``payload`` the raw line (bytes if ``data`` was bytes). ``kind``
    defaults to edge_add; node updates take ``dst = src``. Rows without ``weight`` get 1.0 when other rows
    carry one. The first good line fixes the id type (int or str) and the feature width for the payload.

    Bytes whose every line is one plain event go through ``fast_rows`` (the same batch, several times
    faster); the rest, and ``fast=False`` (a caller that has just tried ``fast_rows`` on the same events),
    through the careful path, which gives each bad line its reason.
    """
    if fast and not isinstance(data, str) and bytes(data[:3]) != _BOM:  # (the careful path skips a BOM)
        lines = [line for line in bytes(data).split(b"\n") if line.strip()]
        batch = fast_rows(lines, where) if lines else None
        if batch is not None:
            return batch, []
    return _careful(data, where, first_line)


def _careful(data: bytes | str, where: str, first_line: int) -> tuple[EventBatch, list[DeadLetter]]:
    """``decode_json_lines`` through ``json``: each line parsed, checked and dead-lettered with its reason."""
    as_bytes = not isinstance(data, str)
    utf8_ok = True
    if as_bytes:
        raw = bytes(data)
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            text, utf8_ok = raw.decode(errors="surrogateescape"), False
    else:
        text = data
    if text.startswith("\ufeff"):
        text = text[1:]
    all_lines = text.split("\n")
    numbers = [n for n, line in enumerate(all_lines, first_line) if line and not line.isspace()]
    lines = [all_lines[n - first_line] for n in numbers]

    def payload(n: int) -> bytes | str:
        line = all_lines[n - first_line]
        return line.encode(errors="surrogateescape") if as_bytes else line

    letters: list[DeadLetter] = []

    def dead(n: int, reason: str, eid: int | None = None) -> None:
        letters.append(
            DeadLetter(reason=reason, where=f"{where}:line {n}", payload=payload(n), index=n - 1, eid=eid)
        )

    parsed = _parse_all(lines) if utf8_ok and len(lines) > 1 else None
    if parsed is None:
        parsed = [_parse_one(line) for line in lines]

    cols: list[tuple] = []
    rows: list[int] = []
    id_type: type | None = None
    width: int | None = None
    first_good = 0
    for n, obj in zip(numbers, parsed, strict=True):
        fields = obj[0] if type(obj) is tuple else _fields(obj)
        if type(fields) is str:
            dead(n, fields, obj.get("eid") if type(obj) is dict and type(obj.get("eid")) is int else None)
            continue
        src, feats = fields[1], fields[6]
        row_width = None if feats is None else len(feats)
        if id_type is None:
            id_type, width, first_good = type(src), row_width, n
        elif type(src) is not id_type:
            reason = f"{type(src).__name__} node ids but line {first_good} set {id_type.__name__} ids"
            dead(n, f"{reason}; use one id type per stream", fields[4])
            continue
        elif row_width != width:
            have = "no features" if row_width is None else f"{row_width} features"
            want = "no features" if width is None else f"{width} features"
            dead(n, f"{have} but line {first_good} set {want}; use one feature width per stream", fields[4])
            continue
        cols.append(fields)
        rows.append(n)

    batch = _batch_from_rows(cols, id_type, width)
    valid, invalid = batch.validate(where)
    for letter in invalid:
        dead(rows[letter.index], letter.reason, letter.eid)
    return valid, letters


def _batch_from_rows(cols: list[tuple], id_type: type | None, width: int | None) -> EventBatch:
    n = len(cols)
    if not n:
        return EventBatch.empty(feature_dim=width)
    kind, src, dst, t, eid, weight, feats = zip(*cols, strict=True)
    id_dtype = object if id_type is str else np.int64
    src_a = np.array(src, dtype=id_dtype)
    dst_a = np.array(dst, dtype=id_dtype)
    w_a = None
    with np.errstate(over="ignore"):  # out-of-range floats become inf, which validate() dead-letters
        if any(w is not None for w in weight):
            w_a = np.array([1.0 if w is None else w for w in weight], dtype=np.float32)
        f_a = None if width is None else np.array(feats, dtype=np.float32).reshape(n, width)
    return EventBatch(
        np.array(kind, dtype=np.int8),
        src_a,
        dst_a,
        np.array(t, dtype=np.float64),
        np.array(eid, dtype=np.int64),
        w_a,
        f_a,
    )
