"""External node ids (int64 or str) to dense internal ids, assigned in order of first appearance.

Int ids go through an open-addressing hash table in Numba (no per-id Python work on the hot path);
string ids through a dict, since hashing Python strings in Numba is slower than CPython's dict.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..errors import EventValidationError
from ..events import EventKind
from ..growth import grow

_EMPTY = -1
ADD, DELETE, UPDATE = (int(k) for k in EventKind)


@njit(cache=True)
def _slot(key, mask):
    h = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)
    return np.int64(h >> np.uint64(20)) & mask


@njit(cache=True)
def _get(keys, vals, ext_of, key, insert, next_id):
    """(internal id of ``key`` or -1, next free id), inserting ``key`` if absent and ``insert``.

    Plain ``@njit`` on purpose: LLVM inlines it, while Numba's ``inline="always"`` made the loops
    calling it 7x slower.
    """
    mask = len(keys) - 1
    j = _slot(key, mask)
    while vals[j] != _EMPTY and keys[j] != key:
        j = (j + 1) & mask
    if vals[j] != _EMPTY:
        return vals[j], next_id
    if not insert:
        return -1, next_id
    keys[j] = key
    vals[j] = next_id
    ext_of[next_id] = key
    return next_id, next_id + 1


@njit(cache=True)
def _full(keys, ext_of, next_id):
    """No room for one more id: the table would pass half load, or the reverse map is full."""
    return 2 * (next_id + 1) > len(keys) or next_id >= len(ext_of)


@njit(cache=True)
def _find_or_insert(keys, vals, ids, insert, out, ext_of, next_id, first):
    """Map ``ids[first:]``; stop (returning the index) when the table reaches half load."""
    for i in range(first, len(ids)):
        if _full(keys, ext_of, next_id):
            return next_id, i
        out[i], next_id = _get(keys, vals, ext_of, ids[i], insert[i], next_id)
    return next_id, len(ids)


@njit(cache=True)
def _map_events(keys, vals, kind, src, dst, out_src, out_dst, ext_of, next_id, first):
    """``_find_or_insert`` over src and dst interleaved (position ``2 i + side``), inserting a src unless
    deleting and a dst when adding; an update's dst is its src."""
    for p in range(first, 2 * len(kind)):
        if _full(keys, ext_of, next_id):
            return next_id, p
        i = p >> 1
        if p & 1 == 0:
            out_src[i], next_id = _get(keys, vals, ext_of, src[i], kind[i] != DELETE, next_id)
        elif kind[i] == UPDATE:
            out_dst[i] = out_src[i]
        else:
            out_dst[i], next_id = _get(keys, vals, ext_of, dst[i], kind[i] == ADD, next_id)
    return next_id, 2 * len(kind)


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
    """Bidirectional map; ``id_type`` ("int" or "str") is fixed by the first ids it sees (an event's
    ``kind`` is another thing: add, delete, update)."""

    def __init__(self, id_type: str | None = None) -> None:
        self.id_type = id_type
        self.size = 0
        self._keys = np.zeros(1024, np.int64)
        self._vals = np.full(1024, _EMPTY, np.int64)
        self._ext_int = np.zeros(1024, np.int64)
        self._dict: dict[str, int] = {}
        self._ext_str: list[str] = []

    def _check_id_type(self, ids: np.ndarray) -> None:
        id_type = "str" if ids.dtype == object else "int"
        if self.id_type is None:
            self.id_type = id_type
        elif id_type != self.id_type and len(ids):
            raise EventValidationError(
                f"this stream uses {self.id_type} node ids but the batch has {id_type} ids;"
                " use one id type per stream"
            )

    def map(self, ids: np.ndarray, insert: np.ndarray | bool = True) -> np.ndarray:
        """Internal ids (int64); unknown ids get -1 where ``insert`` is False, else a new id."""
        self._check_id_type(ids)
        n = len(ids)
        ins = np.broadcast_to(np.asarray(insert, dtype=bool), (n,))
        out = np.empty(n, np.int64)
        if self.id_type == "str":
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
            if first < n:
                self._make_room()
        return out

    def map_events(self, kind: np.ndarray, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Internal (src, dst) of events: ids enter in order of appearance (src before dst), a src
        unless the event deletes, a dst only when it adds; unknown ids are -1; an update's dst is its src.
        """
        self._check_id_type(src)
        n = len(kind)
        if self.id_type == "str":
            both = np.empty(2 * n, dtype=object)
            both[0::2], both[1::2] = src, dst
            insert = np.empty(2 * n, bool)
            insert[0::2] = kind != DELETE
            insert[1::2] = kind == ADD
            mapped = self.map(both, insert)
            return mapped[0::2], np.where(kind == UPDATE, mapped[0::2], mapped[1::2])
        out_src, out_dst = np.empty(n, np.int64), np.empty(n, np.int64)
        src64, dst64, first = src.astype(np.int64, copy=False), dst.astype(np.int64, copy=False), 0
        while first < 2 * n:
            size, first = _map_events(
                self._keys, self._vals, kind, src64, dst64, out_src, out_dst, self._ext_int, self.size, first
            )
            self.size = int(size)
            if first < 2 * n:
                self._make_room()
        return out_src, out_dst

    def _make_room(self) -> None:
        """Room for the id a kernel stopped at: the reverse map is full or the table at half load."""
        if self.size >= len(self._ext_int):
            self._ext_int = grow(self._ext_int, self.size + 1)
        else:
            self._grow(2 * len(self._keys))

    def _grow(self, at_least: int) -> None:
        cap = len(self._keys)
        while cap < at_least:
            cap *= 2
        keys, vals = np.zeros(cap, np.int64), np.full(cap, _EMPTY, np.int64)
        _rehash(self._keys, self._vals, keys, vals)
        self._keys, self._vals = keys, vals

    def lookup(self, ids) -> np.ndarray:
        """Internal ids, -1 for ids never seen (also before the first insert, of either id type)."""
        if self.id_type is None:
            return np.full(len(np.asarray(ids, dtype=object).reshape(-1)), -1, np.int64)
        ids = np.asarray(ids, dtype=object if self.id_type == "str" else None)
        if self.id_type == "str":
            return self.map(ids.astype(object), insert=False)
        if ids.dtype.kind not in "iuf":
            return np.full(len(ids), -1, np.int64)
        if ids.dtype.kind == "u":  # beyond int64: no stored id, and a cast would wrap onto one
            ok = ids <= np.iinfo(np.int64).max
        elif ids.dtype.kind == "f":  # integral floats name ints, as ingest reads them
            ok = np.isfinite(ids) & (ids == np.round(ids)) & (np.abs(ids) < 2.0**63)
        else:
            return self.map(ids.astype(np.int64, copy=False), insert=False)
        out = self.map(np.where(ok, ids, 0).astype(np.int64), insert=False)
        out[~ok] = -1
        return out

    def external(self, internal) -> np.ndarray:
        internal = np.asarray(internal, dtype=np.int64)
        if self.id_type == "str":
            ext = np.empty(len(self._ext_str), dtype=object)
            ext[:] = self._ext_str
            return ext[internal]
        return self._ext_int[: self.size][internal]

    def all_external(self) -> np.ndarray:
        return self.external(np.arange(self.size))

    def nbytes(self) -> int:
        if self.id_type == "str":
            return sum(len(s) + 57 for s in self._ext_str) + 100 * len(self._dict)
        return self._keys.nbytes + self._vals.nbytes + self._ext_int.nbytes

    def state(self) -> dict[str, np.ndarray]:
        """The external ids as plain arrays (checkpoints): ``ext_int``, or UTF-8 ``ext_str_bytes`` cut at
        ``ext_str_offsets``."""
        if self.id_type == "str":
            encoded = [s.encode() for s in self.all_external().tolist()]
            return {
                "ext_str_offsets": np.cumsum([0] + [len(b) for b in encoded], dtype=np.int64),
                # writable (a bytearray's): a sharded checkpoint hands these arrays to torch, which warns on
                # a read-only one
                "ext_str_bytes": np.frombuffer(bytearray(b"".join(encoded)), np.uint8),
            }
        return {"ext_int": self.all_external().astype(np.int64)}

    @classmethod
    def from_state(cls, arrays: dict[str, np.ndarray], id_type: str | None) -> NodeIdMap:
        """The map of ``id_type`` that ``state()`` gave; ValueError (or KeyError) where the arrays are
        malformed."""
        if id_type == "str":
            offs, raw = arrays["ext_str_offsets"], arrays["ext_str_bytes"].tobytes()
            ext = np.empty(len(offs) - 1, dtype=object)
            ext[:] = [raw[offs[i] : offs[i + 1]].decode() for i in range(len(offs) - 1)]
        else:
            ext = arrays.get("ext_int", np.zeros(0, np.int64))
            if ext.ndim != 1 or ext.dtype != np.int64:
                raise ValueError(f"ext_int must be 1-D int64, got {ext.dtype} {ext.shape}")
        return cls.from_external(id_type, ext)

    @classmethod
    def from_external(cls, id_type: str | None, ext: np.ndarray) -> NodeIdMap:
        m = cls(id_type)
        if id_type is not None and len(ext):
            got = m.map(ext)
            if not np.array_equal(got, np.arange(len(ext))):
                raise EventValidationError("external id list holds duplicates")
        return m
