"""Targets: what a model learns to predict from a snapshot, attached as the snapshots go by.

- ``NodeTarget(column, horizon, lags)``: node regression/classification. ``y`` of snapshot ``k`` is feature
  ``column`` at snapshot ``k + horizon``; with ``lags`` the input becomes that column's last ``lags``
  values, oldest first, exactly as PyTorch Geometric Temporal's loaders build forecasting data (Chickenpox:
  ``lags=4, horizon=1``). Snapshot ``k`` is ready once ``k + horizon`` is cut.
- ``NextLinks(negatives)``: link prediction. The positives of snapshot ``k`` are the pairs that arrive before
  snapshot ``k + 1`` (between two known nodes), each with ``negatives`` destinations drawn by the project's
  ``NegativeSampler`` (random or historical, seeded per snapshot, never a positive of the same source).
  ``extra["link_index"]`` is int64 [2, P * (1 + q)]: the P positives, then the q negatives of positive 0,
  of positive 1, ...; ``y`` the matching 1/0 labels.

Each target makes a stateful labeler: ``push(snapshot)`` returns the snapshots that became ready.

    >>> import numpy as np
    >>> from streamgnn.snapshots.snapshot import Snapshot
    >>> lab = NodeTarget(lags=2).labeler()
    >>> snaps = [Snapshot(float(k), k, np.zeros((2, 0), np.int64), np.zeros(0, np.float32),
    ...                   np.array([[k], [10 * k]], np.float32), 2) for k in range(4)]
    >>> ready = [r for s in snaps for r in lab.push(s)]
    >>> ready[0].x.tolist(), ready[0].y.tolist(), len(ready)
    ([[0.0, 1.0], [0.0, 10.0]], [2.0, 20.0], 2)
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from ..configs import Config
from ..errors import ConfigError, SnapshotError
from ..sampling import NegativeSampler
from .pairs import key_pairs, pair_keys
from .snapshot import Snapshot, snapshot_from_state, snapshot_state


@dataclass(frozen=True)
class NodeTarget:
    column: int = 0
    horizon: int = 1
    lags: int = 0
    keep_features: bool = False  # with lags: the snapshot's own features follow the lagged column
    classes: bool = False  # y as int64 class ids (node classification) instead of float32

    def __post_init__(self) -> None:
        for name in ("column", "horizon", "lags"):
            value = getattr(self, name)
            if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"NodeTarget.{name} must be an int >= 0, got {value!r}")
        if self.horizon == 0 and self.lags:
            raise ConfigError("lags with horizon=0 would put the target itself among the inputs")

    def labeler(self) -> NodeLabeler:
        return NodeLabeler(self)


class NodeLabeler:
    def __init__(self, target: NodeTarget) -> None:
        self.target = target
        self.history: deque[np.ndarray] = deque(maxlen=max(target.lags, 1))
        self.waiting: deque[Snapshot] = deque()

    def push(self, snap: Snapshot) -> list[Snapshot]:
        tg = self.target
        if snap.x is None or snap.x.shape[1] <= tg.column:
            width = 0 if snap.x is None else snap.x.shape[1]
            raise SnapshotError(
                f"NodeTarget column {tg.column} is not a node feature (snapshot t={snap.t} has {width})"
            )
        col = snap.x[:, tg.column]
        self.history.append(col)
        if tg.lags and len(self.history) == tg.lags:
            lagged = np.zeros((snap.num_nodes, tg.lags), np.float32)
            for j, past in enumerate(self.history):  # older snapshots may have fewer nodes: zeros
                lagged[: len(past), j] = past
            x = np.concatenate([lagged, snap.x], axis=1) if tg.keep_features else lagged
            self.waiting.append(replace(snap, x=x))
        elif not tg.lags:
            x = snap.x if tg.horizon else np.delete(snap.x, tg.column, axis=1)
            self.waiting.append(replace(snap, x=x))
        ready = []
        while len(self.waiting) > tg.horizon:
            early = self.waiting.popleft()
            y = col[: early.num_nodes]
            if len(y) < early.num_nodes:
                raise SnapshotError(f"snapshot t={snap.t} has fewer nodes than t={early.t}")
            ready.append(replace(early, y=y.astype(np.int64 if tg.classes else np.float32)))
        return ready

    def state(self) -> tuple[dict[str, np.ndarray], dict]:
        arrays = {f"history.{i}": h for i, h in enumerate(self.history)}
        waiting = []
        for i, snap in enumerate(self.waiting):
            a, v = snapshot_state(snap, f"waiting.{i}.")
            arrays.update(a)
            waiting.append(v)
        return arrays, {"history": len(self.history), "waiting": waiting}

    @classmethod
    def from_state(cls, target: NodeTarget, arrays: dict[str, np.ndarray], values: dict) -> NodeLabeler:
        """The labeler of ``target`` as ``state()`` left it."""
        self = cls(target)
        self.history.extend(np.array(arrays[f"history.{i}"]) for i in range(values["history"]))
        self.waiting.extend(
            snapshot_from_state(arrays, v, f"waiting.{i}.") for i, v in enumerate(values["waiting"])
        )
        return self


@dataclass(frozen=True)
class NextLinks(Config):
    negatives: int = 1
    strategy: Literal["random", "historical"] = "random"  # checked by ``Config`` however built
    frac: float = 0.5  # historical strategy: the share of negatives from the source's past destinations
    seed: int = 0

    def __post_init__(self) -> None:
        if (
            not isinstance(self.negatives, int | np.integer)
            or isinstance(self.negatives, bool)
            or self.negatives < 1
        ):
            raise ConfigError(f"NextLinks.negatives must be an int >= 1, got {self.negatives!r}")
        if not 0.0 <= self.frac <= 1.0:
            raise ConfigError(f"NextLinks.frac must lie in [0, 1], got {self.frac!r}")

    def labeler(self) -> LinkLabeler:
        return LinkLabeler(self)


class LinkLabeler:
    def __init__(self, target: NextLinks) -> None:
        self.target = target
        self.previous: Snapshot | None = None
        self.sampler: NegativeSampler | None = None
        self.pooled = 0  # nodes 0..pooled-1 are in the sampler's pool
        self.seen = np.zeros(0, np.int64)  # pair keys observed so far: the sampler's history, checkpointed

    def push(self, snap: Snapshot) -> list[Snapshot]:
        if snap.arrived is None:
            raise SnapshotError(
                "NextLinks needs the arrived pairs: SnapshotBuilder(arrivals=True), as SnapshotStream makes"
            )
        ready = [] if self.previous is None else [self._label(self.previous, snap.arrived)]
        if snap.num_nodes > self.pooled:
            new = np.arange(self.pooled, snap.num_nodes)
            if self.sampler is None:
                self.sampler = NegativeSampler(new, seed=self.target.seed)
            else:
                self.sampler.extend_pool(new)
            self.pooled = snap.num_nodes
        if self.sampler is not None and snap.arrived.shape[1]:
            self.sampler.observe(snap.arrived[0], snap.arrived[1])  # history: what was seen up to here
            self.seen = np.union1d(self.seen, pair_keys(snap.arrived[0], snap.arrived[1]))
        self.previous = snap
        return ready

    def _label(self, snap: Snapshot, arrived: np.ndarray) -> Snapshot:
        tg = self.target
        known = (arrived < snap.num_nodes).all(axis=0)
        src, dst = arrived[0, known], arrived[1, known]
        if len(src) and self.sampler is not None:
            neg = self.sampler.sample(
                src, dst, num=tg.negatives, strategy=tg.strategy, frac=tg.frac, key=snap.index
            )
            ok = (neg >= 0).all(axis=1)  # only a pool smaller than q + 1 leaves gaps
            src, dst, neg = src[ok], dst[ok], neg[ok]
        else:
            src = dst = np.zeros(0, np.int64)
            neg = np.zeros((0, tg.negatives), np.int64)
        index = np.stack(
            [np.concatenate([src, np.repeat(src, tg.negatives)]), np.concatenate([dst, neg.reshape(-1)])]
        )
        label = np.concatenate([np.ones(len(src), np.float32), np.zeros(neg.size, np.float32)])
        return replace(snap, y=label, extra={**snap.extra, "link_index": index})

    def state(self) -> tuple[dict[str, np.ndarray], dict]:
        arrays, values = {"seen": self.seen}, {"pooled": self.pooled, "previous": None}
        if self.previous is not None:
            prev, values["previous"] = snapshot_state(self.previous, "previous.")
            arrays.update(prev)
        return arrays, values

    @classmethod
    def from_state(cls, target: NextLinks, arrays: dict[str, np.ndarray], values: dict) -> LinkLabeler:
        """The labeler of ``target`` as ``state()`` left it."""
        self = cls(target)
        self.pooled, self.seen = int(values["pooled"]), np.array(arrays["seen"])
        if values["previous"] is not None:
            self.previous = snapshot_from_state(arrays, values["previous"], "previous.")
        if self.pooled:
            self.sampler = NegativeSampler(np.arange(self.pooled), seed=self.target.seed)
            self.sampler.observe(*key_pairs(self.seen))
        return self
