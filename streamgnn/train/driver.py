"""The stream loop every online trainer runs (``OnlineTrainer.fit``, ``shard.ShardedTrainer.fit``,
``snapshots.SnapshotTrainer.run``), and the offline ones' passes (``fit_offline``'s phases,
``SnapshotTrainer.fit``'s epochs): step each item (a global batch of events, or a snapshot), count what was
consumed, show progress with the latest figures, checkpoint every ``every`` steps (and ``min_pause_s``
seconds after the last one) and at the end, and stop after ``limit`` more events (snapshots).

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
from collections import deque
from collections.abc import Callable, Generator, Sized
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..events import EventBatch
from ..progress import progress_bar
from .sampled import EvalSample

# (global batch or snapshot, arrival time, whether a checkpoint may follow it)
Batches = Generator[tuple[EventBatch, float, bool], None, None]
# called after each item is stepped and counted: (item, what ``trainer.step`` returned, its arrival time)
StepHook = Callable[[Any, Any, float], None]


class Drive:
    """One run's loop over ``trainer`` (anything with ``step(item, arrival=...)``, ``steps`` and ``position``,
    the events or snapshots consumed); ``room`` is for the item generator, ``run`` drives it.

    ``size`` counts an item (events in a batch: ``len``); ``postfix`` gives the progress bar's figures after
    a step (None: unchanged), by default the latest closed window of ``trainer.metrics``' AP and MRR.
    ``progress`` is whether this process shows a bar (only the main rank of a distributed run should).
    ``on_step``: a hook after each step (a job's metrics and dead-letter reports) with the part stepped
    (the item, or each part a budget cut it into) and its result, the trainer's counters already past it.
    ``step(item, arrival)`` steps an item (default ``trainer.step``; an offline
    phase's steps with its own flags, ``offline.run_phase``; a pass of ``SnapshotTrainer.fit``).
    ``min_pause_s``: a checkpoint by interval waits until that many seconds of ``clock`` passed since the
    last one ended (``TrainConfig.checkpoint_min_pause_s``; the first and the run's last are never held);
    the ranks of a distributed trainer take rank 0's word for it."""

    def __init__(
        self, trainer, *, every: int, limit: int | None, progress: bool, total: int | None = None,
        unit: str = "ev", size: Callable[[Sized], int] = len,
        postfix: Callable[[], dict[str, str] | None] | None = None, budget: Budget | None = None,
        on_step: StepHook | None = None, step: Callable[[Any, float], Any] | None = None,
        min_pause_s: float = 0.0, clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self.trainer, self.every, self.limit, self.size = trainer, every, limit, size
        self.min_pause_s, self.clock, self._saved_at = min_pause_s, clock, -math.inf
        self.budget, self.on_step = budget, on_step
        self.step = step or (lambda item, arrival: trainer.step(item, arrival=arrival))
        self.postfix = postfix or self._window_postfix
        self.start = trainer.position
        self._closed = None  # windows closed when the bar last showed one
        if limit is not None:
            total = min(total or math.inf, trainer.position + limit)
        self._bar = dict(total=total, initial=trainer.position, unit=unit, disable=not progress)

    def batch_size(self, default: int) -> int:
        """Events in the next global batch: the budget's (it grows with the lag), else ``default``."""
        return default if self.budget is None else self.budget.batch_size

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
                if self.budget is None:
                    stepped = [(item, self.step(item, arrival))]
                else:  # the parts it was stepped in, each with its result
                    stepped = self.budget.step(item, arrival)
                n = self.size(item)
                tr.position += n
                if self.on_step is not None:
                    for part, result in stepped:
                        self.on_step(part, result, arrival)
                bar.update(n)
                if (shown := self.postfix()) is not None:
                    bar.set_postfix(**shown, refresh=False)
                if boundary and every and tr.steps - last >= every and self._paused():
                    saved, last = save(), tr.steps
                    self._saved_at = self.clock()
        finally:
            bar.close()
            batches.close()  # the generator's own end (its dead-letter count) runs now
        if every and tr.steps > last and boundary:  # not after a batch cut short of its source's
            saved = save()
        return saved, tr.position - self.start

    def _paused(self) -> bool:
        """Whether ``min_pause_s`` has passed since the last checkpoint ended (rank 0's clock for all)."""
        if not self.min_pause_s:
            return True
        due = self.clock() - self._saved_at >= self.min_pause_s
        dist = getattr(self.trainer, "dist", None)
        if dist is None or not dist.active:
            return due
        return bool(dist.all_sum([float(dist.is_main and due)], self.trainer.device)[0])

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


# ---------------------------------------------------------------------- keeping up with the source
LAG_RATE_S = 2.0  # seconds over which the arrival rate is measured (a source's lag is about 1 s old)
COST_DECAY = 0.95  # weight of the past in a step kind's cost line, per step (about the last 20 steps)
TIMELINE_S = 1.0  # seconds between points of the learned fraction over time
TIMELINE_POINTS = 10_000  # points kept (the latest)
EVALUATED = "model"  # the learned model's name among the sampled figures (baselines go by their own)


@dataclass(frozen=True)
class FollowReport:
    """How a run kept up (``OnlineResult.follow``): events consumed, the share in batches it learned from,
    the events its online evaluation scored, the source's lag (events; None: a source without one) at the
    end and at most, the sampled figures with their intervals (``{name: {"ap": ..., "mrr": ...}}``, each
    an ``Estimate`` as a dict; the model under ``"model"``, baselines by name, all on the same events),
    ``timeline``: ``[seconds, events, learned fraction since the previous point, lag, batch size]``, and
    what the learning floor (``FollowConfig.min_learn_fraction``) cost: ``floor_events`` learned past the
    budget's share, ``floor_s`` the seconds their learning took beyond state-only steps (by the measured
    costs): how much later the job drained its lag, or how much more lag it has."""

    mode: str
    events: int
    learned_events: int
    evaluated_events: int
    end_lag: int | None
    max_lag: int | None
    figures: dict[str, dict[str, dict]] = field(default_factory=dict)
    timeline: list[list] = field(default_factory=list)
    min_learn_fraction: float = 0.0
    floor_events: int = 0
    floor_s: float = 0.0

    @property
    def learned_fraction(self) -> float:
        return self.learned_events / self.events if self.events else math.nan

    def text(self) -> str:
        """One line: what was learned and evaluated, and the model's sampled AP and MRR with intervals."""
        model = self.figures.get(EVALUATED, {})
        shown = "; ".join(
            f"{k.upper()} {v['value']:.4f} [{v['low']:.4f}, {v['high']:.4f}]" for k, v in model.items()
        )
        lag = "" if self.max_lag is None else f"; lag max {self.max_lag:,}, end {self.end_lag:,} events"
        floor = ""
        if self.floor_events:
            floor = (
                f"; the floor of {self.min_learn_fraction:.0%} learned {self.floor_events:,} events past "
                f"the budget, about {self.floor_s:.1f} s of lag"
            )
        return (
            f"learned from {self.learned_fraction:.1%} of {self.events:,} events; evaluated "
            f"{self.evaluated_events:,} ({self.mode})" + (f": {shown}" if shown else "") + lag + floor
        )

    def as_dict(self) -> dict:
        return {**asdict(self), "learned_fraction": self.learned_fraction}


def cost_line(sums: np.ndarray) -> tuple[float, float]:
    """``(fixed seconds, seconds per event)`` of steps from their decayed sums of ``(1, events, seconds,
    events^2, events x seconds)``: least squares (steps of one size alone, or a fit with a negative part,
    put it all on events, or all on the step)."""
    w, x, y, xx, xy = sums
    spread = w * xx - x * x
    if spread <= 1e-9 * w * xx:  # steps of one size: no line to fit
        return 0.0, y / x
    per_event = (w * xy - x * y) / spread
    fixed = (y - per_event * x) / w
    if per_event < 0:  # (noise: smaller steps took longer)
        return y / w, 0.0
    return (fixed, per_event) if fixed >= 0 else (0.0, y / x)


class Budget:
    """The two paths of the loop (``FollowConfig``): every event goes through ``trainer.step``'s state
    path (admission, store, the model's stream state, served rows); learning and evaluation run on
    every event, or, budgeted, on what the source's lag leaves time for.

    Per item (a global batch, never cut: batches are the trainers' unit of steps, checkpoints and random
    draws): ``step`` evaluates it when the evaluation's credit (``eval_fraction`` of the events consumed)
    reaches ``min_eval_rows`` (then the credit falls by the item's size), and learns on it or not. An item
    due for evaluation is cut to ``batch_size``, however far behind the job is, so that the sample is spread
    over the stream in small items at the rate asked rather than spent on a few grown ones. The share
    learned comes from measured costs: a line per kind of step (state-only, learning, evaluated: a fixed
    part and a part per event, fitted over its recent steps), the arrival rate (events consumed plus the
    lag's growth, over ``LAG_RATE_S``) and the time a lag may take to drain (``drain_s``): the most events
    whose item (its learning steps as ``_parts`` cuts them, and its state-only step) fits in ``headroom``
    of the time its events leave. Every item learns from that share of its
    events (a credit of the share per event), so a model behind its source keeps learning from the whole
    stream at a uniform rate, as a reservoir over the lag would, rather than from its newest or oldest part
    alone: the time a lag may take is fixed when the job falls behind (``drain_s`` from then), so the share
    stays about even while that lag drains, rather than rising as it shrinks. The learned events of an item
    are stepped in as many optimizer steps as it holds parts of ``batch_size`` (``_parts``): Adam moves about
    ``lr`` per step whatever the batch, so a share of every part keeps a model's pace where the same share in
    whole batches left it under EdgeBank (benchmarks/RESULTS.md, "Following: memory in parts, learning from
    every part"). Caught up (or a source without a lag, a file), it learns on everything. Behind, batches grow
    to an eighth of the lag, up to ``max_batch_size``, for the state path only: an evaluated item is scored in
    parts of ``batch_size`` (scoring 1,000 events at once reads memory as of their start for all of them). The
    share never falls under ``min_learn_fraction``: the costs are wall time, and a loaded host would otherwise
    learn too little to keep the model's quality; what the floor learned past the budget, and the seconds it
    took, are counted for the report.

    The ranks of a distributed job make one plan: rank 0's, with every rank's lag summed (one small
    collective per item). Every mode keeps a uniform sample of the scored events' scores (the model's and
    the baselines') for ``report``'s figures with intervals."""

    def __init__(self, trainer, lag: Callable[[], int | None] | None = None) -> None:
        cfg = trainer.config
        self.trainer, self.follow, self.lag_of = trainer, cfg.follow, lag
        self.base = self.batch_size = cfg.batch_size
        self.cap = max(self.follow.max_batch_size, cfg.batch_size)
        self.caught_up = self.follow.caught_up_events or cfg.batch_size
        per_window = self.follow.eval_per_window / cfg.window_events
        self.eval_share = min(1.0, per_window) if self.follow.eval_per_window else self.follow.eval_fraction
        self.events = self.learned_events = self.evaluated = 0
        self.floor_events, self.floor_s = 0.0, 0.0  # learned past the budget's share, and its seconds
        self.sample = EvalSample(seed=cfg.seed)
        # (learn, evaluate) -> decayed sums of (1, events, seconds, events^2, events x seconds) of its steps
        self._sums: dict[tuple[bool, bool], np.ndarray] = {}
        self.fraction, self.lag, self.max_lag, self.rate = 1.0, None, None, None
        # evaluation starts with a full credit: a run has figures from its first scorable events on
        self._credit = {"learn": 0.0, "eval": float(self.follow.min_eval_rows)}
        self._eval_due = False  # the next item is evaluated (it was cut to batch_size for it)
        self._mark: tuple[float, int, int] | None = None  # (time, events, lag) the rate is measured from
        self._deadline: float | None = None  # when the lag should be drained by (None: caught up)
        self.started = time.perf_counter()
        self.timeline: deque[list] = deque(maxlen=TIMELINE_POINTS)
        self._point = (self.started, 0, 0)  # (time, events, learned events) of the last timeline point

    def step(self, item: EventBatch, arrival: float) -> list[tuple[EventBatch, Any]]:
        """Step ``item`` through the trainer: whole (every event), or as the plan says (budget, ``_parts``).
        Returns each part with the trainer's ``StepResult`` for it."""
        n = len(item)
        if not self.follow.budgeted:
            stepped = [(item, self._timed(item, arrival, True, True))]
            self._count(n, n)
            return stepped
        learned, evaluate = self._plan(n)
        parts = self._parts(n, learned, evaluate)
        # the item's touched nodes are served once, after its last part: they arrived together, and a
        # refresh per part would embed the nodes the parts share again
        stepped = [
            (item[lo:hi], self._timed(item[lo:hi], arrival, learn, evaluate, serve=k == len(parts) - 1))
            for k, (lo, hi, learn) in enumerate(parts)
        ]
        self._count(n, learned)
        return stepped

    def _parts(self, n: int, learned: int, evaluate: bool) -> list[tuple[int, int, bool]]:
        """``(lo, hi, learns)`` of an item's steps: its first ``learned`` events in as many learning steps as
        the item holds parts of ``batch_size`` (the share learned shrinks each step, not their number: Adam
        moves about ``lr`` per step whatever its batch, so a model that learns from every slot of
        ``batch_size`` keeps its pace), then the rest in one state-only step (in parts of ``batch_size``
        when evaluated: scores read the state as of their step's start). A learning step takes at least a
        quarter of ``batch_size`` events: a step's fixed costs (the optimizer over every parameter, the
        backward's setup) over a few events would make a small share dearer per event, and the plan would
        afford a smaller one still."""
        k = self._learn_step(n, learned)
        parts = [(lo, min(lo + k, learned), True) for lo in range(0, learned, k)]
        rest = self.base if evaluate else max(n - learned, 1)
        parts += [(lo, min(lo + rest, n), False) for lo in range(learned, n, rest)]
        return parts or [(0, 0, False)]  # (an empty item is still stepped)

    def _learn_step(self, n: int, learned: int) -> int:
        """Events in each learning step of an item of ``n`` events learning from ``learned`` (``_parts``)."""
        return max(1, math.ceil(learned / max(1, math.ceil(n / self.base))), self.base // 4)

    def report(self) -> FollowReport:
        figures = {n: {k: e.as_dict() for k, e in f.items()} for n, f in self.sample.figures().items()}
        return FollowReport(
            self.follow.mode, self.events, self.learned_events, self.evaluated, self.lag, self.max_lag,
            figures, [list(p) for p in self.timeline], self.follow.min_learn_fraction,
            round(self.floor_events), self.floor_s,
        )  # fmt: skip

    # ------------------------------------------------------------------ the plan
    def _plan(self, n: int) -> tuple[int, bool]:
        """How many of the item's events it learns from, and whether it is evaluated (every rank alike)."""
        own = self.lag_of() if self.lag_of is not None else None
        dist = self.trainer.dist
        if not dist.active:
            self._observe_lag(own)
        self.fraction = self._floored(self._fraction(n), n)
        credit = self._credit
        credit["learn"] = min(credit["learn"] + self.fraction * n, float(n))
        learn = int(credit["learn"])
        credit["learn"] -= learn
        credit["eval"] += self.eval_share * n
        evaluate = self._eval_due or credit["eval"] >= min(self.follow.min_eval_rows, n)
        credit["eval"] -= n if evaluate else 0
        size = self._next_batch_size()
        # an item to be evaluated is cut to batch_size: a grown one, scored whole, spent the credit of a
        # thousand events at once, and a run that consumed few items held its first ones' events mostly
        self._eval_due = size > self.base and credit["eval"] + self.eval_share * size >= min(
            self.follow.min_eval_rows, size
        )
        size = self.base if self._eval_due else size
        if dist.active:  # rank 0's plan, every rank's lag
            main = float(dist.is_main)
            agreed = dist.all_sum(
                [main * learn, main * evaluate, main * size, float(own or 0), float(own is not None)],
                self.trainer.device,
            )  # fmt: skip
            learn, evaluate, size = int(agreed[0]), bool(agreed[1]), int(agreed[2])
            self._observe_lag(int(agreed[3]) if agreed[4] else None)
        self.batch_size = size
        return learn, evaluate

    def _fraction(self, n: int) -> float:
        """The share of an item of ``n`` events to learn on: all when caught up or the lag is unknown, else
        the most its measured costs leave time for (the last share until a learning step was measured)."""
        lag, follow = self.lag, self.follow
        if lag is None or lag <= self.caught_up:
            self._deadline = None
            return 1.0
        if self._deadline is None:  # fell behind: the lag is to drain within drain_s from now
            self._deadline = time.perf_counter() + follow.drain_s
        if (True, False) not in self._sums:
            return self.fraction
        rate = self.rate or 0.0  # until measured: nothing more arrives, the lag only drains
        left = max(self._deadline - time.perf_counter(), 1e-6)  # (past it: drain as fast as state allows)
        per_event = follow.headroom / (rate + lag / left) - self.eval_share * self._eval_cost()
        allowed, low, high = per_event * n, 0, n  # the most events learned whose item fits in ``allowed``
        if self._item_cost(n, 0) > allowed:
            return 0.0
        while low < high:  # an item's cost grows with the events it learns: bisect
            mid = (low + high + 1) // 2
            low, high = (mid, high) if self._item_cost(n, mid) <= allowed else (low, mid - 1)
        return low / n if n else 1.0

    def _item_cost(self, n: int, learned: int) -> float:
        """Seconds an item of ``n`` events takes when it learns from ``learned`` of them: its learning steps
        (as many as ``_parts`` cuts, each a fixed cost plus a cost per event) and its state-only step. A
        step's costs are a line, not a cost per event: a learning step is 12.5 ms + 0.11 ms per event on the
        2-core host, so an item learning from few events pays the fixed cost over few, and a cost per event
        measured at one share misjudged another (a lower share looked dearer per event, and the plan chose
        lower still: benchmarks/RESULTS.md, "Following: the budget's cost as a line")."""
        fixed, per_event = self._line((True, False))
        state_fixed, state = self._state_line(fixed, per_event)
        steps = math.ceil(learned / self._learn_step(n, learned)) if learned else 0
        return steps * fixed + learned * per_event + state_fixed + (n - learned) * state

    def _state_line(self, fixed: float, per_event: float) -> tuple[float, float]:
        """A state-only step's line: as measured, or a quarter of a learning step's before one was, or where
        the measure is not under ``(fixed, per_event)``. A learning step runs the state path on its events
        too, so a state cost at or above it is the estimate's error (a stalled step); taken at its word it
        made the share 1, which steps no state-only part that could correct it: a job far behind learned
        from every event for good (``bench follow`` at 50,000 events/s, benchmarks/RESULTS.md)."""
        if (False, False) not in self._sums:
            return fixed / 4, per_event / 4
        state_fixed, state = self._line((False, False))
        if state_fixed + self.base * state >= fixed + self.base * per_event:
            return fixed / 4, per_event / 4
        return min(state_fixed, fixed), min(state, per_event)

    def _line(self, kind: tuple[bool, bool]) -> tuple[float, float]:
        """``(fixed seconds, seconds per event)`` of a step kind (``cost_line`` of its decayed steps)."""
        return cost_line(self._sums[kind])

    def _floored(self, share: float, n: int) -> float:
        """``share``, or ``min_learn_fraction`` where that is more; the events an item learns past the
        budget's share, and what they cost over its share's steps, are counted."""
        floor = self.follow.min_learn_fraction
        if share >= floor:
            return share
        self.floor_events += (floor - share) * n
        if (True, False) in self._sums:
            self.floor_s += self._item_cost(n, round(floor * n)) - self._item_cost(n, round(share * n))
        return floor

    def _eval_cost(self) -> float:
        """Seconds an evaluated event adds to its step (0 until measured), at ``batch_size`` events a step
        (an evaluated item's parts)."""
        extra = [
            self._at_base((learn, True)) - self._at_base((learn, False))
            for learn in (True, False)
            if (learn, True) in self._sums and (learn, False) in self._sums
        ]
        return max(0.0, max(extra)) if extra else 0.0

    def _at_base(self, kind: tuple[bool, bool]) -> float:
        """Seconds per event of a step of ``kind`` over ``batch_size`` events."""
        fixed, per_event = self._line(kind)
        return fixed / self.base + per_event

    def _next_batch_size(self) -> int:
        """``batch_size`` caught up (fresh rows soon after each event), behind an eighth of the lag up to the
        cap (per-batch costs amortized over more events)."""
        if self.lag is None or self.lag <= self.caught_up:
            return self.base
        return int(min(self.cap, max(self.base, self.lag // 8)))

    def _observe_lag(self, lag: int | None) -> None:
        """Note the source's lag; every ``LAG_RATE_S`` measure the arrival rate from it."""
        self.lag = lag
        if lag is None:
            return
        self.max_lag = max(self.max_lag or 0, lag)
        now = time.perf_counter()
        if self._mark is None:
            self._mark = (now, self.events, lag)
            return
        then, events, before = self._mark
        if now - then >= LAG_RATE_S:
            rate = max(0.0, (self.events - events) + (lag - before)) / (now - then)
            self.rate = rate if self.rate is None else 0.5 * (self.rate + rate)
            self._mark = (now, self.events, lag)

    # ------------------------------------------------------------------ steps and counts
    def _timed(self, part: EventBatch, arrival: float, learn: bool, evaluate: bool, serve: bool = True):
        """One ``trainer.step``; its seconds per event go into the costs, its scores into the sample."""
        began = time.perf_counter()
        result = self.trainer.step(part, arrival=arrival, train=learn, score=evaluate, serve=serve)
        self._observe_cost((learn, evaluate), time.perf_counter() - began, len(part))
        if evaluate:  # rows it could not score (no negatives yet, refused rows) go back to the credit
            self._credit["eval"] += len(part) - len(result.pos)
        if evaluate and len(result.pos):
            self.sample.add({EVALUATED: (result.pos, result.neg, result.rr), **result.baselines})
            self.evaluated += len(result.pos)
        return result

    def _observe_cost(self, kind: tuple[bool, bool], seconds: float, events: int) -> None:
        """A step's seconds into its kind's decayed sums, for ``_line``'s fit of seconds to events."""
        x = float(max(events, 1))
        sums = self._sums.setdefault(kind, np.zeros(5))
        sums *= COST_DECAY
        sums += (1.0, x, seconds, x * x, x * seconds)

    def _count(self, n: int, learned: int) -> None:
        self.events += n
        self.learned_events += learned
        now = time.perf_counter()
        then, events, learned_then = self._point
        if now - then >= TIMELINE_S:
            share = (self.learned_events - learned_then) / max(self.events - events, 1)
            self.timeline.append(
                [round(now - self.started, 3), self.events, share, self.lag, self.batch_size]
            )
            self._point = (now, self.events, self.learned_events)
