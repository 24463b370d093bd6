"""Seen-event-id set: a growable bitmap over non-negative ids, a Python set for the rest.

Event ids from a log (Kafka offsets, row numbers, sequence numbers) are dense, so the bitmap costs
about one bit per event, where a hash set would cost 16+ bytes. Ids the bitmap would have to grow
too far for (huge or negative ones) fall back to the set.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..growth import grow

MIN_BYTES = 1 << 16
MAX_BYTES_PER_EVENT = 2


@njit(cache=True)
def _test_and_set(bits, eids, keep):
    """Sequential test-and-set, so the first of repeated ids in one batch wins. -1 marks outliers."""
    limit = 8 * len(bits)
    outliers = 0
    for i in range(len(eids)):
        e = eids[i]
        if e < 0 or e >= limit:
            keep[i] = -1
            outliers += 1
            continue
        mask = np.uint8(1 << (e & 7))
        if bits[e >> 3] & mask:
            keep[i] = 0
        else:
            bits[e >> 3] |= mask
            keep[i] = 1
    return outliers


@njit(cache=True)
def _set_if_all_new(bits, eids):
    """Set every id's bit if all lie in the bitmap, unseen and distinct; else leave ``bits`` as found."""
    limit = 8 * len(bits)
    for i in range(len(eids)):
        e = eids[i]
        if e < 0 or e >= limit or bits[e >> 3] & np.uint8(1 << (e & 7)):
            for j in range(i):
                bits[eids[j] >> 3] &= ~np.uint8(1 << (eids[j] & 7))
            return False
        bits[e >> 3] |= np.uint8(1 << (e & 7))
    return True


class SeenIds:
    def __init__(self) -> None:
        self.bits = np.zeros(MIN_BYTES, np.uint8)
        self.outliers: set[int] = set()
        self.count = 0

    def first_unseen(self, eids: np.ndarray) -> np.ndarray:
        """Mask of events to process (unseen, first of their id in ``eids``); marks them seen."""
        if len(eids):
            top = int(eids.max())
            budget = max(MIN_BYTES, MAX_BYTES_PER_EVENT * (self.count + len(eids)))
            if len(self.bits) * 8 <= top < budget * 8:
                self._grow(top // 8 + 1)
        keep = np.empty(len(eids), np.int8)
        if _test_and_set(self.bits, eids, keep):
            for i in np.flatnonzero(keep < 0).tolist():
                e = int(eids[i])
                keep[i] = e not in self.outliers
                self.outliers.add(e)
        mask = keep.astype(bool)
        self.count += int(mask.sum())
        return mask

    def mark_new(self, eids: np.ndarray) -> bool:
        """``first_unseen`` for the common batch, where it would keep every id (and leave the bitmap's
        size alone): marks them and says True; otherwise changes nothing and says False."""
        if not _set_if_all_new(self.bits, eids):
            return False
        self.count += len(eids)
        return True

    def _grow(self, need: int) -> None:
        """Widen the bitmap to at least ``need`` bytes and move the outliers it now covers into it (an id
        lives in one place)."""
        self.bits = grow(self.bits, need)
        covered = [e for e in self.outliers if 0 <= e < 8 * len(self.bits)]
        for e in covered:
            self.bits[e >> 3] |= np.uint8(1 << (e & 7))
            self.outliers.discard(e)

    def contains(self, eids: np.ndarray) -> np.ndarray:
        """Which ids were seen, without marking anything."""
        eids = np.asarray(eids, np.int64)
        out = np.zeros(len(eids), bool)
        inside = (eids >= 0) & (eids < 8 * len(self.bits))
        e = eids[inside]
        out[inside] = ((self.bits[e >> 3] >> (e & 7).astype(np.uint8)) & 1).astype(bool)
        if self.outliers:
            out[~inside] = [int(x) in self.outliers for x in eids[~inside]]
        return out

    def __len__(self) -> int:
        return self.count

    def nbytes(self) -> int:
        return self.bits.nbytes + 72 * len(self.outliers)

    def state(self) -> dict[str, np.ndarray]:
        """The set in a canonical form: a bitmap of the ids in ``[0, cut)`` (``seen_bits``), trimmed after
        its last set byte, and the other ids sorted (``seen_outliers``), where ``cut`` depends only on the
        set's size. Where an id lives in memory depends on the order ids came in (the bitmap grows with the
        count), so equal sets could otherwise give different bytes (batch boundaries, a checkpoint restored
        mid-stream)."""
        cut = max(MIN_BYTES, MAX_BYTES_PER_EVENT * self.count)
        bits = np.zeros(cut, np.uint8)
        n = min(cut, len(self.bits))
        bits[:n] = self.bits[:n]
        beyond = np.flatnonzero(np.unpackbits(self.bits[n:], bitorder="little")) + 8 * n
        rest = [e for e in self.outliers if not 0 <= e < 8 * cut]
        for e in self.outliers:
            if 0 <= e < 8 * cut:
                bits[e >> 3] |= np.uint8(1 << (e & 7))
        nz = np.flatnonzero(bits)
        end = int(nz[-1]) + 1 if len(nz) else 0
        return {"seen_bits": bits[:end], "seen_outliers": np.array(sorted(rest + beyond.tolist()), np.int64)}

    @classmethod
    def from_state(cls, arrays: dict[str, np.ndarray]) -> SeenIds:
        """The set ``state()`` gave (other arrays beside its two are left alone)."""
        bits, outliers = arrays["seen_bits"], arrays["seen_outliers"]
        s = cls()
        s.outliers = set(outliers.tolist())
        s.bits = np.zeros(0, np.uint8)
        s._grow(max(MIN_BYTES, len(bits)))
        s.bits[: len(bits)] |= bits
        s.count = int(np.unpackbits(bits).sum()) + len(s.outliers)
        return s
