"""The stream loop both online trainers run (``OnlineTrainer.fit``, ``shard.ShardedTrainer.fit``): step each
global batch, count the events consumed, show progress with the latest window's AP and MRR, checkpoint every
``checkpoint_interval`` batches and at the end, and stop after ``max_events``.

What differs between the trainers is where global batches come from, so each ``fit`` hands ``drive`` a
generator of ``(batch, arrival, boundary)``: the replicated trainer cuts its source's batches to
``batch_size`` (skipping what a resumed checkpoint replayed), the sharded one agrees on them with the other
ranks (``GlobalBatcher``). ``boundary`` says whether a checkpoint may follow the batch: a source read by
offsets is checkpointed only between its own batches, so that the saved offsets name exactly the events the
state holds. The generator reads ``room()``, the events left before ``max_events``, to cut its last batch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Generator
from pathlib import Path

from ..events import EventBatch
from ..progress import progress_bar

# (global batch, arrival time, whether a checkpoint may follow it)
Batches = Generator[tuple[EventBatch, float, bool], None, None]


class Drive:
    """One ``fit``'s loop over ``trainer`` (any trainer with ``step``, ``steps``, ``position``, ``metrics``,
    ``config`` and ``dist``); ``room`` is for the batch generator, ``run`` drives it."""

    def __init__(self, trainer, *, max_events: int | None, progress: bool, total: int | None) -> None:
        self.trainer, self.max_events = trainer, max_events
        self.start_events = trainer.position
        if max_events is not None:
            total = min(total or math.inf, trainer.position + max_events)
        self._bar = dict(total=total, initial=trainer.position, unit="ev",
                         disable=not (progress and trainer.dist.is_main))  # fmt: skip

    def room(self) -> int | None:
        """Events left before ``max_events`` (None: no limit)."""
        if self.max_events is None:
            return None
        return max(0, self.max_events - (self.trainer.position - self.start_events))

    def run(self, batches: Batches, save: Callable[[], Path | None]) -> tuple[Path | None, int]:
        """Step every batch of ``batches``; ``save()`` writes a checkpoint (every rank calls it). Returns the
        newest checkpoint written (None: none) and the events consumed; ``elapsed()`` times the fit."""
        tr = self.trainer
        every = tr.config.checkpoint_interval
        self.started = time.perf_counter()
        last, saved, boundary = tr.steps, None, True
        bar = progress_bar(**self._bar)
        try:
            for batch, arrival, boundary in batches:
                closed = tr.metrics.closed
                tr.step(batch, arrival=arrival)
                tr.position += len(batch)
                bar.update(len(batch))
                if tr.metrics.closed > closed:
                    bar.set_postfix(**self._postfix(), refresh=False)
                if boundary and every and tr.steps - last >= every:
                    saved, last = save(), tr.steps
        finally:
            bar.close()
            batches.close()  # the generator's own end (its dead-letter count) runs now
        if every and tr.steps > last and boundary:  # not after a batch cut short of its source's
            saved = save()
        return saved, tr.position - self.start_events

    def elapsed(self) -> float:
        """Seconds since ``run`` started (a fit's time, its end of stream work included)."""
        return time.perf_counter() - self.started

    def _postfix(self) -> dict[str, str]:
        tr = self.trainer
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
