"""Data-parallel training from a source only one process may read (a Kafka topic): rank 0 reads, every
rank gets the same batches over ``torch.distributed``.

Ranks must agree on every global batch, and two consumers of one topic do not: their fetches cut the stream
differently, and a partition that goes quiet releases rows at a moment that depends on timing. So rank 0
alone polls the source and broadcasts each batch in the binary wire format (``streamgnn.codec``); the other
ranks decode the same bytes. While the source is quiet rank 0 broadcasts a heartbeat every ``heartbeat_s``,
so a rank whose peer died fails at the next heartbeat instead of waiting in a collective forever (and
``torchrun`` restarts the group from the last checkpoint), and ``on_idle`` runs on rank 0 (e.g. to publish
the embeddings of the last batches). Offsets (``positions``) are rank 0's: only rank 0 writes checkpoints.

    source = KafkaSource("events", bootstrap_servers=..., store=trainer.store) if dist.is_main else None
    shared = BroadcastSource(source, dist, idle_timeout_s=None)  # None: follow the topic forever
    trainer.fit(shared)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import torch

from ..codec import decode_binary, encode_binary
from ..errors import ConfigError
from ..events import DeadLetter, EventBatch
from ..sources import EventSource
from .distributed import DistContext, collective

_END, _IDLE = -1, 0


class BroadcastSource:
    """Iterates the same ``EventBatch``es on every rank: an ``EventSource`` over rank 0's ``source`` (a live
    one that has ``poll(timeout_s)`` and ``at_end()``, as ``KafkaSource``; None on the other ranks).
    Positions, lag, seeking and dead-letter reports are rank 0's; ``dead_letter_count`` is rank 0's as it last
    broadcast it (what ``fit`` counts on every rank). The stream ends after ``idle_timeout_s`` without data
    once the source is read to its end (None: never)."""

    replay = False

    def __init__(
        self,
        source: EventSource | None,
        dist: DistContext,
        *,
        idle_timeout_s: float | None = None,
        heartbeat_s: float = 1.0,
        on_idle: Callable[[], None] | None = None,
    ) -> None:
        if dist.is_main and source is None:
            raise ConfigError("rank 0 needs the source to read")
        if heartbeat_s <= 0:
            raise ConfigError(f"heartbeat_s must be > 0, got {heartbeat_s}")
        self.source, self.dist = source, dist
        self.idle_timeout_s, self.heartbeat_s, self.on_idle = idle_timeout_s, heartbeat_s, on_idle
        self._letters = 0
        self._ended = False

    def positions(self) -> dict[str, int]:
        return self.source.positions() if self.dist.is_main else {}

    def seek(self, positions) -> None:
        if self.dist.is_main:
            self.source.seek(positions)

    def lag(self) -> int | None:
        """Rank 0's source's lag (None elsewhere: rank 0's plan is every rank's)."""
        return self.source.lag() if self.dist.is_main else None

    @property
    def ended(self) -> bool:
        return self._ended

    def dead_letter_count(self) -> int:
        return self._letters

    def report_dead_letters(self, letters: list[DeadLetter], origins=None) -> None:
        if self.dist.is_main:
            self.source.report_dead_letters(letters, origins)

    def close(self) -> None:
        if self.source is not None:
            self.source.close()

    def __iter__(self) -> Iterator[EventBatch]:
        if not self.dist.active:
            yield from self._read()
            self._ended = True
            return
        if self.dist.is_main:
            for batch in self._read():
                payload = encode_binary(batch) if batch is not None else b""
                self._header(_IDLE if batch is None else len(payload))
                if batch is not None:
                    collective("broadcast", torch.frombuffer(bytearray(payload), dtype=torch.uint8), 0)
                    yield batch
            self._header(_END)
            self._ended = True
            return
        while True:
            size = self._header(None)
            if size == _END:
                self._ended = True
                return
            if size != _IDLE:
                buf = torch.empty(size, dtype=torch.uint8)
                collective("broadcast", buf, 0)
                yield decode_binary(buf.numpy().tobytes(), "broadcast")

    def _header(self, size: int | None) -> int:
        """Rank 0 sends ``(size, source dead letters)``; the others receive it."""
        head = torch.zeros(2, dtype=torch.int64)
        if size is not None:
            head[0], head[1] = size, self.source.dead_letter_count()
        collective("broadcast", head, 0)
        self._letters = int(head[1])
        return int(head[0])

    def _read(self) -> Iterator[EventBatch | None]:
        """Rank 0's batches, with ``None`` for each quiet heartbeat (dropped when running alone)."""
        quiet_since = time.monotonic()
        while True:
            batch = self.source.poll(self.heartbeat_s)
            self._letters = self.source.dead_letter_count()
            if batch is not None and len(batch):
                quiet_since = time.monotonic()
                yield batch
                continue
            if self.on_idle is not None:
                self.on_idle()
            idle = self.idle_timeout_s is not None and time.monotonic() - quiet_since >= self.idle_timeout_s
            if idle and self.source.at_end():  # a group join or a slow fetch is not the end
                return
            if self.dist.active:
                yield None
