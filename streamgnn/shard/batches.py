"""Global batches without a coordinator: W ranks, each reading its own partitions, cut the same batches
in the same time order as one process reading every partition.

Every row carries a key ``(t, partition, seq)`` (``seq``: its position in its partition), and the stream's
order is the order of the keys. A rank's local frontier is the newest time it has read: it can deliver no
row earlier than that any more (each partition is in time order), so rows before the minimum frontier over
ranks (the global watermark, as streaming engines align watermarks) are complete everywhere. Each round,
one ``all_gather`` carries every rank's frontier and the keys of its first ``batch_size`` buffered rows;
every rank then computes the same cut: the first ``batch_size`` complete keys. If fewer are complete, the
ranks holding the watermark back read more and the round repeats. The cut rows go out in a second
``all_gather`` (binary-encoded), so every rank holds the whole global batch: a cut edge must reach the
owners of both endpoints anyway.

A rank's buffer (rows read but not yet in a global batch) is part of its checkpoint: a Kafka position
covers rows handed out, not rows processed. With each buffered row the batcher keeps where its source read it
(``origins``: topic partition and offset), so that a dead letter about a row of a global batch goes out from
the rank that read it, pointing at its message (``report_dead_letters``), as the replicated job's do.

While the batch waits on a rank whose source has nothing new (the stream is idle), every rank calls
``on_idle`` each round (the sharded trainer publishes the rows it refreshed last).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..codec import decode_binary, encode_binary
from ..errors import PlacementError
from ..events import DeadLetter, EventBatch, concat
from .comm import Collectives
from .ownership import Ownership, rows_within_partition
from .source import LocalSource, no_origins

_SEQ_BITS = 40  # rows per partition below 2**40; partition numbers below 2**23


class GlobalBatcher:
    """``next_batch()`` (a collective: every rank calls it in step) returns the next global batch,
    identical on every rank, or None once every rank's source is done and every buffer empty."""

    def __init__(
        self, source: LocalSource, ownership: Ownership, exchange: Collectives, batch_size: int,
        on_idle: Callable[[], None] | None = None,
    ) -> None:  # fmt: skip
        self.source, self.ownership, self.exchange = source, ownership, exchange
        self.batch_size, self.on_idle = batch_size, on_idle
        self.buffer = EventBatch.empty()
        self.keys = np.zeros(0, np.int64)  # partition << _SEQ_BITS | seq, per buffered row
        self.origins = no_origins(0)  # (topic partition, offset) per buffered row, -1: not known
        self._cut_origins = no_origins(0)  # per row of the last global batch: this rank's rows' origins
        self._starved = False  # this rank's last read found nothing new
        self.seq: dict[int, int] = {}  # rows read per partition, of those read from (none: 0)
        self.frontier = -math.inf
        self.dead_letters: list[DeadLetter] = []  # rows of this rank's source that failed validation
        self._replaying: set[int] = set()  # partitions whose resumed source may first deliver rows again
        self._known: Callable[[np.ndarray], np.ndarray] | None = None  # event ids in the checkpoint

    def next_batch(self, limit: int | None = None) -> EventBatch | None:
        """The next global batch of at most ``batch_size`` (and ``limit``) events; None at the end."""
        b = self.batch_size if limit is None else min(self.batch_size, limit)
        if b <= 0:
            return None
        while True:
            done = self.source.done
            n_head = min(b, len(self.buffer))
            state = np.array([math.inf if done else self.frontier, float(done), n_head, float(self._starved)])
            t_head, k_head = np.full(b, math.inf), np.zeros(b, np.int64)  # fixed size: no size exchange
            t_head[:n_head], k_head[:n_head] = self.buffer.t[:n_head], self.keys[:n_head]
            w = self.exchange.world_size
            gathered = self.exchange.all_to_all([(state, t_head, k_head)] * w, "batch_keys", [[4, b, b]] * w)
            watermark = min(g[0][0] for g in gathered)
            all_done = all(g[0][1] for g in gathered)
            idle, self._starved = any(g[0][3] for g in gathered), False
            heads = [int(g[0][2]) for g in gathered]
            t = np.concatenate([g[1][:h] for g, h in zip(gathered, heads, strict=True)])
            k = np.concatenate([g[2][:h] for g, h in zip(gathered, heads, strict=True)])
            rank = np.repeat(np.arange(len(gathered)), heads)
            complete = t < watermark
            n = int(complete.sum())
            if n >= b or (all_done and n):
                order = np.lexsort((k[complete], t[complete]))[:b]
                return self._cut(rank[complete][order], t[complete][order], k[complete][order])
            if all_done:
                return None
            if idle and self.on_idle is not None:
                self.on_idle()
            if not done and self.frontier <= watermark:
                self._starved = not self._read()

    def _cut(self, rank: np.ndarray, t: np.ndarray, k: np.ndarray) -> EventBatch:
        """Hand the chosen rows (global order ``rank``/``t``/``k``) to every rank."""
        me = rank == self.exchange.rank
        take = int(me.sum())  # my chosen rows are the first ``take`` of my buffer, in the global order
        mine = self.buffer.take(slice(0, take))
        self._cut_origins = no_origins(len(rank))
        self._cut_origins[me] = self.origins[:take]
        self.buffer, self.keys, self.origins = (
            self.buffer.take(slice(take, None)), self.keys[take:], self.origins[take:]
        )  # fmt: skip
        payloads = self.exchange.all_gather_bytes(encode_binary(mine) if take else b"", "batch_events")
        parts = [decode_binary(p) if p else None for p in payloads]
        parts = [p for p in parts if p is not None]
        merged = concat(parts) if parts else EventBatch.empty()
        # concat is in rank order; the global order interleaves ranks by key
        by_rank = np.argsort(rank, kind="stable")
        position = np.empty(len(rank), np.int64)
        position[by_rank] = np.arange(len(rank))
        return merged.take(position)

    def report_dead_letters(self, letters: list[DeadLetter]) -> None:
        """Send dead letters about rows of the last global batch that this rank read (``letter.index``: the
        row in the batch) to its source's dead-letter topic, each pointing at its row's message."""
        if letters:
            self.source.report_dead_letters(letters, self._cut_origins[[letter.index for letter in letters]])

    def _read(self) -> bool:
        """Pull from the source into the buffer; False if it had nothing new."""
        got = self.source.pull()
        if got is None or not len(got):
            return False
        origins = self.source.origins()
        # (a Kafka source's decoder has sent its invalid rows to the dead letters already: none come here)
        valid, letters = got.validate("local source")
        self.dead_letters += letters
        origins = np.delete(origins, [letter.index for letter in letters], axis=0)
        self.frontier = max(self.frontier, float(valid.t.max())) if len(valid) else self.frontier
        part = self.ownership.source_partitions(valid)
        foreign = self.ownership.rank_of(part) != self.ownership.rank
        if self.ownership.partition_fn is None and foreign.any():
            i = int(np.flatnonzero(foreign)[0])
            mine = self.ownership.partitions()  # listed only here, in an error, and only the first ones
            shown = mine if len(mine) <= 16 else f"{str(mine[:4])[:-1]}, ... ({len(mine):,} in all)]"
            raise PlacementError(
                f"rank {self.exchange.rank} read event {int(valid.eid[i])}, placed in partition "
                f"{int(part[i])}, not one of its partitions {shown}: the topic was not written by a router "
                f"with {self.ownership.num_partitions} partitions"
            )
        keep = self._not_replayed(valid.eid, part)
        valid, part, origins = valid.take(keep), part[keep], origins[keep]
        held, at = np.unique(part, return_inverse=True)
        seq = np.array([self.seq.get(p, 0) for p in held.tolist()], np.int64)[at] + rows_within_partition(
            part
        )
        for p, n in zip(held.tolist(), np.bincount(at, minlength=len(held)).tolist(), strict=True):
            self.seq[p] = self.seq.get(p, 0) + n
        keys = (part.astype(np.int64) << _SEQ_BITS) | seq
        buffer = concat([self.buffer, valid]) if len(self.buffer) else valid
        keys = np.concatenate([self.keys, keys])
        order = np.lexsort((keys, buffer.t))
        self.buffer, self.keys = buffer.take(order), keys[order]
        self.origins = np.concatenate([self.origins, origins])[order]
        return True

    def _not_replayed(self, eids: np.ndarray, part: np.ndarray) -> np.ndarray:
        """Rows a resumed source delivers again (the head of a partition, already in the checkpoint) are
        dropped; a partition's first new row ends its replay."""
        keep = np.ones(len(eids), bool)
        for p in [p for p in np.unique(part).tolist() if p in self._replaying]:  # the rows' partitions only
            rows = np.flatnonzero(part == p)
            again = self._known(eids[rows])
            first_new = int(np.argmin(again)) if not again.all() else len(rows)
            keep[rows[:first_new]] = False
            if first_new < len(rows):
                self._replaying.discard(p)
        return keep

    # ------------------------------------------------------------------ checkpoints
    def state(self) -> dict[str, np.ndarray]:
        raw = encode_binary(self.buffer) if len(self.buffer) else b""
        return {
            "buffer": np.frombuffer(bytearray(raw), np.uint8),  # writable: checkpoints become tensors
            "keys": self.keys,
            "origins": self.origins,
            "seq_partitions": np.array(sorted(self.seq), np.int64),  # the partitions read from, not all
            "seq_rows": np.array([self.seq[p] for p in sorted(self.seq)], np.int64),
            "frontier": np.array([self.frontier]),
        }

    @classmethod
    def from_state(
        cls, arrays: dict[str, np.ndarray], processed: Callable[[np.ndarray], np.ndarray], *parts, **options
    ) -> GlobalBatcher:
        """The batcher with a checkpoint's buffer and counters (``state()``), over this run's ``parts`` (the
        constructor's: source, ownership, exchange, batch size; ``on_idle``). ``processed(eids)`` marks event
        ids already in global batches: a resumed Kafka source restarts at the first message not wholly
        handed out, so the head of a partition may come again (rows processed or buffered before the
        checkpoint): those are dropped."""
        self = cls(*parts, **options)
        raw = arrays["buffer"]
        self.buffer = decode_binary(raw.tobytes()) if len(raw) else EventBatch.empty()
        self.keys = arrays["keys"].astype(np.int64)
        if "seq" in arrays:  # checkpoints before the sparse form: a count for every partition
            dense = arrays["seq"].astype(np.int64)
            self.seq = {int(p): int(dense[p]) for p in np.flatnonzero(dense)}
        else:
            self.seq = dict(zip(arrays["seq_partitions"].tolist(), arrays["seq_rows"].tolist(), strict=True))
        origins = arrays.get("origins")  # (checkpoints before origins were kept: not known)
        self.origins = no_origins(len(self.keys)) if origins is None else origins.astype(np.int64)
        self.frontier = float(arrays["frontier"][0])
        buffered = np.sort(self.buffer.eid)
        self._known = lambda eids: processed(eids) | np.isin(eids, buffered)
        self._replaying = set(self.seq)  # only a partition read from can deliver a row again
        return self
