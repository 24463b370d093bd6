"""EdgeBank's pairs (``train.edgebank``): each observed batch is sorted alone and merged into the sorted
pairs in linear time. On random streams (repeated pairs, times out of order, batches of any size, both
kinds of bank, a sharded rank's ``holds``) it answers exactly as the bank that re-sorted its unmerged pairs
with every batch (``ResortingBank``, the code it replaced), and a saved ``state`` is never written."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamgnn.train import edgebank
from streamgnn.train.edgebank import EdgeBank


class ResortingBank(EdgeBank):
    """The replaced ``observe``: every batch re-sorts the unmerged pairs with it, a merge re-sorts all."""

    def observe(self, src, dst, t, feat) -> None:
        if not len(src):
            return
        self._t_min = min(self._t_min, float(np.min(t)))
        self._t_max = max(self._t_max, float(np.max(t)))
        src, dst, t = np.asarray(src, np.int64), np.asarray(dst, np.int64), np.asarray(t, np.float64)
        if self.holds is not None:
            held = self.holds(src)
            src, dst, t = src[held], dst[held], t[held]
        keys = np.concatenate([self._new_keys, (src << 32) | dst])
        last = np.concatenate([self._new_last, t])
        self._new_keys, self._new_last = edgebank._latest(keys, last)
        if len(self._new_keys) > max(edgebank._MERGE_MIN, len(self._keys) // 8):
            self._keys, self._last = edgebank._latest(
                np.concatenate([self._keys, self._new_keys]), np.concatenate([self._last, self._new_last])
            )
            self._new_keys, self._new_last = self._new_keys[:0], self._new_last[:0]


def _pairs(bank: EdgeBank) -> dict[int, float]:
    """Every pair the bank holds, with its latest time (main and side arrays)."""
    held: dict[int, float] = {}
    for keys, last in ((bank._keys, bank._last), (bank._new_keys, bank._new_last)):
        assert (np.diff(keys) > 0).all()  # sorted, distinct
        for k, x in zip(keys.tolist(), last.tolist(), strict=True):
            held[k] = max(held.get(k, -math.inf), x)
    return held


batches = st.lists(
    st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30), st.integers(0, 50)), max_size=40),
    min_size=1,
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(batches=batches, merge_min=st.sampled_from([1, 4, 4096]), odd_sources=st.booleans())
def test_the_merged_bank_answers_as_the_resorting_one(batches, merge_min, odd_sources):
    with pytest.MonkeyPatch.context() as patch:  # (1 and 4: a merge into the main pairs often)
        patch.setattr(edgebank, "_MERGE_MIN", merge_min)
        _compare(batches, odd_sources)


def _compare(batches: list, odd_sources: bool) -> None:
    holds = (lambda s: s % 2 == 1) if odd_sources else None
    kinds = [(EdgeBank(w, holds), ResortingBank(w, holds)) for w in (None, 0.3)]
    grid = np.array([(s, d) for s in range(-1, 32) for d in range(-1, 32)]).T
    saved = None
    for batch in batches:
        cols = np.array(batch, np.int64).reshape(-1, 3).T
        src, dst, t = cols[0], cols[1], cols[2].astype(np.float64)
        for new, old in kinds:
            new.observe(src, dst, t, None)
            old.observe(src, dst, t, None)
            assert _pairs(new) == _pairs(old)
            np.testing.assert_array_equal(new.seen(*grid), old.seen(*grid))
        if saved is None:  # a state taken mid-stream: its arrays are never written, only replaced
            saved = kinds[0][0].state()
            kept = [a.copy() for a in saved[:4]]
    for array, copy in zip(saved[:4], kept, strict=True):
        np.testing.assert_array_equal(array, copy)
