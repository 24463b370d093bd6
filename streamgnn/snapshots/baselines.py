"""Memorization baselines for snapshot link prediction, scored on the same pairs as the model.

``SnapshotEdgeBank`` (Poursafaei et al., NeurIPS 2022): a pair scores 1 if it was an edge of an earlier
snapshot (all of them, or the last ``window``), else 0. ``SnapshotPreferentialAttachment``: the product of
the two nodes' degrees in the union of the snapshots so far. Both see exactly what the model sees when it
predicts the links after snapshot ``k``: snapshots ``0..k``. Named for snapshots so a continuous-time
EdgeBank (over events, in ``streamgnn.train``) can sit beside them.

    >>> import numpy as np
    >>> bank = SnapshotEdgeBank()
    >>> bank.update(np.array([[0], [1]]))  # a snapshot's edge_index
    >>> bank.score(np.array([[0, 0], [1, 2]])).tolist()
    [1.0, 0.0]
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque

import numpy as np

from ..errors import ConfigError
from .metrics import SnapshotMetrics, link_snapshot_metrics
from .pairs import key_pairs, pair_keys
from .snapshot import Snapshot


class SnapshotEdgeBank:
    def __init__(self, window: int | None = None, *, undirected: bool = False) -> None:
        if window is not None and (not isinstance(window, int) or window < 1):
            raise ConfigError(f"window must be an int >= 1 or None (unlimited memory), got {window!r}")
        self.window, self.undirected = window, undirected
        self.memory = np.zeros(0, np.int64)  # sorted pair keys of the snapshots remembered
        self.recent: deque[np.ndarray] = deque()

    def _keys(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        if self.undirected:
            src, dst = np.minimum(src, dst), np.maximum(src, dst)
        return pair_keys(src, dst)

    def update(self, edge_index: np.ndarray) -> None:
        keys = np.unique(self._keys(edge_index[0], edge_index[1]))
        if self.window is None:
            self.memory = np.union1d(self.memory, keys)
            return
        self.recent.append(keys)
        if len(self.recent) > self.window:
            self.recent.popleft()
        self.memory = np.unique(np.concatenate(list(self.recent)))

    def score(self, pairs: np.ndarray) -> np.ndarray:
        keys = self._keys(pairs[0], pairs[1])
        pos = np.searchsorted(self.memory, keys)
        hit = pos < len(self.memory)
        hit[hit] = self.memory[pos[hit]] == keys[hit]
        return hit.astype(np.float64)


class SnapshotPreferentialAttachment:
    def __init__(self) -> None:
        self.bank = SnapshotEdgeBank(undirected=True)  # the union graph, each pair once
        self.degree = np.zeros(0, np.int64)

    def update(self, edge_index: np.ndarray) -> None:
        before = self.bank.memory
        self.bank.update(edge_index)
        new = np.setdiff1d(self.bank.memory, before, assume_unique=True)
        ends = np.concatenate(key_pairs(new))
        if len(ends) and ends.max() >= len(self.degree):
            self.degree = np.concatenate(
                [self.degree, np.zeros(int(ends.max()) + 1 - len(self.degree), np.int64)]
            )
        np.add.at(self.degree, ends, 1)

    def score(self, pairs: np.ndarray) -> np.ndarray:
        deg = np.concatenate(
            [self.degree, np.zeros(max(0, int(pairs.max(initial=-1)) + 1 - len(self.degree)), np.int64)]
        )
        return (deg[pairs[0]] * deg[pairs[1]]).astype(np.float64)


def evaluate_links(scorer, snapshots, *, start: int = 0) -> list[SnapshotMetrics]:
    """Score each labelled snapshot's ``link_index`` after showing the scorer that snapshot (and all before
    it); metrics for snapshots ``start`` on (e.g. the test part of a chronological split). ``snapshots``:
    ours or the Data objects of a PGT signal with ``link_index``."""
    out = []
    for i, snap in enumerate(snapshots):
        edges, pairs, y, t = _link_arrays(snap)
        scorer.update(edges)
        if i >= start:
            m = link_snapshot_metrics(scorer.score(pairs), y, t, math.nan)
            out.append(dataclasses.replace(m, index=i, phase="test"))
    return out


def _link_arrays(snap) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    if isinstance(snap, Snapshot):
        return snap.edge_index, snap.extra["link_index"], np.asarray(snap.y), snap.t
    return (
        snap.edge_index.numpy(),
        snap.link_index.numpy(),
        snap.y.numpy(),
        float(getattr(snap, "t", math.nan)),
    )
