"""Numba kernels of the snapshot builder: an open-addressing map from ``(src, dst)`` to a pair slot.

Keys are ``src << 32 | dst`` (internal ids are below 2**31). The table holds slot numbers, -1 when empty,
and is kept at most half full by the caller, which rebuilds it (``rehash``) when it grows or when dead
slots are compacted away; slots never move otherwise, so a pair keeps its place in the output.
"""

from __future__ import annotations

import numpy as np
from numba import njit

EMPTY = -1


@njit(cache=True)
def _home(key, mask):
    h = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)
    return np.int64(h >> np.uint64(24)) & mask


@njit(cache=True)
def rehash(table, slot_key, n):
    """Fill an all-EMPTY ``table`` with slots ``0..n-1``."""
    mask = len(table) - 1
    for s in range(n):
        j = _home(slot_key[s], mask)
        while table[j] != EMPTY:
            j = (j + 1) & mask
        table[j] = s


@njit(cache=True)
def find(table, slot_key, keys, out):
    """``out[i]``: the slot of ``keys[i]``, or -1."""
    mask = len(table) - 1
    for i in range(len(keys)):
        j = _home(keys[i], mask)
        out[i] = EMPTY
        while table[j] != EMPTY:
            if slot_key[table[j]] == keys[i]:
                out[i] = table[j]
                break
            j = (j + 1) & mask


@njit(cache=True)
def add(table, slot_key, n, keys, w, dec, count, wsum, decay, out):
    """Add one instance per key (weight ``w[i]``, decay term ``dec[i]``), creating slots from ``n`` on;
    ``out[i]`` gets the slot. Returns the new slot count. Capacity for ``n + len(keys)`` slots and a table
    that stays at most half full must be ensured by the caller."""
    mask = len(table) - 1
    for i in range(len(keys)):
        j = _home(keys[i], mask)
        s = EMPTY
        while table[j] != EMPTY:
            if slot_key[table[j]] == keys[i]:
                s = table[j]
                break
            j = (j + 1) & mask
        if s == EMPTY:
            s = n
            n += 1
            table[j] = s
            slot_key[s] = keys[i]
            count[s] = 0
            wsum[s] = 0.0
            decay[s] = 0.0
        count[s] += 1
        wsum[s] += w[i]
        decay[s] += dec[i]
        out[i] = s
    return n
