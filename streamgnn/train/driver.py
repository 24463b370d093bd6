"""The stream loop every online trainer runs (``OnlineTrainer.fit``, ``shard.ShardedTrainer.fit``,
``snapshots.SnapshotTrainer.run``): step each item (a global batch of events, or a snapshot), count what was
consumed, show progress with the latest figures, checkpoint every ``every`` steps and at the end, and stop
after ``limit`` more events (snapshots).

What differs between the trainers is where items come from, so each hands ``drive`` a generator of
``(item, arrival, boundary)``: the replicated trainer cuts its source's batches to ``batch_size`` (skipping
what a resumed checkpoint replayed), the sharded one agrees on them with the other ranks (``GlobalBatcher``),
the snapshot trainer cuts snapshots from its live stream. ``boundary`` says whether a checkpoint may follow
the item: a source read by offsets is checkpointed only between its own batches, so that the saved offsets
name exactly the events the state holds; a snapshot trainer only after a snapshot that closes its window of
``bptt`` losses. The generator reads ``room()``, what is left before ``limit``, to stop (cut its last batch).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Generator, Sized
from pathlib import Path

from ..events import EventBatch
from ..progress import progress_bar

# (global batch or snapshot, arrival time, whether a checkpoint may follow it)
Batches = Generator[tuple[EventBatch, float, bool], None, None]


class Drive:
    """One run's loop over ``trainer`` (anything with ``step(item, arrival=...)``, ``steps`` and ``position``,
    the events or snapshots consumed); ``room`` is for the item generator, ``run`` drives it.

    ``size`` counts an item (events in a batch: ``len``); ``postfix`` gives the progress bar's figures after
    a step (None: unchanged), by default the latest closed window of ``trainer.metrics``' AP and MRR.
    ``progress`` is whether this process shows a bar (only the main rank of a distributed run should)."""

    def __init__(
        self, trainer, *, every: int, limit: int | None, progress: bool, total: int | None = None,
        unit: str = "ev", size: Callable[[Sized], int] = len,
        postfix: Callable[[], dict[str, str] | None] | None = None,
    ) -> None:  # fmt: skip
        self.trainer, self.every, self.limit, self.size = trainer, every, limit, size
        self.postfix = postfix or self._window_postfix
        self.start = trainer.position
        self._closed = None  # windows closed when the bar last showed one
        if limit is not None:
            total = min(total or math.inf, trainer.position + limit)
        self._bar = dict(total=total, initial=trainer.position, unit=unit, disable=not progress)

    def room(self) -> int | None:
        """Events (snapshots) left before ``limit`` (None: no limit)."""
        if self.limit is None:
            return None
        return max(0, self.limit - (self.trainer.position - self.start))

    def run(self, batches: Batches, save: Callable[[], Path | None]) -> tuple[Path | None, int]:
        """Step every item of ``batches``; ``save()`` writes a checkpoint (every rank calls it). Returns the
        newest checkpoint written (None: none) and what was consumed; ``elapsed()`` times the run."""
        tr, every = self.trainer, self.every
        self.started = time.perf_counter()
        last, saved, boundary = tr.steps, None, True
        bar = progress_bar(**self._bar)
        try:
            for item, arrival, boundary in batches:
                tr.step(item, arrival=arrival)
                n = self.size(item)
                tr.position += n
                bar.update(n)
                if (shown := self.postfix()) is not None:
                    bar.set_postfix(**shown, refresh=False)
                if boundary and every and tr.steps - last >= every:
                    saved, last = save(), tr.steps
        finally:
            bar.close()
            batches.close()  # the generator's own end (its dead-letter count) runs now
        if every and tr.steps > last and boundary:  # not after a batch cut short of its source's
            saved = save()
        return saved, tr.position - self.start

    def elapsed(self) -> float:
        """Seconds since ``run`` started (a run's time, its end of stream work included)."""
        return time.perf_counter() - self.started

    def _window_postfix(self) -> dict[str, str] | None:
        """The AP and MRR of the window closed since the bar last showed one (None: no new window), with the
        best baseline's MRR beside them."""
        tr = self.trainer
        closed = tr.metrics.closed
        if closed == self._closed or not tr.metrics.windows:
            return None
        self._closed = closed
        w = tr.metrics.windows[-1]
        best = {n: r.windows[-1].mrr for n, r in getattr(tr, "baseline_metrics", {}).items() if r.windows}
        beside = {"best_baseline_mrr": f"{max(best.values()):.4f}"} if best else {}
        return dict(ap=f"{w.ap:.4f}", mrr=f"{w.mrr:.4f}", **beside)


def source_dead_letters(source) -> int:
    """Dead letters a source made itself (rows it could not parse or decode): file sources list this
    pass's, the Kafka source counts them in ``stats``, less those a caller reported through it (the store's
    or index's refusals, which the trainer counts where it makes them). ``OnlineResult.dead_letters`` adds
    the trainer's."""
    letters = getattr(source, "dead_letters", None)
    if isinstance(letters, list):
        return len(letters)
    stats = getattr(source, "stats", None)
    return int(getattr(stats, "dead_letters", 0)) - int(getattr(stats, "reported_dead_letters", 0))
