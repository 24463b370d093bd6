"""What a command fed from a file or a dataset did not apply, for its summary: the source's unreadable lines
(``source.dead_letters``, each naming its file line) and the store's refusals. A run that read no valid event
says so and fails, instead of reporting success over an empty result.

>>> from streamgnn.events import DeadLetter
>>> tally = Tally([])
>>> tally.report_dead_letters([DeadLetter("t is NaN", "e.csv:line 3")])
>>> tally.text()
'1 dead letter (first at e.csv:line 3: t is NaN)'
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator

from ..errors import ConfigError, ConnectorError
from ..events import DeadLetter, EventBatch
from ..sources import ReplaySource, SourceWrapper

_SHOWN = 3  # dead letters printed one per line; the summary counts them all


def count_text(n: int) -> str:
    """``1 dead letter``, ``2,000 dead letters``."""
    return f"{n:,} dead letter{'' if n == 1 else 's'}"


class Tally(SourceWrapper):
    """Wraps a file or dataset source (a ``ReplaySource``; batches held in memory are wrapped too), an
    ``EventSource`` still: counts the events it yields and collects the store's refusals, which
    ``live_snapshots`` (or the caller) hands to ``report_dead_letters`` as it does to a Kafka source."""

    source: ReplaySource

    def __init__(self, source: ReplaySource | Iterable[EventBatch], name: str = "") -> None:
        super().__init__(source)
        if not isinstance(self.source, ReplaySource):
            kind = type(self.source).__name__
            raise ConfigError(f"a tally counts a file's or a dataset's dead letters, not a {kind}'s")
        self.name = name
        self.events = 0
        self.refused: list[DeadLetter] = []

    def __iter__(self) -> Iterator[EventBatch]:
        return self._counted(iter(self.source))  # a file source starts its pass (and its list) now

    def _counted(self, batches: Iterator[EventBatch]) -> Iterator[EventBatch]:
        for batch in batches:
            self.events += len(batch)
            yield batch

    def report_dead_letters(self, letters: Iterable[DeadLetter], origins=None) -> None:
        self.refused.extend(letters)

    @property
    def dead_letters(self) -> list[DeadLetter]:
        """The source's own (its unreadable lines), as a trainer counts them on the source it reads."""
        return self.source.dead_letters

    @property
    def letters(self) -> list[DeadLetter]:
        """Every dead letter: the source's, then the store's."""
        return [*self.dead_letters, *self.refused]

    def text(self) -> str:
        """``N dead letters (first at WHERE: REASON)``."""
        letters = self.letters
        count = count_text(len(letters))
        return count if not letters else f"{count} (first at {letters[0].where}: {letters[0].reason})"

    def show(self) -> None:
        """The first dead letters on stderr, one line each, where and why."""
        letters = self.letters
        for letter in letters[:_SHOWN]:
            eid = "" if letter.eid is None else f" (eid {letter.eid})"
            print(f"dead letter at {letter.where}{eid}: {letter.reason}", file=sys.stderr)
        if len(letters) > _SHOWN:
            print(f"... and {len(letters) - _SHOWN:,} more dead letters", file=sys.stderr)

    def check_read_some(self) -> None:
        """Fail, naming the source and the first dead letter, when no event of it was valid."""
        if self.events - len(self.refused) <= 0:
            raise ConnectorError(f"no valid event in {self.name}: {self.text()}")
