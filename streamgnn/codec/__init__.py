"""Wire formats for EventBatches: JSON lines for interoperability (``jsonlines``, with its fast path in
``fastjson``), a columnar binary format for speed (``binary``), and ``decode`` choosing by content type.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import CodecError
from ..events import DeadLetter, EventBatch
from .binary import CONTENT_BINARY, CONTENT_JSON, MAGIC, decode_binary, encode_binary
from .fastjson import fast_rows
from .jsonlines import decode_json_lines, encode_json_event, encode_json_lines

__all__ = [
    "CONTENT_BINARY", "CONTENT_JSON", "MAGIC", "decode", "decode_binary", "decode_json_lines",
    "encode_binary", "encode_json_event", "encode_json_lines", "fast_rows",
]  # fmt: skip

_JSON_TYPES = frozenset({CONTENT_JSON, "application/json", "application/x-ndjson", "application/jsonl"})


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
