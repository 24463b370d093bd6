"""Counter-based random numbers for kernels: a draw depends only on (key, index), never on a shared state.

Each root (or event) seeds its own splitmix64 stream from ``mix(key, index)``, so results do not depend
on thread count, scheduling or how roots were batched, which numba's global RNG cannot promise.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


@njit(cache=True, inline="always")
def _finalize(z):
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@njit(cache=True, inline="always")
def mix(key, index):
    """A well-spread 64-bit state for item ``index`` of the stream ``key``."""
    return _finalize(np.uint64(key) ^ _finalize(np.uint64(index) * _GOLDEN + _GOLDEN))


@njit(cache=True, inline="always")
def randint(state, n):
    """``(next_state, r)`` with ``r`` uniform in ``[0, n)`` (n >= 1): Lemire's multiply-shift, no division."""
    state = state + _GOLDEN
    z = _finalize(state)
    if n >> 32:  # beyond 32 bits the product would overflow; the modulo bias is below 2**-31 there
        return state, np.int64(z % np.uint64(n))
    return state, np.int64(((z >> np.uint64(32)) * np.uint64(n)) >> np.uint64(32))


@njit(cache=True)
def stream_key(seed, a):
    """Key of the random stream named by ``(seed, a)``, e.g. (seed, call counter)."""
    return mix(np.uint64(seed), np.uint64(a))


def key_of(seed: int, a: int) -> np.uint64:
    """``stream_key`` for integers of any sign and type (Python or numpy; taken modulo 2**64)."""
    m = (1 << 64) - 1
    return np.uint64(stream_key(np.uint64(int(seed) & m), np.uint64(int(a) & m)))
