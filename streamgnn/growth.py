"""One growth policy for the arrays a stream only appends to (edges, node slots, journals, tables).

An array that is full grows to ``GROWTH`` times its length plus ``SLACK`` rows, or to what is needed if
that is more. ``GROWTH`` is small on purpose: the store's bytes per edge (benchmarks/RESULTS.md) count
the unused tail, and 1.125 keeps it under an eighth while each row is still copied only about eight times
over a run (amortized O(1) per append); ``SLACK`` spares the first small arrays a copy per batch.

Every array that grows with the stream goes through it (the store's edge and node arrays, the id map's
reverse map, the replicated partition of ``shard.GlobalIndex``, the greedy partitioner's queue, ...). Two
kinds of storage are not appended arrays and keep their own rule: open-addressing hash tables (the id
map's, the pair table's) double, because their slot is a hash masked by a power-of-two size and their
load must stay under a half; the store's per-node adjacency blocks move within one pool by 1.25x, because
a block is one vertex's few rows, where ``SLACK`` would waste a thousand rows per vertex and a smaller
factor would move each block twice as often (the pool, holding garbage as well as blocks, is compacted
into one sized by its live rows: ``store.graph.COMPACT_AT``).

>>> import numpy as np
>>> a = np.arange(3)
>>> b = grow(a, 5, fill=-1)
>>> b[:6].tolist(), len(b) == grown_size(3, 5)
([0, 1, 2, -1, -1, -1], True)
>>> grow(b, 4) is b  # room already: the same array, no copy
True
>>> grown_size(10_000, 10_001)
12274
"""

from __future__ import annotations

import numpy as np

GROWTH = 1.125
SLACK = 1024


def grown_size(size: int, need: int) -> int:
    """The length an array of ``size`` rows grows to when it must hold ``need`` rows (``need > size``)."""
    return max(need, int(size * GROWTH) + SLACK)


def grow(arr: np.ndarray, need: int, fill=0) -> np.ndarray:
    """``arr`` if it has ``need`` rows already, else a copy with ``grown_size`` rows (axis 0), the new rows
    set to ``fill``."""
    if need <= len(arr):
        return arr
    out = np.empty((grown_size(len(arr), need), *arr.shape[1:]), arr.dtype)
    out[: len(arr)] = arr
    out[len(arr) :] = fill
    return out
