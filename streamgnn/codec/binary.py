"""The columnar binary format (version 1), all little-endian::

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

import struct
import zlib
from collections.abc import Callable
from itertools import pairwise

import numpy as np

from ..errors import CodecError
from ..events import EventBatch

CONTENT_JSON = "application/x-streamgnn-jsonl"  # the content types of the two formats, in Kafka headers
CONTENT_BINARY = "application/x-streamgnn-batch"
MAGIC = b"SGNB"
VERSION = 1
FLAG_WEIGHT = 1
FLAG_FEATURES = 2
FLAG_STRING_IDS = 4
FLAG_PLACEMENT = 8
_HEADER = struct.Struct("<4sHHIII")
_U32_MAX = 2**32 - 1


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
