"""What changed in a store since a position: its append-only logs, read in O(change).

The store appends to three logs in arrival order: edges (internal edge id = arrival rank), deletions and
node-feature versions. A consumer that maintains a derived view (snapshots, a cache) keeps a
``LogPosition`` and asks for everything after it. Deletions and versions keep their endpoints in the
store; edges do not (the adjacency holds them once per endpoint, see ``kernels``), so while a
``ChangeFeed`` is open the store journals the endpoints of new edges, trimmed to what the oldest open feed
still needs. Without a covering journal (no feed, or a position older than the journal, e.g. after a
restore) the endpoints come from one pass over the adjacency: correct, just not O(change). The store's end
of it is a ``ChangeLog``: it opens feeds, journals while one is open, and reads for them through the one
function the store gives it, so nothing here reaches into the store.

    >>> from streamgnn import EventBatch
    >>> from streamgnn.store import TemporalGraphStore
    >>> store = TemporalGraphStore()
    >>> feed = store.change_feed()
    >>> _ = store.ingest(EventBatch.from_columns(src=[1, 2], dst=[2, 3], t=[0.0, 1.0], eid=[0, 1]))
    >>> changes = feed.read()
    >>> changes.edges.src.tolist(), changes.edges.dst.tolist(), changes.end.edges
    ([0, 1], [1, 2], 2)
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numba import njit

from ..errors import ConfigError
from ..growth import grow
from .tables import EdgeTable


@dataclass(frozen=True)
class LogPosition:
    """How much of each log a reader has consumed: edges, deletions, node-feature versions."""

    edges: int = 0
    deletions: int = 0
    updates: int = 0

    def __post_init__(self) -> None:
        for name in ("edges", "deletions", "updates"):
            value = getattr(self, name)
            if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"LogPosition.{name} must be an int >= 0, got {value!r}")


@dataclass(frozen=True)
class StoreChanges:
    """The log entries in ``[start, end)``, internal ids throughout.

    ``edges``: the new edges in arrival order (``eid`` is ``start.edges ..``), with their deletion time as
    of this read (a later delete may still end them: watch ``del_*``). ``del_*``: delete events as logged
    (a delete that matched nothing is logged too). ``upd_*``: node-feature versions; ``upd_index`` is the
    version's rank in the log (the later of two versions with equal times wins), ``upd_features`` its row.
    """

    start: LogPosition
    end: LogPosition
    edges: EdgeTable
    del_src: np.ndarray
    del_dst: np.ndarray
    del_t: np.ndarray
    upd_node: np.ndarray
    upd_t: np.ndarray
    upd_index: np.ndarray
    upd_features: np.ndarray | None

    def __len__(self) -> int:
        return len(self.edges) + len(self.del_t) + len(self.upd_t)


class EdgeJournal:
    """Endpoints (internal ids) of edges ``first ..`` as they are added, for the open feeds."""

    def __init__(self, first: int) -> None:
        self.first = first
        self.src = np.zeros(0, np.int64)
        self.dst = np.zeros(0, np.int64)
        self.size = 0
        self.feeds: weakref.WeakSet[ChangeFeed] = weakref.WeakSet()

    def record(self, edge_of: np.ndarray, src: np.ndarray, dst: np.ndarray) -> bool:
        """Append the edges an ingest created (``edge_of[i] >= 0``: event i made edge ``edge_of[i]``);
        False, recording nothing, once no feed is open (the store then drops the journal)."""
        if not len(self.feeds):
            return False
        made = edge_of >= 0
        n = int(made.sum())
        if not n:
            return True
        self.src, self.dst = grow(self.src, self.size + n), grow(self.dst, self.size + n)
        # edge ids are handed out consecutively in event order, so they land at the journal's end
        self.src[self.size : self.size + n] = src[made]
        self.dst[self.size : self.size + n] = dst[made]
        self.size += n
        return True

    def covers(self, lo: int) -> bool:
        return lo >= self.first

    def endpoints(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        a, b = lo - self.first, hi - self.first
        return self.src[a:b].copy(), self.dst[a:b].copy()

    def trim(self) -> None:
        """Drop what no open feed needs any more."""
        oldest = min((f.position.edges for f in self.feeds), default=self.first + self.size)
        drop = oldest - self.first
        if drop > 0 and 2 * drop >= self.size:  # compact at most when half is dead: amortized O(1)
            keep = self.size - drop
            self.src[:keep] = self.src[drop : self.size]
            self.dst[:keep] = self.dst[drop : self.size]
            self.first, self.size = oldest, keep

    def nbytes(self) -> int:
        return self.src.nbytes + self.dst.nbytes


class ChangeFeed:
    """A reader's position in a store's logs: ``read()`` returns what was appended since and advances.

    While the feed is open (referenced and not closed) the store journals new edges' endpoints, so each
    read costs O(what changed). Not thread-safe against a concurrent ``ingest``.
    """

    def __init__(self, log: ChangeLog, position: LogPosition) -> None:
        self.log = log
        self.position = position
        self.closed = False

    def read(self) -> StoreChanges:
        if self.closed:
            raise ConfigError("this change feed is closed")
        return self.log.read(self)

    def close(self) -> None:
        """Stop journaling for this reader."""
        if not self.closed:
            self.closed = True
            self.log.forget(self)


class ChangeLog:
    """A store's end of its change feeds: the feeds it opened and, while one is open, the ``EdgeJournal``.
    ``changes_since(position)`` is the store's read of its logs after a position."""

    def __init__(self, changes_since: Callable[[LogPosition], StoreChanges]) -> None:
        self._changes_since = changes_since
        self.journal: EdgeJournal | None = None  # new edges' endpoints, while a feed is open

    def open(self, position: LogPosition, num_edges: int) -> ChangeFeed:
        """A feed reading after ``position``; the journal starts at the store's ``num_edges`` edges."""
        if self.journal is None:
            self.journal = EdgeJournal(num_edges)
        feed = ChangeFeed(self, position)
        self.journal.feeds.add(feed)
        return feed

    def record(self, edge_of: np.ndarray, src: np.ndarray, dst: np.ndarray) -> None:
        """The edges an ingest created (``EdgeJournal.record``); the journal goes once no feed is open."""
        if self.journal is not None and not self.journal.record(edge_of, src, dst):
            self.journal = None

    def endpoints(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Endpoints of edges ``lo .. hi`` from the journal, or None where it does not cover them."""
        if self.journal is not None and self.journal.covers(lo):
            return self.journal.endpoints(lo, hi)
        return None

    def read(self, feed: ChangeFeed) -> StoreChanges:
        changes = self._changes_since(feed.position)
        feed.position = changes.end
        if self.journal is not None:
            self.journal.trim()
        return changes

    def forget(self, feed: ChangeFeed) -> None:
        if self.journal is not None:
            self.journal.feeds.discard(feed)
            if not len(self.journal.feeds):
                self.journal = None

    def nbytes(self) -> int:
        return 0 if self.journal is None else self.journal.nbytes()


@njit(cache=True)
def pair_edges(start, deg, pool, src, dst, out_pair, out_edge):
    """Every edge ``src[i] -> dst[i]`` (scanning ``src[i]``'s block): fills ``out_*``, returns the count.

    ``out_*`` must hold ``sum(deg[src])`` rows (an upper bound)."""
    n = 0
    for i in range(len(src)):
        s = start[src[i]]
        for j in range(deg[src[i]]):
            c = pool[s + j, 1]
            if c >= 0 and pool[s + j, 0] == dst[i]:
                out_pair[n] = i
                out_edge[n] = c
                n += 1
    return n
