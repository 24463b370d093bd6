"""Kafka messages into EventBatch rows: JSON lines or binary batches, bad ones out as dead letters.

A message's format comes from its ``content-type`` header; without one, a payload starting with the binary
magic is binary and anything else JSON lines. One exception keeps JSON topics fast: a poll whose every
message is exactly one valid JSON event object is read as JSON without looking at the headers (reading them
costs confluent-kafka more than the whole decode), whatever they say.

Every event must fit the stream's schema (id type and feature width), fixed by the store the source feeds
where it has events, or by a ``Schema`` a reader saved with its positions (the partition router), else by
the first events decoded, so that it does not depend on where a reader resumes.

A store whose schema the topic does not match is a configuration error (a checkpoint of another stream),
not a stream of bad events: the first mismatch is logged at ERROR level naming both schemas, and if none of
the first ``SCHEMA_VERDICT_EVENTS`` events that reach a verdict fits, decoding stops with ``ConfigError``.

>>> decoder = StreamDecoder(DeadLetters(None))
>>> f = Fetched("edges", 0, [0, 1], [b'{"src":1,"dst":2,"t":1.0,"eid":0}', b"oops"], [None, None])
>>> chunk = decoder.decode(f)  # logs a dead letter for offset 1
>>> chunk.batch.eid.tolist(), chunk.next_offset
([0], 2)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ...codec import CONTENT_JSON, MAGIC, decode, decode_json_lines, fast_rows
from ...errors import ConfigError
from ...events import DeadLetter, EventBatch, EventKind, schema_refusal
from .consumer import Fetched, partition_key
from .dead_letters import DeadLetters
from .merge import Chunk, join_rows

log = logging.getLogger(__name__)
SCHEMA_VERDICT_EVENTS = 100
_BOM = b"\xef\xbb\xbf"
_UNFIXED = -1  # a feature width not known yet (None means: no features)
ALL_KINDS = tuple(int(k) for k in EventKind)


@dataclass(frozen=True)
class Schema:
    """What every event of a stream shares, as far as its first events fixed it: id type (``string_ids``,
    None: not fixed yet) and feature width (``feature_width``: None for no features, -1 not fixed yet).
    A reader that resumes from saved positions saves this with them: the events that fixed it lie before
    the positions, and a resumed reader must not let the first event it meets fix it anew."""

    string_ids: bool | None = None
    feature_width: int | None = _UNFIXED

    def to_dict(self) -> dict:
        return {"string_ids": self.string_ids, "feature_width": self.feature_width}

    @classmethod
    def from_dict(cls, data: dict) -> Schema:
        """The ``to_dict`` form back; raises ValueError where a value is of the wrong type."""
        ids, width = data["string_ids"], data["feature_width"]
        if ids not in (None, True, False) or not (width is None or (type(width) is int and width >= -1)):
            raise ValueError(f"not a stream schema: {data!r}")
        return cls(ids, width)


class StreamDecoder:
    """Decodes fetched messages for one stream; ``store`` or ``schema`` (optional) fixes its schema."""

    def __init__(self, dead_letters: DeadLetters, store=None, schema: Schema | None = None) -> None:
        self.dead_letters = dead_letters
        self.messages = 0  # messages decoded
        kind = None if store is None else store.ids.id_type
        self._string_ids: bool | None = None if kind is None else kind == "str"
        width = None if store is None else store.edge_feature_dim
        width = store.node_feature_dim if width is None and store is not None else width
        self._width: int | None = _UNFIXED if width is None else width
        self._from_store = self._string_ids is not None or self._width != _UNFIXED
        if schema is not None and not self._from_store:
            self._string_ids, self._width = schema.string_ids, schema.feature_width
        self._fits = self._misfits = 0  # events that fit the stream's schema, and that did not
        self._letter_offsets: list[int] = []  # of the messages being decoded

    @property
    def schema(self) -> Schema:
        """The schema as fixed so far."""
        return Schema(self._string_ids, self._width)

    def decode(self, f: Fetched) -> Chunk:
        """Decode one partition's messages; dead letters go out before the chunk becomes visible."""
        self.messages += len(f.offsets)
        self._letter_offsets = []
        if all(f.values) and f.values[0][:4] != MAGIC:  # the usual JSON topic: every message one event,
            # headers not even read (a poll that starts with a binary batch is not worth joining up)
            batch = fast_rows(f.values, f"{f.topic}:{f.partition}", self._string_ids)
            if batch is not None and self._mismatch(batch, count=False) is None:
                return self._chunk(f, [(batch, np.array(f.offsets, np.int64))])
        pieces: list[tuple[EventBatch, np.ndarray]] = []
        run: list[int] = []
        for i, (value, ctype) in enumerate(zip(f.values, f.ctypes, strict=True)):
            if value and (ctype == CONTENT_JSON or (ctype is None and value[:4] != MAGIC)):
                run.append(i)
                continue
            if run:
                pieces += self._decode_json_run(f, run)
                run = []
            pieces += self._decode_one(f, i)
        if run:
            pieces += self._decode_json_run(f, run)
        return self._chunk(f, pieces)

    def _chunk(self, f: Fetched, pieces: list[tuple[EventBatch, np.ndarray]]) -> Chunk:
        # every piece passed _mismatch(), so they share id type and feature width and concatenate
        batch = join_rows([b for b, _ in pieces])
        origin = np.concatenate([o for _, o in pieces]) if pieces else np.zeros(0, np.int64)
        letters = np.array(self._letter_offsets, np.int64)
        return Chunk(partition_key(f.topic, f.partition), batch, origin, f.offsets[-1] + 1, letters)

    def _decode_json_run(self, f: Fetched, run: list[int]) -> list[tuple[EventBatch, np.ndarray]]:
        """Consecutive JSON messages: one event per message through msgspec (``fast_rows``), else decoded
        as one payload by the codec; any trouble means one by one, where each dead letter gets its reason."""
        values = [f.values[i] for i in run]
        offsets = np.array([f.offsets[i] for i in run], np.int64)
        batch = fast_rows(values, f"{f.topic}:{f.partition}", self._string_ids)
        if batch is not None and self._mismatch(batch, count=False) is None:
            return [(batch, offsets)]
        joined = b"\n".join(values)
        if _BOM not in joined:  # a byte-order mark is only skipped at the start of a payload
            batch, letters = decode_json_lines(joined, f"{f.topic}:{f.partition}", fast=False)
            if not letters and self._mismatch(batch, count=False) is None:
                if len(batch) == len(values) and joined.count(b"\n") == len(values) - 1:
                    return [(batch, offsets)]  # one event per message, the usual case
                rows = [v.count(b"\n") + 1 - v.endswith(b"\n") for v in values]
                if sum(rows) == len(batch):
                    return [(batch, np.repeat(offsets, rows))]
        return [piece for i in run for piece in self._decode_one(f, i)]

    def _decode_one(self, f: Fetched, i: int) -> list[tuple[EventBatch, np.ndarray]]:
        value, offset = f.values[i], f.offsets[i]
        where = f"{f.topic}:{f.partition}@{offset}"
        if not value:
            letters = [DeadLetter("empty message (no payload); send an encoded EventBatch", where, value)]
            batch = EventBatch.empty()
        else:
            batch, letters = decode(value, f.ctypes[i], where)
            reason = self._mismatch(batch)
            if reason is not None:
                letters = [*letters, DeadLetter(reason, where, value)]
                batch = EventBatch.empty()
        for letter in letters:
            self.dead_letters.send(letter, f.topic, f.partition, offset, f.ctypes[i])
            self._letter_offsets.append(offset)
        return [(batch, np.full(len(batch), offset, np.int64))] if len(batch) else []

    def _mismatch(self, batch: EventBatch, count: bool = True) -> str | None:
        """Why ``batch`` cannot join this stream, or None; what the store did not fix, the first events do.
        ``count=False``: a trial whose misfits are counted when its messages are decoded one by one."""
        if not len(batch):
            return None
        width = batch.feature_dim
        id_kind = None if self._string_ids is None else ("str" if self._string_ids else "int")
        fixed = () if self._width == _UNFIXED else (("event", self._width, ALL_KINDS, True),)
        reason = schema_refusal(batch, id_kind, fixed)  # admission's check and words
        if reason is None:
            self._string_ids = batch.string_ids
            self._width = width
            self._fits += len(batch)
            return None
        if self._from_store and count:
            self._misfit(batch, reason)
        return reason

    def _misfit(self, batch: EventBatch, reason: str) -> None:
        """Report a store whose schema the topic does not match: loudly once, and stop if nothing fits."""
        self._misfits += len(batch)
        if self._misfits == len(batch):
            log.error(
                "events of this topic do not fit the store this source feeds (%s): is the store, or its "
                "checkpoint, from another stream? Such events go to the dead letters",
                reason,
            )
        if not self._fits and self._misfits >= SCHEMA_VERDICT_EVENTS:
            raise ConfigError(
                f"none of the first {self._misfits} events of this topic fits the store this source feeds "
                f"({reason}): the store, or the checkpoint it came from, belongs to another stream; use a "
                "new store, or the checkpoint of this topic"
            )
