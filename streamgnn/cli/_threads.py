"""Thread settings every ``streamgnn`` command starts with, before torch, Numba or a BLAS library loads.

OpenMP's default is to spin while a thread waits for work; on a shared or busy machine those spinning threads
take the cores the job needs, and a 2-core host ran the demo 5-20x slower beside two busy loops (issue 32).
Passive waiting puts a waiting thread to sleep, so a busy host costs what its load says. The pools' sizes are
set explicitly too, so every library agrees on them: to the user's ``OMP_NUM_THREADS`` where set (torch sizes
its pool from ``MKL_NUM_THREADS`` too, so a user's ``OMP_NUM_THREADS=1`` alone must not meet a larger MKL
figure), else to the CPUs this process may run on (not the machine's count). A user's own setting always
wins: only variables that are not set are set.

The libraries read these variables once, when they load (libgomp in its constructor), so they must be set
before the first import of torch or Numba: ``streamgnn.cli`` imports this module before anything else.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

# the pools each library sizes from its own variable (torch's intra-op pool reads OMP_NUM_THREADS)
POOL_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS")


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, as a container or ``taskset`` limits it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # a platform without affinity masks
        return max(1, os.cpu_count() or 1)


def quiet_threads(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Set passive OpenMP waiting and explicit pool sizes in ``environ`` where the user set none; returns
    what it set."""
    threads = environ.get("OMP_NUM_THREADS", "")
    threads = threads if threads.isdigit() and int(threads) > 0 else str(usable_cpus())
    wanted = {"OMP_WAIT_POLICY": "passive", **dict.fromkeys(POOL_VARIABLES, threads)}
    if "numba" in sys.modules:  # (a caller that loaded it first, e.g. a test) Numba rereads its variable
        del wanted["NUMBA_NUM_THREADS"]  # at each compilation and refuses a change once its pool runs
    set_here = {k: v for k, v in wanted.items() if not environ.get(k)}
    environ.update(set_here)
    return set_here


quiet_threads()
