"""Follow costs: how well does the budget's cost estimate predict what an item's learning will take?

streamgnn bench follow_costs [--quick] [--events 120000] [--json]

The budget (``train.driver.Budget``) plans the share of a job's events it learns from by its measured step
costs. This replays JODIE Wikipedia through the default job in process, far behind its source (items of
``max_batch_size``), each item learning a share drawn from 0.2 to 1.0 (pinned, so every share is seen), and
records every step. Before each item, three estimates fitted on the steps before it predict the seconds of
that item's learning steps: ``per_step`` (a per-step moving average of seconds per event, the budget's
before 102540f), ``per_event`` (decayed seconds over decayed events, its estimate from 102540f) and
``line`` (today's: a fixed part per step and a part per event, least squares over decayed sums,
``driver.cost_line``). All three score the same steps, so the comparison does not depend on the host's load;
the seconds themselves do (the load average is recorded). Reported per estimate: the median and 90th
percentile of the relative error, and the line fitted at the end.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

try:
    from .common import report, set_threads
except ImportError:  # run as a script
    from common import report, set_threads

SHARES = (0.2, 0.4, 0.6, 0.8, 1.0)
BEHIND = 1_000_000  # the lag the budget is told: far behind, so items grow to max_batch_size


def record(events: int, seed: int = 0) -> list[tuple[int, int, float]]:
    """``(item, events, seconds)`` of every learning step (not evaluated) of the pinned-share replay."""
    from streamgnn.datasets import load
    from streamgnn.train import FollowConfig, OnlineTrainer, TrainConfig
    from streamgnn.train.driver import Budget

    rng = np.random.default_rng(seed)
    steps: list[tuple[int, int, float]] = []

    class Pinned(Budget):
        items = 0  # items stepped so far

        def _fraction(self, n: int) -> float:
            return float(rng.choice(SHARES))

        def _observe_cost(self, kind, seconds: float, n: int) -> None:
            if kind == (True, False):
                steps.append((self.items, n, seconds))
            super()._observe_cost(kind, seconds, n)

    trainer = OnlineTrainer(TrainConfig(follow=FollowConfig(mode="budget")))
    budget = Pinned(trainer, lag=lambda: BEHIND)
    stream = load("jodie_wikipedia")[:events]
    while trainer.position < len(stream):  # items of the budget's batch size (it grows with the lag)
        item = stream[trainer.position : trainer.position + budget.batch_size]
        budget.step(item, time.perf_counter())
        trainer.position += len(item)
        budget.items += 1
    return steps


def score(steps: list[tuple[int, int, float]]) -> dict:
    """Each estimate's relative error on each item's learning seconds, from the steps before the item."""
    from streamgnn.train.driver import COST_DECAY, cost_line

    per_step, spent, sums = None, np.zeros(2), np.zeros(5)
    errors: dict[str, list[float]] = {"per_step": [], "per_event": [], "line": []}
    for item in sorted({s[0] for s in steps}):
        mine = [(n, s) for i, n, s in steps if i == item]
        learned, actual = sum(n for n, _ in mine), sum(s for _, s in mine)
        if per_step is not None and sums[0] >= 3:
            fixed, each = cost_line(sums)
            predicted = {
                "per_step": per_step * learned,
                "per_event": spent[0] / spent[1] * learned,
                "line": len(mine) * fixed + learned * each,
            }
            for name, p in predicted.items():
                errors[name].append(abs(p - actual) / actual)
        for n, s in mine:
            per_step = s / n if per_step is None else 0.8 * per_step + 0.2 * s / n
            spent = 0.8 * spent + (s, n)
            sums = COST_DECAY * sums + (1.0, n, s, n * n, n * s)
    fixed, each = cost_line(sums)
    out = {"items": len(errors["line"]), "line_fixed_ms": 1e3 * fixed, "line_per_event_ms": 1e3 * each}
    for name, e in errors.items():
        out[f"{name}_median_error"] = float(np.median(e))
        out[f"{name}_p90_error"] = float(np.percentile(e, 90))
    return out


HEADLINE = {
    "line_median_error": "the line's median relative error on an item's learning seconds",
    "per_event_median_error": "... the per-event estimate's (102540f)",
    "per_step_median_error": "... the per-step average's (before 102540f)",
    "line_p90_error": "the line's 90th percentile",
    "per_event_p90_error": "... the per-event estimate's",
    "load_avg_before": "load average (1 min) before the run",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the first 20,000 events")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--events", type=int, help="events replayed (default 120,000; --quick 20,000)")
    args = ap.parse_args(argv)
    events = args.events or (20_000 if args.quick else 120_000)
    if events < 3_000:
        ap.error("--events must be >= 3,000 (items grow to 1,000: steps to fit on, then an item to score)")
    set_threads(1)  # as `streamgnn train` (--threads 1)
    load_before = os.getloadavg()[0]
    results = {"dataset": "jodie_wikipedia", "events": events, **score(record(events))}
    results |= {"load_avg_before": load_before, "load_avg_after": os.getloadavg()[0]}
    report(
        results,
        args.json,
        "follow costs: the budget's estimates against an item's learning",
        HEADLINE,
        args.quick,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
