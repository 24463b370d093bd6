"""What one rank reads: only the graph partitions it owns, from Kafka or from a replayed event stream.

A local source is an ``streamgnn.sources.EventSource`` that also hands out this rank's events in time order,
chunk by chunk (``pull``), says when it has no more (``done``) and where it stands (``positions``, saved in
the rank's checkpoint and given back as ``start_offsets`` on restart). ``GlobalBatcher`` merges the ranks'
local streams into global batches. A source with a dead-letter topic also says where each row of its last pull
came from (``origins``) and takes dead letters about rows it delivered earlier (``report_dead_letters``).

- ``KafkaPartitions``: a ``KafkaSource`` over exactly this rank's topic partitions (``partitions=``; the topic
  has one partition per graph partition, as ``EventProducer``/``produce_dataset`` write it).
- ``PartitionedReplay``: a stream held in memory (a dataset, a file read once) split the same way, for
  benchmarks, tests and replays; its offsets are rows per partition.

>>> from streamgnn import EventBatch
>>> from streamgnn.shard import Ownership
>>> events = EventBatch.from_columns(src=[1, 2, 3, 4], dst=[2, 3, 4, 1], t=[0.0, 1.0, 2.0, 3.0], eid=range(4))
>>> mine = PartitionedReplay(events, Ownership(num_partitions=2, world_size=2, rank=0), chunk=10)
>>> mine.pull().eid.tolist(), mine.done, mine.positions()  # the events whose source is in partition 0
([1, 3], True, {'replay:0': 2})
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from ..errors import ConfigError
from ..events import DeadLetter, EventBatch
from ..sources import EventSource, SourceWrapper
from .ownership import Ownership, rows_within_partition


def no_origins(n: int) -> np.ndarray:
    """``[n, 2]`` origins of rows whose message is not known (partition and offset -1)."""
    return np.full((n, 2), -1, np.int64)


@runtime_checkable
class LocalSource(EventSource, Protocol):
    """One rank's share of the stream, in time order: an ``EventSource`` (its iteration ``pull`` s until
    ``done``) that ``GlobalBatcher`` also pulls from chunk by chunk, asking where each row came from."""

    @property
    def done(self) -> bool: ...

    def pull(self) -> EventBatch | None: ...

    def origins(self) -> np.ndarray: ...


class _Pulled:
    """The ``EventSource`` members a ``LocalSource`` draws from ``pull``/``done``."""

    def __iter__(self) -> Iterator[EventBatch]:
        while not self.done:
            batch = self.pull()
            if batch is not None and len(batch):
                yield batch

    @property
    def ended(self) -> bool:
        return self.done


class PartitionedReplay(_Pulled):
    """The rows of ``events`` whose source vertex lies in this rank's partitions, handed out ``chunk`` at a
    time in (time, partition, row) order; ``start_offsets`` (``{"replay:P": rows}``, or ``seek``) skips what a
    checkpoint had consumed. ``positions`` names only the partitions read from (a partition absent has 0 rows
    read), so neither it nor this set-up grows with partitions that hold no event. Rows are validated by
    their consumer (``GlobalBatcher``): this source refuses none itself."""

    replay = True

    def __init__(
        self, events: EventBatch, ownership: Ownership, *, chunk: int = 10_000,
        start_offsets: dict[str, int] | None = None,
    ) -> None:  # fmt: skip
        if chunk < 1:
            raise ConfigError(f"chunk must be >= 1, got {chunk}")
        self.chunk = chunk
        self._events, self._ownership = events, ownership
        self.reported = 0  # refusals consumers reported about these rows
        self.seek(start_offsets or {})

    def seek(self, positions: Mapping[str, int]) -> None:
        """Start after the rows ``positions`` (from ``positions()``) counts per partition."""
        ownership, events = self._ownership, self._events
        part = ownership.source_partitions(events)
        rows = np.flatnonzero(ownership.rank_of(part) == ownership.rank)
        part = part[rows].astype(np.int64)
        seq = rows_within_partition(part)  # work for the rows, not the partitions
        offsets = {int(k.rsplit(":", 1)[1]): int(v) for k, v in positions.items()}
        offsets = {p: n for p, n in offsets.items() if ownership.rank_of(p) == ownership.rank}
        held, at = np.unique(part, return_inverse=True)
        left = seq >= np.array([offsets.get(int(p), 0) for p in held], np.int64)[at]
        order = np.lexsort((seq[left], part[left], events.t[rows][left]))
        self._rows = rows[left][order]
        self._part = part[left][order]
        self._next = self._last = 0
        self._done_rows = offsets  # rows consumed per partition that holds any: positions() says no more

    @property
    def done(self) -> bool:
        return self._next >= len(self._rows)

    def pull(self) -> EventBatch | None:
        if self.done:
            return None
        take = slice(self._next, self._next + self.chunk)
        self._next += len(self._rows[take])
        self._last = len(self._rows[take])
        for p, n in zip(*np.unique(self._part[take], return_counts=True), strict=True):
            self._done_rows[int(p)] = self._done_rows.get(int(p), 0) + int(n)
        return self._events.take(self._rows[take])

    def positions(self) -> dict[str, int]:
        return {f"replay:{p}": n for p, n in self._done_rows.items()}

    def lag(self) -> int:
        return len(self._rows) - self._next

    def origins(self) -> np.ndarray:
        """No messages behind these rows: every origin is unknown."""
        return no_origins(self._last)

    def dead_letter_count(self) -> int:
        return 0

    def report_dead_letters(self, letters: Sequence[DeadLetter], origins=None) -> None:
        self.reported += len(letters)

    def close(self) -> None:
        """Nothing to release: the events are the caller's."""


class KafkaPartitions(_Pulled, SourceWrapper):
    """This rank's topic partitions through ``KafkaSource(partitions=...)``; ``done`` once they were read to
    their end offsets and nothing more came for ``idle_timeout_s`` (None: a live stream, never done). Other
    keyword arguments go to ``KafkaSource`` (``bootstrap_servers``, ``start_offsets``, security settings...).
    Positions, seeking, lag, dead-letter counts and closing are the ``KafkaSource``'s (``SourceWrapper``).
    """

    def __init__(
        self, topic: str, ownership: Ownership, *, idle_timeout_s: float | None = 10.0,
        poll_timeout_s: float = 0.2, **source_options,
    ) -> None:  # fmt: skip
        from ..connectors.kafka import KafkaSource

        keys = [f"{topic}:{p}" for p in ownership.partitions()]
        self.topic = topic
        super().__init__(KafkaSource(partitions=keys, **source_options))
        self.idle_timeout_s, self.poll_timeout_s = idle_timeout_s, poll_timeout_s
        self._quiet_since: float | None = None
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def pull(self) -> EventBatch | None:
        batch = self.source.poll(self.poll_timeout_s)
        if batch is not None and len(batch):
            self._quiet_since = None
            return batch
        if not self.source.at_end():  # a join or a slow fetch is not quiet
            self._quiet_since = None
            return None
        now = time.monotonic()
        self._quiet_since = self._quiet_since or now
        if self.idle_timeout_s is not None and now - self._quiet_since >= self.idle_timeout_s:
            self._done = True
        return None

    def origins(self) -> np.ndarray:
        """``[n, 2]``: the topic partition and offset of each row of the last ``pull``."""
        origin = self.source.origin()
        parts = np.array([int(key.rsplit(":", 1)[1]) for key in origin.keys], np.int64)
        return np.c_[parts[origin.part] if len(parts) else np.zeros(0, np.int64), origin.offset]

    def report_dead_letters(self, letters: Sequence[DeadLetter], origins: np.ndarray | None = None) -> None:
        """Send ``letters`` to the dead-letter topic, each about the row at ``origins[i]`` (an ``origins``
        row kept since; partition -1: not known; None: rows of the last ``pull``)."""
        if origins is None:
            self.source.report_dead_letters(letters)
            return
        where = [(self.topic if p >= 0 else "", p, o) for p, o in origins.tolist()]
        self.source.report_dead_letters(letters, where)

    def __enter__(self) -> KafkaPartitions:
        self.source.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()
