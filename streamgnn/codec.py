"""Wire formats for EventBatches: JSON lines for interoperability, a columnar binary format for speed.

JSON lines: one object per event, ``{"kind", "src", "dst", "t", "eid", "weight"?, "features"?}``. A bad line
never sinks the payload: it becomes a dead letter naming the line, and the other lines still decode.

Binary (version 1), all little-endian::

    header (20 bytes): magic b"SGNB" | u16 version | u16 flags | u32 count | u32 feature_dim | u32 body CRC-32
    body: kind i8[n] | t f64[n] | eid i64[n] | src | dst | weight f32[n]? | features f32[n, dim]?
          | placement i32[n, 2]?
    src/dst: i64[n], or with string ids u32 offsets[n + 1] followed by the UTF-8 bytes

Flags: bit 0 weight, bit 1 features, bit 2 string ids, bit 3 placement (the endpoints' graph partitions, as
a partition router assigned them; JSON lines do not carry it). Each column starts at a multiple of 8 bytes
from the start of the payload (zero padding), so decoding hands out aligned zero-copy ``np.frombuffer``
views.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable
from dataclasses import replace
from itertools import pairwise

import numpy as np

from .errors import CodecError
from .events import KIND_LABELS, KIND_NAMES, DeadLetter, EventBatch, encodes_utf8

CONTENT_JSON = "application/x-streamgnn-jsonl"
CONTENT_BINARY = "application/x-streamgnn-batch"
_JSON_TYPES = frozenset({CONTENT_JSON, "application/json", "application/x-ndjson", "application/jsonl"})

MAGIC = b"SGNB"
VERSION = 1
FLAG_WEIGHT = 1
FLAG_FEATURES = 2
FLAG_STRING_IDS = 4
FLAG_PLACEMENT = 8
_HEADER = struct.Struct("<4sHHIII")
_U32_MAX = 2**32 - 1
_I64_MIN, _I64_END = -(2**63), 2**63

_KIND_JSON = {int(k): json.dumps(name) for k, name in KIND_LABELS.items()}
_KIND_FROM_JSON: dict[object, int] = {**{name: int(k) for name, k in KIND_NAMES.items()}, 0: 0, 1: 1, 2: 2}
_NODE_UPDATE = int(KIND_NAMES["node_update"])
_NODE_UPDATE_JSON = _KIND_JSON[_NODE_UPDATE]


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
    data: bytes | str, where: str = "json", *, first_line: int = 1
) -> tuple[EventBatch, list[DeadLetter]]:
    """Decode JSON lines into a validated batch plus a dead letter for every line that is not a valid event.

    Blank lines are skipped. A dead letter's ``where`` is ``"{where}:line {n}"``, counting lines from
    ``first_line`` (pass the file position when decoding a file in chunks), its ``index`` is ``n - 1`` and
    its ``payload`` the raw line (bytes if ``data`` was bytes). ``kind``
    defaults to edge_add; node updates take ``dst = src``. Rows without ``weight`` get 1.0 when other rows
    carry one. The first good line fixes the id type (int or str) and the feature width for the payload.
    """
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


# ---------------------------------------------------------------------------------------------- binary


def _pad(offset: int) -> int:
    return -offset % 8


def _string_column(ids: np.ndarray, name: str) -> list[bytes]:
    try:
        encoded = [s.encode() for s in ids.tolist()]
    except (AttributeError, UnicodeEncodeError) as exc:
        raise CodecError(f"column '{name}': string ids must be valid str ({exc})") from exc
    offsets = np.zeros(len(encoded) + 1, dtype="<u4")
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    total = int(lengths.sum())
    if total > _U32_MAX:
        raise CodecError(f"column '{name}' holds {total} bytes of ids; split the batch below 4 GiB")
    offsets[1:] = np.cumsum(lengths)
    return [offsets.tobytes(), b"".join(encoded)]


def encode_binary(batch: EventBatch) -> bytes:
    """The batch in the versioned columnar format (see the module docstring)."""
    n = len(batch)
    dim = batch.feature_dim or 0
    if n > _U32_MAX or dim > _U32_MAX:
        raise CodecError(f"batch of {n} events x {dim} features is too large; split it with batch.split()")
    flags = (
        (FLAG_WEIGHT if batch.weight is not None else 0)
        | (FLAG_FEATURES if batch.features is not None else 0)
        | (FLAG_STRING_IDS if batch.string_ids else 0)
        | (FLAG_PLACEMENT if batch.placement is not None else 0)
    )
    columns: list[bytes | memoryview] = [batch.kind.astype(np.int8, copy=False).tobytes()]
    columns += [
        np.ascontiguousarray(batch.t, dtype="<f8").data,
        np.ascontiguousarray(batch.eid, dtype="<i8").data,
    ]
    for name, ids in (("src", batch.src), ("dst", batch.dst)):
        if batch.string_ids:
            columns += _string_column(ids, name)
        else:
            columns.append(np.ascontiguousarray(ids, dtype="<i8").data)
    if batch.weight is not None:
        columns.append(np.ascontiguousarray(batch.weight, dtype="<f4").data)
    if batch.features is not None:
        columns.append(np.ascontiguousarray(batch.features, dtype="<f4").data)
    if batch.placement is not None:
        columns.append(np.ascontiguousarray(batch.placement, dtype="<i4").data)
    body: list[bytes | memoryview] = []
    offset = _HEADER.size
    for col in columns:
        body.append(col)
        offset += col.nbytes if isinstance(col, memoryview) else len(col)
        pad = _pad(offset)
        if pad:
            body.append(b"\0" * pad)
            offset += pad
    crc = 0
    for part in body:
        crc = zlib.crc32(part, crc)
    return b"".join([_HEADER.pack(MAGIC, VERSION, flags, n, dim, crc), *body])


class _Reader:
    """Walks the body column by column, refusing to read past the end of the payload."""

    def __init__(self, data: bytes | memoryview, where: str) -> None:
        self.data = data
        self.where = where
        self.offset = _HEADER.size

    def fail(self, what: str) -> CodecError:
        return CodecError(f"{self.where}: {what}")

    def take(self, dtype: str, count: int, name: str) -> np.ndarray:
        end = self.offset + np.dtype(dtype).itemsize * count
        padded = end + _pad(end)
        if padded > len(self.data):
            raise self.fail(
                f"truncated payload: column '{name}' needs bytes {self.offset}..{padded} but the payload has "
                f"{len(self.data)}; the message was cut short, resend it"
            )
        arr = np.frombuffer(self.data, dtype=dtype, count=count, offset=self.offset)
        self.offset = padded
        return arr

    def strings(self, count: int, name: str) -> Callable[[], np.ndarray]:
        """Read the offsets and bytes now; decode them after the CRC check, when they can be trusted."""
        offsets = self.take("<u4", count + 1, f"{name} offsets")
        blob = self.take("u1", int(offsets[-1]), f"{name} bytes")

        def finish() -> np.ndarray:
            if offsets[0] != 0 or (count and np.any(np.diff(offsets.astype(np.int64)) < 0)):
                raise self.fail(f"column '{name}': string offsets are not increasing from 0")
            try:
                text = blob.tobytes().decode()
            except UnicodeDecodeError as exc:
                raise self.fail(f"column '{name}': ids are not valid UTF-8 ({exc})") from exc
            bounds = offsets.tolist()
            if len(text) == len(blob):  # ASCII: byte offsets are character offsets
                ids = [text[a:b] for a, b in pairwise(bounds)]
            else:
                raw = blob.tobytes()
                try:
                    ids = [raw[a:b].decode() for a, b in pairwise(bounds)]
                except UnicodeDecodeError as exc:
                    raise self.fail(f"column '{name}': an offset splits a UTF-8 character ({exc})") from exc
            out = np.empty(count, dtype=object)
            out[:] = ids
            return out

        return finish


def decode_binary(data: bytes | bytearray | memoryview, where: str = "binary") -> EventBatch:
    """Decode a binary payload; raise ``CodecError`` if it is not exactly one intact version-1 batch.

    Numeric columns are read-only views on ``data`` (no copy on little-endian machines); copy a column
    before writing to it.
    """
    if len(data) < _HEADER.size:
        raise CodecError(
            f"{where}: truncated payload: {len(data)} bytes is shorter than the {_HEADER.size}-byte header"
        )
    magic, version, flags, n, dim, crc = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CodecError(
            f"{where}: bad magic {bytes(magic)!r}, expected {MAGIC!r}: not a streamgnn binary batch "
            f"(for JSON lines use content type {CONTENT_JSON})"
        )
    if version != VERSION:
        raise CodecError(
            f"{where}: unsupported binary version {version}; this streamgnn reads version {VERSION}"
        )
    if flags & ~(FLAG_WEIGHT | FLAG_FEATURES | FLAG_STRING_IDS | FLAG_PLACEMENT):
        raise CodecError(
            f"{where}: unknown flags {flags:#06x}; the producer uses a newer format, upgrade streamgnn"
        )
    if dim and not flags & FLAG_FEATURES:
        raise CodecError(f"{where}: header gives feature_dim {dim} but no features flag")
    reader = _Reader(data, where)
    kind = reader.take("i1", n, "kind")
    t = reader.take("<f8", n, "t")
    eid = reader.take("<i8", n, "eid")
    if flags & FLAG_STRING_IDS:
        src_finish = reader.strings(n, "src")
        dst_finish = reader.strings(n, "dst")
    else:
        src = reader.take("<i8", n, "src")
        dst = reader.take("<i8", n, "dst")
    weight = reader.take("<f4", n, "weight") if flags & FLAG_WEIGHT else None
    features = reader.take("<f4", n * dim, "features").reshape(n, dim) if flags & FLAG_FEATURES else None
    placement = reader.take("<i4", n * 2, "placement").reshape(n, 2) if flags & FLAG_PLACEMENT else None
    if reader.offset != len(data):
        raise CodecError(
            f"{where}: {len(data) - reader.offset} trailing bytes after the last column; "
            "the payload holds more than one batch or was corrupted"
        )
    if zlib.crc32(memoryview(data)[_HEADER.size :]) != crc:
        raise CodecError(f"{where}: CRC mismatch: the payload was corrupted in transit; resend it")
    if flags & FLAG_STRING_IDS:
        src, dst = src_finish(), dst_finish()
    else:
        src, dst = src.astype(np.int64, copy=False), dst.astype(np.int64, copy=False)
    return EventBatch(
        kind,
        src,
        dst,
        t.astype(np.float64, copy=False),
        eid.astype(np.int64, copy=False),
        None if weight is None else weight.astype(np.float32, copy=False),
        None if features is None else features.astype(np.float32, copy=False),
        None if placement is None else placement.astype(np.int32, copy=False),
    )


# ---------------------------------------------------------------------------------------------- dispatch


def decode(payload: bytes | str, content_type: str | None, where: str) -> tuple[EventBatch, list[DeadLetter]]:
    """Decode a message by content type into valid rows and dead letters; never raises on bad input.

    Without a content type, a payload starting with the binary magic is binary and anything else JSON
    lines. A binary payload that cannot be decoded becomes one dead letter carrying the whole payload; an
    invalid row of a binary batch, one carrying that row as a one-row binary batch. A JSON payload
    without a single event (empty or blank lines only) is a dead letter too.
    """
    if payload is None:  # a Kafka tombstone, or a message without a value
        reason = "message has no value (a tombstone?); send an encoded EventBatch"
        return EventBatch.empty(), [DeadLetter(reason=reason, where=where, payload=b"")]
    ctype = content_type.split(";", 1)[0].strip().lower() if content_type else None
    if ctype is None:
        is_binary = not isinstance(payload, str) and bytes(payload[:4]) == MAGIC
        ctype = CONTENT_BINARY if is_binary else CONTENT_JSON
    if ctype in _JSON_TYPES:
        batch, letters = decode_json_lines(payload, where)
        if not len(batch) and not letters:  # a message of only blank lines would vanish without a trace
            reason = "message holds no events (empty or whitespace only); send an encoded EventBatch"
            letters = [DeadLetter(reason=reason, where=where, payload=payload)]
        return batch, letters
    if ctype != CONTENT_BINARY:
        reason = f"unsupported content type {content_type!r}; send {CONTENT_JSON} or {CONTENT_BINARY}"
        return EventBatch.empty(), [DeadLetter(reason=reason, where=where, payload=payload)]
    if isinstance(payload, str):
        reason = "binary content type but the payload is text; send the encode_binary() bytes unchanged"
        return EventBatch.empty(), [DeadLetter(reason=reason, where=where, payload=payload)]
    try:
        batch = decode_binary(payload, where)
    except CodecError as exc:
        return EventBatch.empty(), [DeadLetter(reason=str(exc), where=where, payload=bytes(payload))]
    except Exception as exc:  # noqa: BLE001 - a decoder bug must cost one message, never the stream
        reason = f"{where}: binary payload could not be decoded ({type(exc).__name__}: {exc})"
        return EventBatch.empty(), [DeadLetter(reason=reason, where=where, payload=bytes(payload))]
    valid, letters = batch.validate(where)
    # each bad row travels as a one-row batch, so the dead letter can be inspected and replayed
    return valid, [
        replace(d, payload=encode_binary(batch.take(slice(d.index, d.index + 1)))) for d in letters
    ]
