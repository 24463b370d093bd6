"""What every benchmark shares: quiet thread pools, medians, one table or one JSON object."""

from __future__ import annotations

import json
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


def report(results: dict, as_json: bool, title: str) -> None:
    """Print ``results`` as one JSON object, or as an aligned table."""
    if as_json:
        print(json.dumps(results, sort_keys=True))
        return
    print(f"# {title}")
    width = max(map(len, results))
    for key, value in results.items():
        shown = f"{value:,.3f}" if isinstance(value, float) else str(value)
        print(f"{key:<{width}}  {shown}")
    sys.stdout.flush()
