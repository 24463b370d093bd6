"""The one growth policy (streamgnn.growth) that every append-only array of the package uses."""

from __future__ import annotations

import doctest
import math

import numpy as np

import streamgnn.growth
from streamgnn.growth import GROWTH, SLACK, grow, grown_size


def test_module_examples_run():
    result = doctest.testmod(streamgnn.growth)
    assert result.attempted > 0 and result.failed == 0


def test_growing_keeps_rows_fills_the_rest_and_keeps_trailing_dimensions():
    a = np.arange(6, dtype=np.float32).reshape(3, 2)
    b = grow(a, 4, fill=np.inf)
    assert b.shape == (grown_size(3, 4), 2) and b.dtype == np.float32
    assert np.array_equal(b[:3], a) and np.isinf(b[3:]).all()
    assert grow(b, len(b)) is b


def test_one_row_at_a_time_each_row_is_copied_a_bounded_number_of_times():
    arr, copied, reallocations = np.zeros(0, np.int64), 0, 0
    for n in range(1, 200_001):
        before = arr
        arr = grow(arr, n)
        if arr is not before:
            copied += len(before)
            reallocations += 1
    assert len(arr) >= 200_000
    assert copied <= 200_000 / (GROWTH - 1)  # amortized O(1) per appended row
    assert reallocations <= 2 + math.log(200_000 / SLACK) / math.log(GROWTH)
