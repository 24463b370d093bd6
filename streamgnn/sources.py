"""``EventSource``: the one contract every source of ``EventBatch`` es meets, whoever reads it.

A trainer, a snapshot stream, a job or a sharded rank reads a source through these members only, never by
probing for them: a file, a dataset replay, a Kafka topic, a list held in memory and one rank's share of a
sharded stream all answer the same questions.

- ``iter(source)``: the batches, in stream order (a replay source starts a new pass at each ``iter``).
- ``positions()``: where the stream stands after the batches handed out so far, ``{key: offset}``; a
  checkpoint records it. ``seek(positions)`` makes the next pass start there, so that the batches after a
  resume are exactly the ones the first run had not handed out yet.
- ``replay``: True for a source that reads the same events in the same order on each pass (a file, a
  dataset, a list); its offset is the count of events handed out, so a consumer that cuts batches finer
  may record its own count instead (``OnlineTrainer`` does). False for a broker's offsets, which are only
  valid between the source's batches.
- ``lag()``: events behind the end of what the source can read now (None: not known yet); 0 once
  ``ended``. ``ended``: the source has handed out everything it will (a file at its end, a topic read with
  an idle timeout that expired); a live stream never ends.
- ``dead_letter_count()``: the inputs the source refused itself (lines it could not parse, messages it
  could not decode) in its life, or this pass for a replay source. ``report_dead_letters(letters)`` takes
  the refusals of whoever consumed its rows (the store's), which a Kafka source sends to its dead-letter
  topic; they are not in ``dead_letter_count``: the consumer counts what it refuses.
- ``close()``: releases files, threads and sockets; calling it again does nothing.

``ReplaySource`` implements all of it for a source that only has to say how to read one pass;
``as_source`` turns a plain iterable of batches (a list, a generator) into an ``EventSource``;
``SourceWrapper`` is one over another, which it hands every question to (a subclass changes what it must).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Protocol, runtime_checkable

from .errors import ConfigError, ConnectorError
from .events import DeadLetter, EventBatch

__all__ = ["EventSource", "IterableSource", "ReplaySource", "SourceWrapper", "as_source"]


@runtime_checkable
class EventSource(Protocol):
    """What a consumer of ``EventBatch`` es needs from their source (module docstring: the semantics)."""

    replay: bool

    def __iter__(self) -> Iterator[EventBatch]: ...

    def positions(self) -> dict[str, int]: ...

    def seek(self, positions: Mapping[str, int]) -> None: ...

    def lag(self) -> int | None: ...

    @property
    def ended(self) -> bool: ...

    def dead_letter_count(self) -> int: ...

    def report_dead_letters(self, letters: Sequence[DeadLetter], origins=None) -> None: ...

    def close(self) -> None: ...


class ReplaySource:
    """An ``EventSource`` over a replayable stream: a subclass defines ``_batches()`` (one pass from the
    start), ``position_key`` (its name in ``positions()``) and, where it knows it cheaply, ``_total()`` (its
    events, for ``lag``); it keeps its own refusals on ``dead_letters`` (reset by its ``_batches``).

    The offset is the count of events handed out this pass, plus where ``seek`` started it: a resumed pass
    skips that many events (the refusals among them are made again, and counted again this pass)."""

    replay = True
    position_key = "replay"
    dead_letters: list[DeadLetter]

    def __iter__(self) -> Iterator[EventBatch]:
        return self._begin(self._pass(self._batches()))

    def _batches(self) -> Iterator[EventBatch]:
        raise NotImplementedError

    def _total(self) -> int | None:
        """The events one pass hands out from the start, None where only reading them all would tell."""
        return None

    def _state(self) -> dict:
        # a dataclass subclass has no __init__ of ours to run: the state is made on first use
        if "_replay" not in self.__dict__:
            self.__dict__["_replay"] = {
                "start": 0, "handed": 0, "ended": False, "closed": False, "pass": None, "reported": 0,
            }  # fmt: skip
        return self.__dict__["_replay"]

    def _pass(self, batches: Iterable[EventBatch]) -> Iterator[EventBatch]:
        """``batches`` less the first ``seek``'d events, counted as they are handed out."""
        state = self._state()
        if state["closed"]:
            raise ConnectorError(f"{type(self).__name__} {self.position_key} is closed; create a new one")
        state.update(handed=0, ended=False)
        skip = state["start"]
        for batch in batches:
            cut = min(skip, len(batch))
            skip -= cut
            if cut:
                batch = batch[cut:]
            if len(batch):
                state["handed"] += len(batch)
                yield batch
        state["ended"] = True

    def _begin(self, batches: Iterator[EventBatch]) -> Iterator[EventBatch]:
        """Remember the pass (``close`` ends it, releasing its file) and hand it out."""
        self._state()["pass"] = batches
        return batches

    def positions(self) -> dict[str, int]:
        state = self._state()
        return {self.position_key: state["start"] + state["handed"]}

    def seek(self, positions: Mapping[str, int]) -> None:
        """Start the next pass after the events ``positions`` (from ``positions()``) counts."""
        other = sorted(set(positions) - {self.position_key})
        if other:
            raise ConfigError(
                f"positions name {other}, not this source ({self.position_key!r}): resume a run from the "
                "source it read"
            )
        start = int(positions.get(self.position_key, 0))
        if start < 0:
            raise ConfigError(f"position {start} of {self.position_key!r} is negative")
        self._state().update(start=start, handed=0, ended=False)

    def lag(self) -> int | None:
        state = self._state()
        if state["ended"]:
            return 0
        total = self._total()
        return None if total is None else max(0, total - state["start"] - state["handed"])

    @property
    def ended(self) -> bool:
        return self._state()["ended"]

    def dead_letter_count(self) -> int:
        return len(self.dead_letters)

    def report_dead_letters(self, letters: Sequence[DeadLetter], origins=None) -> None:
        """Counted (``reported``) only: a replay has no dead-letter topic, its consumer keeps the letters."""
        self._state()["reported"] += len(letters)

    @property
    def reported(self) -> int:
        """Refusals consumers reported about this source's rows, over its life."""
        return self._state()["reported"]

    def close(self) -> None:
        """End the pass under way (its file closes) and refuse new ones."""
        state = self._state()
        state["closed"] = True
        if state["pass"] is not None:
            state["pass"].close()
            state["pass"] = None


class IterableSource(ReplaySource):
    """Batches held by the caller (a list, or a generator: then one pass only), as an ``EventSource``.

    The batches are handed out as they are; their consumer validates them (the store dead-letters bad
    rows), so this source refuses nothing itself."""

    position_key = "memory"

    def __init__(self, batches: Iterable[EventBatch]) -> None:
        self.batches = batches
        self.dead_letters: list[DeadLetter] = []

    def _batches(self) -> Iterator[EventBatch]:
        yield from self.batches

    def _total(self) -> int | None:
        if isinstance(self.batches, Sequence):
            return sum(len(b) for b in self.batches)
        return None


def as_source(source: EventSource | EventBatch | Iterable[EventBatch]) -> EventSource:
    """``source`` itself when it is an ``EventSource``; one batch, or an iterable of them, wrapped."""
    if isinstance(source, EventSource):
        return source
    if isinstance(source, EventBatch):
        return IterableSource([source])
    if not isinstance(source, Iterable):
        raise ConfigError(f"a source of EventBatches is needed, got {type(source).__name__}")
    return IterableSource(source)


class SourceWrapper:
    """An ``EventSource`` over ``source`` (made one with ``as_source``) that answers every question with its
    answer: a subclass overrides what it adds to (``cli``'s tally counts the events and keeps the store's
    refusals). What the stream is (a file, a dataset) is ``source``'s, for whoever records it."""

    def __init__(self, source: EventSource | Iterable[EventBatch]) -> None:
        self.source = as_source(source)
        self.replay = self.source.replay

    def __iter__(self) -> Iterator[EventBatch]:
        return iter(self.source)

    def positions(self) -> dict[str, int]:
        return self.source.positions()

    def seek(self, positions: Mapping[str, int]) -> None:
        self.source.seek(positions)

    def lag(self) -> int | None:
        return self.source.lag()

    @property
    def ended(self) -> bool:
        return self.source.ended

    def dead_letter_count(self) -> int:
        return self.source.dead_letter_count()

    def report_dead_letters(self, letters: Sequence[DeadLetter], origins=None) -> None:
        self.source.report_dead_letters(letters, origins)

    def close(self) -> None:
        self.source.close()
