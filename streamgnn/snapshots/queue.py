"""TimeQueue: events read from the store's logs but not yet due, kept in (time, log index) order.

The store's logs are in arrival order; snapshots need time order. Events arrive at most the allowed
lateness out of order, so the queue holds only what lies ahead of the current snapshot (plus that
lateness): it is small in a live stream, and the whole history once when a builder starts on a full store.
Popping a due prefix is a slice, and dead rows are dropped in one copy once they are half the buffer.

    >>> import numpy as np
    >>> q = TimeQueue()
    >>> q.push({"t": np.array([3.0, 1.0, 2.0]), "id": np.array([0, 1, 2]), "v": np.array([30, 10, 20])})
    >>> q.pop(2.0, inclusive=True)["v"].tolist(), len(q)
    ([10, 20], 1)
"""

from __future__ import annotations

import numpy as np


class TimeQueue:
    def __init__(self) -> None:
        self.cols: dict[str, np.ndarray] = {}
        self.head = 0

    def __len__(self) -> int:
        return len(self.cols["t"]) - self.head if self.cols else 0

    def push(self, cols: dict[str, np.ndarray]) -> None:
        """Add rows (columns ``t`` and ``id`` order them; other columns ride along)."""
        if not len(cols["t"]):
            return
        if not len(self):
            merged = cols
        else:
            merged = {k: np.concatenate([v[self.head :], cols[k]]) for k, v in self.cols.items()}
        t, i = merged["t"], merged["id"]
        if len(t) > 1 and not _sorted(t, i):
            order = np.lexsort((i, t))
            merged = {k: v[order] for k, v in merged.items()}
        self.cols, self.head = merged, 0

    def pop(self, t: float, *, inclusive: bool) -> dict[str, np.ndarray]:
        """The rows with time <= ``t`` (``inclusive``) or < ``t``, removed from the queue."""
        if not len(self):
            return {}
        times = self.cols["t"]
        end = self.head + int(np.searchsorted(times[self.head :], t, "right" if inclusive else "left"))
        out = {k: v[self.head : end] for k, v in self.cols.items()}
        self.head = end
        if 2 * self.head > len(times):  # copy the rest once half is dead, so memory follows the queue
            self.cols = {k: v[self.head :].copy() for k, v in self.cols.items()}
            self.head = 0
        return out

    def peek(self, t: float) -> dict[str, np.ndarray]:
        """The rows with time <= ``t``, left in the queue."""
        if not len(self):
            return {}
        end = self.head + int(np.searchsorted(self.cols["t"][self.head :], t, "right"))
        return {k: v[self.head : end] for k, v in self.cols.items()}

    def state(self, prefix: str) -> dict[str, np.ndarray]:
        return {f"{prefix}{k}": v[self.head :] for k, v in self.cols.items()}

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray], prefix: str) -> TimeQueue:
        q = cls()
        cols = {k[len(prefix) :]: np.array(v) for k, v in state.items() if k.startswith(prefix)}
        if cols:
            q.cols = cols
        return q

    def nbytes(self) -> int:
        return sum(v.nbytes for v in self.cols.values())


def _sorted(t: np.ndarray, i: np.ndarray) -> bool:
    dt = np.diff(t)
    return bool(((dt > 0) | ((dt == 0) & (np.diff(i) > 0))).all())
