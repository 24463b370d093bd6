"""Fill the Numba kernels' on-disk cache (``@njit(cache=True)``, in each package's ``__pycache__``) before the
suite's workers start: ``python tests/warm_kernels.py`` (tests/conftest.py runs it under pytest-xdist).

On a fresh clone the cache is empty, and every process that starts before a kernel is cached compiles it
itself: both workers, and each command the first tests start (docs blocks, `streamgnn train` runs, ranks).
A cold `streamgnn train` spends ~30 s of CPU compiling its kernels and ~6 s in all once they are cached.
The two parts run side by side, one per core: the default training path (store, ids, sampling, walks,
negatives, pairs: most of the compile time), and the partitioners with the JSON scanner. A kernel called
with other types later still compiles there, once, and is cached for the processes after it."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import numpy as np


def train() -> None:
    """The default model's path, as the docs and most commands run it."""
    from streamgnn.cli import main

    with tempfile.TemporaryDirectory() as work:
        os.chdir(work)  # whatever the command writes lands here
        main(["train", "--dataset", "jodie_wikipedia", "--events", "300", "--quiet", "--log-every", "0"])


def partitioners() -> None:
    """Each partitioner under a store, the partition report, and the JSON scanner of a Kafka poll."""
    from streamgnn.codec import encode_json_lines, fast_rows
    from streamgnn.events import EventBatch
    from streamgnn.partition import METHODS, partition_report
    from streamgnn.store import StoreConfig, TemporalGraphStore

    rng = np.random.default_rng(0)
    ev = EventBatch.from_columns(
        src=rng.integers(0, 50, 400), dst=rng.integers(0, 50, 400), t=np.arange(400.0), eid=np.arange(400)
    )
    for name in METHODS:
        store = TemporalGraphStore(StoreConfig(num_partitions=4, partitioner=name))
        store.ingest(ev)
        partition_report(store)
    lines = [line for line in encode_json_lines(ev).split(b"\n") if line]
    assert fast_rows(lines, "warm-up") is not None  # (plain events: the scanner's path)


PARTS = {"train": train, "partitioners": partitioners}

if __name__ == "__main__":
    if len(sys.argv) > 1:
        PARTS[sys.argv[1]]()
    else:  # every part, side by side
        parts = [subprocess.Popen([sys.executable, __file__, part]) for part in PARTS]
        sys.exit(max(part.wait() for part in parts))
