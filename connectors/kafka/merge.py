"""The partition merge: rows of several topic partitions into one stream ordered by (time, partition, offset).

Pure bookkeeping, no client and no thread: ``KafkaSource`` feeds it decoded ``Chunk`` s (one partition's
rows from one poll, in offset order) and tells it which partitions it owns and which the broker reports as
read to their end; ``release`` hands out the rows no partition can still precede. Each partition is in
time order, so a partition that has delivered time ``x`` cannot deliver anything earlier: the *frontier*
is the least such time over the partitions that can still deliver, and rows before it are final.

>>> merge = PartitionMerge(max_batch_events=10)
>>> merge.own(["e:0", "e:1"], now=0.0)
>>> merge.add(Chunk("e:0", EventBatch.from_columns(src=[1, 2], dst=[2, 3], t=[1.0, 5.0], eid=[0, 1]),
...                 np.array([0, 1]), 2), first_offset=0, now=0.0)
>>> merge.release(now=0.0) is None  # e:1 has said nothing yet: it may still hold time 0.5
True
>>> merge.add(Chunk("e:1", EventBatch.from_columns(src=[4], dst=[5], t=[3.0], eid=[2]), np.array([0]), 1),
...           first_offset=0, now=0.0)
>>> [(key, rows.t.tolist()) for key, rows, _ in merge.release(now=0.0)]
[('e:0', [1.0])]
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from ...events import EventBatch, joined_placement


@dataclass
class Chunk:
    """One partition's decoded events from one poll, and the offset to resume from after them."""

    key: str
    batch: EventBatch
    origin: np.ndarray  # source offset of each row
    next_offset: int
    letters: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # offset of each dead letter
    running_t: np.ndarray = field(init=False)  # running max of t: rows before a time form a prefix

    def __post_init__(self) -> None:
        self.running_t = np.maximum.accumulate(self.batch.t) if len(self.batch) else self.batch.t

    @property
    def weight(self) -> int:  # an all-dead-letter chunk still takes a slot, so the bound holds
        return max(1, len(self.batch))


def join_rows(batches: list[EventBatch]) -> EventBatch:
    """Batches of one stream as one; rows without a weight get 1.0 when others carry one (the codec's rule
    within a payload, and what the store assumes for unweighted edges)."""
    batches = [b for b in batches if len(b)]
    if len(batches) <= 1:
        return batches[0] if batches else EventBatch.empty()
    weight = None
    if any(b.weight is not None for b in batches):
        weight = np.concatenate(
            [np.ones(len(b), np.float32) if b.weight is None else b.weight for b in batches]
        )

    def col(name: str) -> np.ndarray:
        return np.concatenate([getattr(b, name) for b in batches])

    features = None if batches[0].features is None else col("features")
    placement = joined_placement(batches)
    return EventBatch(col("kind"), col("src"), col("dst"), col("t"), col("eid"), weight, features, placement)


Piece = tuple[str, EventBatch, np.ndarray]  # (partition key, rows, source offset of each row)


class PartitionMerge:
    """Buffered rows per partition and the rules that release them in (time, partition, offset) order.

    ``positions`` maps each partition key to the offset after what was handed out (where a restart
    resumes). A message whose rows were cut by a batch boundary keeps its own offset as the position; the
    rows of it already handed out are remembered and skipped if the client delivers the message again.
    """

    def __init__(
        self,
        max_batch_events: int = 200_000,
        idle_partition_s: float = 0.0,
        positions: dict[str, int] | None = None,
    ) -> None:
        self.max_batch_events = max_batch_events
        self.idle_partition_s = idle_partition_s
        self.positions: dict[str, int] = dict(positions or {})
        self.queues: dict[str, collections.deque[Chunk]] = {}  # per partition, in offset order
        self.buffered = 0  # rows (and dead-letter-only chunks) held
        self.owned: set[str] = set()
        self.seen_t: dict[str, float] = {}  # per partition: the latest event time decoded so far
        self.last_data: dict[str, float] = {}  # per partition: when data last arrived (or it was assigned)
        self.caught_up: set[str] = set()  # partitions the broker reports read to their end offset
        self.paused: set[str] = set()  # partitions whose fetching backpressure stopped
        self._handed: dict[str, tuple[int, int]] = {}  # per partition: (offset, rows) of a message half out
        # dead letters of the messages the positions have moved past (a restart from them decodes the rest
        # again), so that a reader saving its positions can save an exact count with them
        self.letters_passed = 0

    # ------------------------------------------------------------------ ownership
    def own(self, keys: Iterable[str], now: float) -> None:
        """Partitions assigned to this reader; each gets a fresh idle allowance."""
        for key in keys:
            self.owned.add(key)
            self.last_data[key] = now

    def disown(self, keys: Iterable[str]) -> dict[str, int]:
        """Partitions taken away: their buffered rows are dropped (the next owner reads them again from
        the returned positions)."""
        keys = set(keys)
        for key in keys:
            self.buffered -= sum(c.weight for c in self.queues.pop(key, ()))
            self.seen_t.pop(key, None)  # the next owner may have moved on; learn it again
        self.owned -= keys
        self.caught_up -= keys
        return {k: self.positions[k] for k in keys if k in self.positions}

    # ------------------------------------------------------------------ input
    def add(self, chunk: Chunk, first_offset: int, now: float) -> None:
        """Queue a partition's next rows; ``first_offset`` is the offset of the first message they came
        from (where the partition's stream began, if no position is known yet)."""
        if chunk.key not in self.owned:
            return
        handed = self._handed.get(chunk.key)
        if handed and len(chunk.batch) and chunk.origin[0] == handed[0]:  # a message read again
            skip = min(handed[1], int(np.count_nonzero(chunk.origin == handed[0])))
            rest = chunk.batch[skip:], chunk.origin[skip:]
            chunk = Chunk(chunk.key, *rest, chunk.next_offset, chunk.letters)
        # where this partition's stream began: a rebalance that drops the buffer seeks back here, since
        # the client keeps its fetch position otherwise
        self.positions.setdefault(chunk.key, first_offset)
        self.queues.setdefault(chunk.key, collections.deque()).append(chunk)
        self.buffered += chunk.weight
        self.last_data[chunk.key] = now
        if len(chunk.batch):
            self.seen_t[chunk.key] = max(self.seen_t.get(chunk.key, -np.inf), chunk.running_t[-1])

    def resumed(self, keys: Iterable[str], now: float) -> None:
        """Fetching restarted for ``keys``: each gets a fresh idle allowance."""
        self.last_data.update(dict.fromkeys(keys, now))

    # ------------------------------------------------------------------ output
    def frontier(self, now: float) -> float:
        """Rows earlier than this time are complete: no partition can still deliver an earlier one.

        Each partition holds the frontier at the latest time it has delivered (its later rows cannot be
        earlier), until the broker reports it read to its end offset and ``idle_partition_s`` passed
        without new data from it: only then can nothing more come from it, as far as anyone knows. A slow
        fetch never frees a partition that still has data; a live partition that went quiet holds the
        others back for ``idle_partition_s`` at most."""
        frontier = np.inf
        for key in self.owned:
            if key in self.caught_up and now - self.last_data.get(key, now) >= self.idle_partition_s:
                continue
            frontier = min(frontier, self.seen_t.get(key, -np.inf))
        return frontier

    def at_end(self) -> bool:
        """Every owned partition is read to its end offset and every row is handed out."""
        return bool(self.owned) and self.owned <= self.caught_up and not self.buffered

    def release(self, now: float, limit: int | None = None) -> list[Piece] | None:
        """Take the rows before the frontier: ``(key, rows, offsets)`` per partition in key order, ``[]``
        if only dead-letter chunks moved positions on, None if nothing is ready.

        With more than ``limit`` (at most ``max_batch_events``) ready, the earliest by (time, partition,
        offset) go first, so the sequence of batches is the same time-ordered stream whatever the fetches
        looked like."""
        limit = self.max_batch_events if limit is None else max(1, min(limit, self.max_batch_events))
        if not self.buffered:
            return None
        frontier = self.frontier(now)
        ready: dict[str, int] = {}
        for key, queue in self.queues.items():
            n = 0
            for chunk in queue:
                cut = int(np.searchsorted(chunk.running_t, frontier, side="left"))
                n += cut
                if cut < len(chunk.batch):
                    break
            if n or (queue and not len(queue[0].batch)):
                ready[key] = n
        if not ready:
            return None
        if sum(ready.values()) > limit:
            ready = self._earliest(ready, limit)
        pieces = []
        for key in sorted(ready):
            rows, offsets = self._pop_rows(key, ready[key])
            if len(rows):
                pieces.append((key, rows, offsets))
        return pieces

    def to_pause(self, now: float, bound: int) -> set[str]:
        """The partitions whose fetching should stop: those holding buffered rows once ``bound`` rows are
        buffered, until the buffer drains to half. One exception keeps the merge alive: when no buffered
        row is before the frontier, the partitions the frontier waits for fetch on, since nothing could be
        released (and drained) otherwise."""
        frontier = self.frontier(now)
        holding = {k for k, q in self.queues.items() if q}
        stuck = not any(len(q[0].batch) and q[0].running_t[0] < frontier for q in self.queues.values() if q)
        if stuck:
            holding -= {k for k in self.owned if self.seen_t.get(k, -np.inf) <= frontier}
        if self.buffered >= bound:
            return holding & self.owned
        if self.buffered <= bound // 2:
            return set()
        return self.paused & holding

    def _earliest(self, ready: dict[str, int], limit: int) -> dict[str, int]:
        """How many of each partition's ready rows are among the first ``limit`` of all of them, by (time,
        partition, offset)."""
        keys = sorted(ready)
        times = []
        for key in keys:
            parts, need = [], ready[key]
            for chunk in self.queues[key]:
                if need <= 0:
                    break
                parts.append(chunk.batch.t[:need])
                need -= len(parts[-1])
            times.append(np.concatenate(parts) if parts else np.zeros(0))
        # the limit-th time, found in linear time (no sort): every row before it is taken, and of the rows
        # at it as many as fill the limit, partition by partition in key order (a stable sort's order)
        cut = np.partition(np.concatenate(times), limit - 1)[limit - 1]
        before = [int(np.count_nonzero(t < cut)) for t in times]
        left = limit - sum(before)
        counts = {}
        for key, t, n in zip(keys, times, before, strict=True):
            ties = min(left, int(np.count_nonzero(t == cut)))
            left -= ties
            if n + ties:
                counts[key] = n + ties
        return counts

    def _pop_rows(self, key: str, n: int) -> tuple[EventBatch, np.ndarray]:
        """Remove the first ``n`` rows of a partition's queue (and dead-letter chunks up to them); the
        position moves to the first row not taken, or past the last chunk emptied."""
        queue = self.queues[key]
        rows, offsets = [], []
        while queue and (n or not len(queue[0].batch)):
            chunk = queue[0]
            take = min(n, len(chunk.batch))
            self.buffered -= chunk.weight
            if take == len(chunk.batch):
                queue.popleft()
                rows.append(chunk.batch)
                offsets.append(chunk.origin)
                self.positions[key] = chunk.next_offset
                self.letters_passed += len(chunk.letters)
                self._handed.pop(key, None)
            else:
                message = int(chunk.origin[take])
                done = int(np.count_nonzero(chunk.origin[:take] == message))
                before = self._handed.get(key)
                self._handed[key] = (message, done + (before[1] if before and before[0] == message else 0))
                rows.append(chunk.batch[:take])
                offsets.append(chunk.origin[:take])
                chunk.batch, chunk.origin, chunk.running_t = (
                    chunk.batch[take:],
                    chunk.origin[take:],
                    chunk.running_t[take:],
                )
                self.buffered += chunk.weight
                # a restart or the next owner reads this message again, rows already handed out included
                # (the store skips their event ids); this reader skips them itself (see add)
                self.positions[key] = message
                passed = chunk.letters < message
                self.letters_passed += int(passed.sum())
                chunk.letters = chunk.letters[~passed]
            n -= take
        return join_rows(rows), (np.concatenate(offsets) if offsets else np.zeros(0, np.int64))
