"""Numba kernels of negative sampling: distinct draws from candidate lists, minus per-event exclusions.

Event ``i`` fills ``out[i]`` first from its own candidate run ``cand[cand_lo[i]:cand_hi[i]]`` (up to
``n_first[i]`` entries), then from the shared ``pool``, never repeating an entry and never taking one
of ``excl[excl_lo[i]:excl_hi[i]]`` (the positives "now"); ``-1`` pads what cannot be filled. Draws
are rejection sampling, uniform over what is still eligible; a run where rejections pile up (few
eligible entries left) switches to listing the eligible entries once. Event ``i`` draws from its own
stream ``mix(key, i)``, so its negatives do not depend on the other events in the call.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .rng import mix, randint


@njit(cache=True, inline="always")
def _holds(arr, lo, hi, x):
    j = lo
    while j < hi and arr[j] != x:
        j += 1
    return j < hi


@njit(cache=True, inline="always")
def _taken(x, row, m, excl, e_lo, e_hi):
    return _holds(row, 0, m, x) or _holds(excl, e_lo, e_hi, x)


@njit(cache=True)
def _draw(arr, lo, hi, upto, row, m, excl, e_lo, e_hi, state):
    """Append distinct eligible entries of ``arr[lo:hi]`` to ``row[:m]`` until ``upto``; return (m, state)."""
    n = hi - lo
    if n <= 0:
        return m, state
    misses = 0
    while m < upto and misses < 16 + 2 * upto:
        state, r = randint(state, n)
        x = arr[lo + r]
        if _taken(x, row, m, excl, e_lo, e_hi):
            misses += 1
        else:
            row[m] = x
            m += 1
    if m < upto:
        eligible = np.empty(n, np.int64)
        c = 0
        for j in range(lo, hi):
            if not _taken(arr[j], row, m, excl, e_lo, e_hi):
                eligible[c] = arr[j]
                c += 1
        while m < upto and c > 0:
            state, r = randint(state, c)
            row[m] = eligible[r]
            m += 1
            c -= 1
            eligible[r] = eligible[c]
    return m, state


@njit(cache=True)
def draw_negatives(cand, cand_lo, cand_hi, n_first, pool, excl, excl_lo, excl_hi, key, out):
    """Fill ``out`` (int64[n_events, num]) as described in the module docstring."""
    num = out.shape[1]
    for i in range(out.shape[0]):
        state = mix(key, i)
        row = out[i]
        m, state = _draw(
            cand, cand_lo[i], cand_hi[i], min(n_first[i], num), row, 0, excl, excl_lo[i], excl_hi[i], state
        )
        m, state = _draw(pool, 0, len(pool), num, row, m, excl, excl_lo[i], excl_hi[i], state)
        row[m:] = -1
