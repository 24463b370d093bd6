"""Kafka messages into EventBatch rows: JSON lines or binary batches, bad ones out as dead letters.

A message's format comes from its ``content-type`` header; without one, a payload starting with the binary
magic is binary and anything else JSON lines. Every event must fit the stream's schema (id type and
feature width), fixed by the store the source feeds where it has events, else by the first events decoded,
so that it does not depend on where a reader resumes.

>>> decoder = StreamDecoder(DeadLetters(None))
>>> f = Fetched("edges", 0, [0, 1], [b'{"src":1,"dst":2,"t":1.0,"eid":0}', b"oops"], [None, None])
>>> chunk = decoder.decode(f)  # logs a dead letter for offset 1
>>> chunk.batch.eid.tolist(), chunk.next_offset
([0], 2)
"""

from __future__ import annotations

import numpy as np

from ...codec import CONTENT_JSON, MAGIC, decode, decode_json_lines
from ...events import DeadLetter, EventBatch
from .consumer import Fetched, partition_key
from .dead_letters import DeadLetters
from .merge import Chunk, join_rows

_BOM = b"\xef\xbb\xbf"
_UNFIXED = -1  # a feature width not known yet (None means: no features)


class StreamDecoder:
    """Decodes fetched messages for one stream; ``store`` (optional) fixes the stream's schema."""

    def __init__(self, dead_letters: DeadLetters, store=None) -> None:
        self.dead_letters = dead_letters
        self.messages = 0  # messages decoded
        kind = None if store is None else store.ids.kind
        self._string_ids: bool | None = None if kind is None else kind == "str"
        width = None if store is None else store.edge_feature_dim
        width = store.node_feature_dim if width is None and store is not None else width
        self._width: int | None = _UNFIXED if width is None else width

    def decode(self, f: Fetched) -> Chunk:
        """Decode one partition's messages; dead letters go out before the chunk becomes visible."""
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
        self.messages += len(f.offsets)
        # every piece passed _mismatch(), so they share id type and feature width and concatenate
        batch = join_rows([b for b, _ in pieces])
        origin = np.concatenate([o for _, o in pieces]) if pieces else np.zeros(0, np.int64)
        return Chunk(partition_key(f.topic, f.partition), batch, origin, f.offsets[-1] + 1)

    def _decode_json_run(self, f: Fetched, run: list[int]) -> list[tuple[EventBatch, np.ndarray]]:
        """Fast path: consecutive JSON messages decoded as one payload; any trouble means one by one."""
        values = [f.values[i] for i in run]
        joined = b"\n".join(values)
        if _BOM not in joined:  # a byte-order mark is only skipped at the start of a payload
            batch, letters = decode_json_lines(joined, f"{f.topic}:{f.partition}")
            if not letters and self._mismatch(batch) is None:
                offsets = np.array([f.offsets[i] for i in run], np.int64)
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
        return [(batch, np.full(len(batch), offset, np.int64))] if len(batch) else []

    def _mismatch(self, batch: EventBatch) -> str | None:
        """Why ``batch`` cannot join this stream, or None; what the store did not fix, the first events do."""
        if not len(batch):
            return None
        if self._string_ids is not None and batch.string_ids != self._string_ids:
            have, want = ("str", "int") if batch.string_ids else ("int", "str")
            return f"node ids are {have} but this stream uses {want} ids; use one id type per stream"
        width = batch.feature_dim
        if self._width != _UNFIXED and width != self._width:
            have = "no features" if width is None else f"{width} features"
            want = "no features" if self._width is None else f"{self._width} features"
            return f"events carry {have} but this stream carries {want}; use one feature width per stream"
        self._string_ids = batch.string_ids
        self._width = width
        return None
