"""Stable vertex-to-partition hashing.

The hash must agree across processes and machines (producers key Kafka messages with it, consumers
own graph partitions by it), so Python's salted ``hash`` is out: ints go through splitmix64, strings
through CRC32 of their UTF-8 bytes.
"""

from __future__ import annotations

import zlib

import numpy as np

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def splitmix64(x: np.ndarray) -> np.ndarray:
    z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def hash_partition(ids: np.ndarray, num_partitions: int) -> np.ndarray:
    """Partition (int32) of each external node id, identical in every process."""
    ids = np.asarray(ids)
    if ids.dtype == object or ids.dtype.kind == "U":
        h = np.fromiter((zlib.crc32(str(s).encode()) for s in ids.tolist()), dtype=np.uint64, count=len(ids))
    else:
        with np.errstate(over="ignore"):
            h = splitmix64(ids.astype(np.int64).view(np.uint64))
    return (h % np.uint64(num_partitions)).astype(np.int32)
