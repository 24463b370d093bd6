"""PairTable: the live ``(src, dst)`` pairs of a snapshot, each in a stable slot with its aggregates.

A snapshot's edges are pairs, not events: a pair attacked 40 times in a day is one edge of weight 40. The
table keeps per slot the instance count, the sum of edge weights and the decayed sum, so adding the events
between two snapshots costs O(events). Dead slots (count 0) stay in place until they are many, then one
compaction drops them; between compactions a pair keeps its position in the output.

    >>> import numpy as np
    >>> t = PairTable()
    >>> t.add(np.array([0, 0, 1]), np.array([1, 1, 2]), np.ones(3), np.zeros(3)).tolist()
    [0, 0, 1]
    >>> t.count[: t.n].tolist(), t.endpoints()[1].tolist()
    ([2, 1], [1, 2])
"""

from __future__ import annotations

import numpy as np

from ..growth import grown_size
from . import kernels as K

_LOW = (1 << 32) - 1


def pair_keys(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """One int64 per pair (internal ids are below 2**31), ordered by (src, dst)."""
    return (np.asarray(src, np.int64) << 32) | np.asarray(dst, np.int64)


def key_pairs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return keys >> 32, keys & _LOW


class PairTable:
    def __init__(self) -> None:
        self.n = 0
        self.key = np.zeros(0, np.int64)
        self.count = np.zeros(0, np.int64)
        self.wsum = np.zeros(0, np.float64)
        self.decay = np.zeros(0, np.float64)
        self.table = np.full(16, K.EMPTY, np.int64)

    def _reserve(self, extra: int) -> None:
        need = self.n + extra
        if need > len(self.key):
            cap = grown_size(len(self.key), need)
            for name in ("key", "count", "wsum", "decay"):
                old = getattr(self, name)
                new = np.zeros(cap, old.dtype)
                new[: self.n] = old[: self.n]
                setattr(self, name, new)
        if 2 * need > len(self.table):
            self._rehash(need)

    def _rehash(self, need: int) -> None:
        size = 16
        while size < 4 * need:
            size *= 2
        self.table = np.full(size, K.EMPTY, np.int64)
        K.rehash(self.table, self.key, self.n)

    def add(self, src: np.ndarray, dst: np.ndarray, w: np.ndarray, dec: np.ndarray) -> np.ndarray:
        """Count one instance per row; returns each row's slot (new pairs get new slots, in row order)."""
        keys = pair_keys(src, dst)
        self._reserve(len(keys))
        out = np.empty(len(keys), np.int64)
        self.n = K.add(
            self.table, self.key, self.n, keys, np.asarray(w, np.float64), np.asarray(dec, np.float64),
            self.count, self.wsum, self.decay, out,
        )  # fmt: skip
        return out

    def find(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Slots of these pairs, -1 for a pair never added (or compacted away)."""
        keys = pair_keys(src, dst)
        out = np.empty(len(keys), np.int64)
        K.find(self.table, self.key, keys, out)
        return out

    def endpoints(self) -> tuple[np.ndarray, np.ndarray]:
        return key_pairs(self.key[: self.n])

    def live(self) -> np.ndarray:
        return self.count[: self.n] > 0

    def compact(self) -> np.ndarray | None:
        """Drop dead slots once they outnumber live ones (amortized O(1) per slot); returns the old slot ->
        new slot map (-1: dropped) when it compacted, else None."""
        live = self.live()
        dead = self.n - int(live.sum())
        if dead <= max(self.n - dead, 64):
            return None
        remap = np.full(self.n, -1, np.int64)
        remap[live] = np.arange(self.n - dead)
        for name in ("key", "count", "wsum", "decay"):
            arr = getattr(self, name)
            arr[: self.n - dead] = arr[: self.n][live]
        self.n -= dead
        self._rehash(self.n)
        return remap

    def nbytes(self) -> int:
        return sum(getattr(self, k).nbytes for k in ("key", "count", "wsum", "decay", "table"))

    def state(self) -> dict[str, np.ndarray]:
        return {"key": self.key[: self.n], "count": self.count[: self.n], "wsum": self.wsum[: self.n],
                "decay": self.decay[: self.n]}  # fmt: skip

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray]) -> PairTable:
        table = cls()
        n = len(state["key"])
        table._reserve(n)
        for name in ("key", "count", "wsum", "decay"):
            getattr(table, name)[:n] = state[name]
        table.n = n
        table._rehash(n)
        return table
