"""A cache of other ranks' memory rows, invalidated by version: a row that has not changed is not sent again.

Every owned row carries a version that moves whenever the row or its pending messages change
(``OwnedMemory``). A rank asking for remote rows sends, with each id, the version it holds (-1: none); the
owner answers only the rows whose version moved, and the asker takes the others from here. The answer is
always the owner's current state, so the cache can only save bytes, never serve a stale row. Entries are
kept least-recently-used up to ``capacity`` rows.

>>> import numpy as np
>>> cache = RowCache(capacity=2)
>>> cache.lookup(np.array([4, 5]), with_messages=False)[0].tolist()
[-1, -1]
>>> cache.put(4, 3, np.zeros(2, np.float32), 1.5, None)  # a committed row, without its messages
>>> cache.lookup(np.array([4, 5]), False)[0].tolist(), cache.lookup(np.array([4]), True)[0].tolist()
([3, -1], [-1])
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np


class RowCache:
    """``gid -> (version, memory row, last update, pending messages)`` of remote vertices, LRU-bounded."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.entries: OrderedDict[int, tuple] = OrderedDict()
        self.hits = self.misses = 0

    def lookup(self, gids: np.ndarray, with_messages: bool) -> tuple[np.ndarray, list]:
        """The version held for each id (-1: not cached, or cached without the pending messages asked for)
        and the entries themselves, ``(version, memory, last_update, messages)`` or None: the caller keeps
        them, since the rows it caches next may evict these before it reads them."""
        out, found = np.full(len(gids), -1, np.int64), []
        for i, g in enumerate(gids.tolist()):
            e = self.entries.get(g)
            if e is not None and (e[3] is not None or not with_messages):
                out[i] = e[0]
                self.entries.move_to_end(g)
            else:
                e = None
            found.append(e)
        return out, found

    def put(self, gid: int, version: int, memory: np.ndarray, last: float, messages: tuple | None) -> None:
        """Hold (or replace) an id's row; ``messages``: its pending ``(other, t, feat, from_src)`` arrays, or
        None when only the committed row was fetched."""
        if self.capacity <= 0:
            return
        self.misses += 1
        self.entries[gid] = (version, memory, last, messages)
        self.entries.move_to_end(gid)
        while len(self.entries) > self.capacity:
            self.entries.popitem(last=False)

    def nbytes(self) -> int:
        """Bytes of the cached arrays (entry bookkeeping excluded)."""
        total = 0
        for _, memory, _, messages in self.entries.values():
            total += memory.nbytes + 16 + sum(m.nbytes for m in messages or ())
        return total
