"""What every benchmark shares: quiet thread pools, medians, one table or one JSON object."""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable

os.environ.setdefault("OMP_WAIT_POLICY", "passive")


def set_threads(n: int) -> None:
    """Pin Numba and torch pools to ``n`` threads so they never fight over the cores."""
    import numba
    import torch

    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    torch.set_num_threads(n)


def median_time(fn: Callable[[], object], repeats: int) -> float:
    """Median wall seconds of ``fn`` over ``repeats`` runs."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


SMOKE = "SMOKE VALUES (--quick: a small run that checks the benchmark works; full-run figures: RESULTS.md)"


def strict_json(value):
    """``value`` with every NaN and infinity (a metric of an empty split, a rate of nothing) as None: JSON
    has no such numbers, and strict parsers refuse Python's ``NaN``."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict_json(v) for v in value]
    return value


def report(results: dict, as_json: bool, title: str, headline: dict[str, str], quick: bool) -> None:
    """Print ``results`` as one JSON object (every figure, and ``"smoke": true`` for a quick run), or a
    short table of the ``headline`` figures: key -> a label naming what was measured on which dataset (it
    may name other results as ``{key}``, e.g. a row count). Quick runs are labelled smoke values both ways,
    so they are not mistaken for full-run figures."""
    results = {**results, "smoke": bool(quick)}
    if as_json:
        print(json.dumps(strict_json(results), sort_keys=True))
        return
    print(f"# {title}")
    if quick:
        print(f"# {SMOKE}")
    rows = [(label.format_map(results), key) for key, label in headline.items() if key in results]
    width = max((len(label) for label, _ in rows), default=0)
    for label, key in rows:
        value = results[key]
        shown = f"{value:,.3f}" if isinstance(value, float) else str(value)
        print(f"{label:<{width}}  {shown:>12}  ({key})")
    print(f"({len(results)} figures in all: --json prints every one)")
    sys.stdout.flush()
