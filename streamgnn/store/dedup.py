"""Seen-event-id set as a paged bitmap: one bit per id, pages allocated where ids fall.

Event ids from a log (Kafka offsets, row numbers, sequence numbers) are dense, so this costs about
one bit per event, where a hash set would cost 16+ bytes. Sparse random ids still work, at a page each.
"""

from __future__ import annotations

import numpy as np

PAGE_BITS = 16
PAGE_MASK = (1 << PAGE_BITS) - 1


class SeenIds:
    def __init__(self) -> None:
        self.pages: dict[int, np.ndarray] = {}

    def first_unseen(self, eids: np.ndarray) -> np.ndarray:
        """Mask of events to process (unseen, first of their id in ``eids``); marks them seen."""
        keep = np.zeros(len(eids), bool)
        if not len(eids):
            return keep
        _, first = np.unique(eids, return_index=True)
        keep[first] = True
        page_of = eids >> PAGE_BITS
        bit = (eids & PAGE_MASK).astype(np.int64)
        for page in np.unique(page_of[first]).tolist():
            in_page = keep & (page_of == page)
            arr = self.pages.get(page)
            if arr is None:
                arr = self.pages[page] = np.zeros(1 << (PAGE_BITS - 3), np.uint8)
            b = bit[in_page]
            seen = (arr[b >> 3] >> (b & 7).astype(np.uint8)) & 1
            idx = np.flatnonzero(in_page)
            keep[idx[seen.astype(bool)]] = False
            b_new = b[~seen.astype(bool)]
            np.bitwise_or.at(arr, b_new >> 3, (1 << (b_new & 7)).astype(np.uint8))
        return keep

    def __len__(self) -> int:
        return int(sum(int(np.unpackbits(p).sum()) for p in self.pages.values()))

    def nbytes(self) -> int:
        return sum(p.nbytes + 100 for p in self.pages.values())

    def to_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        keys = np.array(sorted(self.pages), dtype=np.int64)
        data = (
            np.stack([self.pages[k] for k in keys.tolist()])
            if len(keys)
            else np.zeros((0, 1 << 13), np.uint8)
        )
        return keys, data

    @classmethod
    def from_arrays(cls, keys: np.ndarray, data: np.ndarray) -> SeenIds:
        s = cls()
        s.pages = {int(k): data[i].copy() for i, k in enumerate(keys)}
        return s
