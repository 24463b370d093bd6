"""Node ids that are already dense non-negative ints, used as the internal ids themselves.

A sharded trainer's store holds its shard in the global ids its replicated index assigns (0, 1, 2, ... in
order of first appearance over the whole stream). A hash map from those ids to shard-local ones would be a
second id map of nearly every vertex on every rank (each rank's shard touches almost every vertex through
its cut edges): 40-80 bytes per vertex per rank for nothing. ``DenseIds`` has ``NodeIdMap``'s interface
and no table: internal id = external id, ``size`` is one past the largest id inserted, and every id below
``size`` counts as known (a vertex with no edges in this shard has an empty block). Ids must be ints
>= 0: a store with ``dense_ids`` refuses any other batch, as dead letters, before it maps ids.

>>> import numpy as np
>>> ids = DenseIds()
>>> src, dst = ids.map_events(np.array([0, 0]), np.array([5, 2]), np.array([7, 5]))
>>> ids.size, ids.lookup([7, 8]).tolist()
(8, [7, -1])
"""

from __future__ import annotations

import numpy as np

from .idmap import ADD, DELETE, UPDATE


class DenseIds:
    """Identity map over ``[0, size)``; ``id_type`` is always "int"."""

    id_type = "int"

    def __init__(self, size: int = 0) -> None:
        self.size = int(size)

    def map_events(self, kind: np.ndarray, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """As ``NodeIdMap.map_events``: a src enters unless the event deletes, a dst only when it adds; an id
        not entered and not below ``size`` is -1; an update's dst is its src."""
        src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
        entering = np.concatenate([src[kind != DELETE], dst[kind == ADD]])
        if len(entering):
            self.size = max(self.size, int(entering.max()) + 1)
        out_src = np.where(src < self.size, src, -1)
        out_dst = np.where(kind == UPDATE, out_src, np.where(dst < self.size, dst, -1))
        return out_src, out_dst

    def lookup(self, ids) -> np.ndarray:
        """Internal ids, -1 for ids not below ``size`` (or negative, or not integers)."""
        arr = np.asarray(ids).reshape(-1)
        if arr.dtype.kind not in "iu":
            return np.full(len(arr), -1, np.int64)
        arr = arr.astype(np.int64)
        return np.where((arr >= 0) & (arr < self.size), arr, -1)

    def external(self, internal) -> np.ndarray:
        return np.asarray(internal, np.int64)

    def all_external(self) -> np.ndarray:
        return np.arange(self.size, dtype=np.int64)

    def nbytes(self) -> int:
        return 0

    def state(self) -> dict[str, np.ndarray]:
        return {"dense_ids_size": np.array([self.size], np.int64)}

    @classmethod
    def from_state(cls, arrays: dict[str, np.ndarray]) -> DenseIds:
        return cls(int(arrays["dense_ids_size"][0]))
