"""External node ids (int64 or str) to dense internal ids, assigned in order of first appearance.

Int ids go through an open-addressing hash table in Numba (no per-id Python work on the hot path);
string ids through a dict, since hashing Python strings in Numba is slower than CPython's dict.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..errors import EventValidationError

_EMPTY = -1


@njit(cache=True)
def _slot(key, mask):
    h = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)
    return np.int64(h >> np.uint64(20)) & mask


@njit(cache=True)
def _find_or_insert(keys, vals, ids, insert, out, ext_of, next_id, first):
    """Map ``ids[first:]``; stop (returning the index) when the table reaches half load."""
    mask = len(keys) - 1
    for i in range(first, len(ids)):
        if 2 * (next_id + 1) > len(keys) or next_id >= len(ext_of):
            return next_id, i
        key = ids[i]
        j = _slot(key, mask)
        while vals[j] != _EMPTY and keys[j] != key:
            j = (j + 1) & mask
        if vals[j] != _EMPTY:
            out[i] = vals[j]
        elif insert[i]:
            keys[j] = key
            vals[j] = next_id
            ext_of[next_id] = key
            out[i] = next_id
            next_id += 1
        else:
            out[i] = -1
    return next_id, len(ids)


@njit(cache=True)
def _rehash(keys, vals, new_keys, new_vals):
    mask = len(new_keys) - 1
    for j in range(len(keys)):
        if vals[j] != _EMPTY:
            k = _slot(keys[j], mask)
            while new_vals[k] != _EMPTY:
                k = (k + 1) & mask
            new_keys[k] = keys[j]
            new_vals[k] = vals[j]


class NodeIdMap:
    """Bidirectional map; ``kind`` ("int" or "str") is fixed by the first ids it sees."""

    def __init__(self, kind: str | None = None) -> None:
        self.kind = kind
        self.size = 0
        self._keys = np.zeros(1024, np.int64)
        self._vals = np.full(1024, _EMPTY, np.int64)
        self._ext_int = np.zeros(1024, np.int64)
        self._dict: dict[str, int] = {}
        self._ext_str: list[str] = []

    def _check_kind(self, ids: np.ndarray) -> None:
        kind = "str" if ids.dtype == object else "int"
        if self.kind is None:
            self.kind = kind
        elif kind != self.kind and len(ids):
            raise EventValidationError(
                f"this stream uses {self.kind} node ids but the batch has {kind} ids;"
                " use one id type per stream"
            )

    def map(self, ids: np.ndarray, insert: np.ndarray | bool = True) -> np.ndarray:
        """Internal ids (int64); unknown ids get -1 where ``insert`` is False, else a new id."""
        self._check_kind(ids)
        n = len(ids)
        ins = np.broadcast_to(np.asarray(insert, dtype=bool), (n,))
        out = np.empty(n, np.int64)
        if self.kind == "str":
            for i, key in enumerate(ids.tolist()):
                got = self._dict.get(key)
                if got is None and ins[i]:
                    got = self._dict[key] = self.size
                    self._ext_str.append(key)
                    self.size += 1
                out[i] = -1 if got is None else got
            return out
        ids64, first = ids.astype(np.int64), 0
        while first < n:
            size, first = _find_or_insert(
                self._keys, self._vals, ids64, ins, out, self._ext_int, self.size, first
            )
            self.size = int(size)
            if first < n and self.size >= len(self._ext_int):
                self._ext_int = np.resize(self._ext_int, int(len(self._ext_int) * 1.5) + 1024)
            elif first < n:
                self._grow(2 * len(self._keys))
        return out

    def _grow(self, at_least: int) -> None:
        cap = len(self._keys)
        while cap < at_least:
            cap *= 2
        keys, vals = np.zeros(cap, np.int64), np.full(cap, _EMPTY, np.int64)
        _rehash(self._keys, self._vals, keys, vals)
        self._keys, self._vals = keys, vals

    def lookup(self, ids) -> np.ndarray:
        """Internal ids, -1 for ids never seen (also before the first insert, of either id type)."""
        if self.kind is None:
            return np.full(len(np.asarray(ids, dtype=object).reshape(-1)), -1, np.int64)
        ids = np.asarray(ids, dtype=object if self.kind == "str" else None)
        if self.kind == "int" and ids.dtype.kind not in "iu":
            return np.full(len(ids), -1, np.int64)
        return self.map(ids.astype(object) if self.kind == "str" else ids.astype(np.int64), insert=False)

    def external(self, internal) -> np.ndarray:
        internal = np.asarray(internal, dtype=np.int64)
        if self.kind == "str":
            ext = np.empty(len(self._ext_str), dtype=object)
            ext[:] = self._ext_str
            return ext[internal]
        return self._ext_int[: self.size][internal]

    def all_external(self) -> np.ndarray:
        return self.external(np.arange(self.size))

    def nbytes(self) -> int:
        if self.kind == "str":
            return sum(len(s) + 57 for s in self._ext_str) + 100 * len(self._dict)
        return self._keys.nbytes + self._vals.nbytes + self._ext_int.nbytes

    @classmethod
    def from_external(cls, kind: str | None, ext: np.ndarray) -> NodeIdMap:
        m = cls(kind)
        if kind is not None and len(ext):
            got = m.map(ext)
            if not np.array_equal(got, np.arange(len(ext))):
                raise EventValidationError("external id list holds duplicates")
        return m
