"""Stable vertex-to-partition hashing.

The hash must agree across processes and machines (producers key Kafka messages with it, consumers
own graph partitions by it), so Python's salted ``hash`` is out: ints go through splitmix64, strings
through CRC32 of their UTF-8 bytes.
"""

from __future__ import annotations

import zlib

import numpy as np
from numba import njit

from ..errors import ConfigError


@njit(cache=True)
def _splitmix64_partitions(ids, num_partitions, out):
    """One loop instead of a dozen numpy passes: the store hashes every batch's new nodes."""
    for i in range(len(ids)):
        z = np.uint64(ids[i]) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        out[i] = (z ^ (z >> np.uint64(31))) % np.uint64(num_partitions)


def hash_partition(ids: np.ndarray, num_partitions: int) -> np.ndarray:
    """Partition (int32) of each external node id, identical in every process; the shape of ``ids``."""
    if num_partitions < 1:
        raise ConfigError(f"num_partitions must be >= 1, got {num_partitions}")
    ids = np.asarray(ids)
    flat = ids.reshape(-1)
    if ids.dtype == object or ids.dtype.kind == "U":
        h = np.fromiter(
            (zlib.crc32(str(s).encode()) for s in flat.tolist()), dtype=np.uint64, count=len(flat)
        )
        return (h % np.uint64(num_partitions)).astype(np.int32).reshape(ids.shape)
    out = np.empty(len(flat), np.int32)
    _splitmix64_partitions(flat.astype(np.int64, copy=False).view(np.uint64), num_partitions, out)
    return out.reshape(ids.shape)
