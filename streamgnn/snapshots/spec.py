"""SnapshotSpec: what a discrete-time view of the store is (kind, edge weight, features) and when it is cut.

Discrete-time models (PyTorch Geometric Temporal's GConvGRU, EvolveGCN, T-GCN...) see a graph stream as a
sequence of snapshots. Two kinds are common and both are here:

- ``state``: the graph valid at time ``t`` (edges with time <= t not deleted at t), e.g. "who trusts
  whom as of Monday"; multi-edges of a pair collapse into one weighted edge.
- ``window``: the edges that arrived in ``[t - width, t)``, whatever happened to them later, e.g. "who
  attacked whom yesterday".

Edge weight: ``none`` (1 per pair), ``count`` (instances of the pair in the view), ``column`` (sum of the
store's edge weights over them) or ``decay`` (sum of ``2 ** (-(t - t_e) / half_life)``: recent edges
count more). Node features are the store's versions in force at ``t`` (zeros for a node with none yet);
``degree_features`` appends ``log1p`` of each node's out- and in-degree in the snapshot.

Snapshots are cut ``every`` seconds (the first one at ``start``, default: the first multiple of ``every``
after the first event) or at given ``times``:

    >>> SnapshotSpec(every=86_400.0, kind="window", weight="count").first_time(1_000.0)
    86400.0
    >>> SnapshotSpec(times=(5.0, 7.0)).first_time(0.0)
    5.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..configs import Config
from ..errors import ConfigError

Kind = Literal["state", "window"]  # Literal fields: checked by ``Config`` however built
Weight = Literal["none", "count", "column", "decay"]


@dataclass(frozen=True)
class SnapshotSpec(Config):
    kind: Kind = "state"
    every: float | None = None
    start: float | None = None
    times: tuple[float, ...] | None = None
    width: float | None = None  # window kind; default: ``every``
    weight: Weight = "none"
    half_life: float | None = None  # decay weight
    undirected: bool = False
    degree_features: bool = False
    num_nodes: int | None = (
        None  # a fixed node count (ids beyond it are an error); None: grows with the stream
    )

    def __post_init__(self) -> None:
        if (self.every is None) == (self.times is None):
            raise ConfigError("give exactly one of every= (a fixed step) or times= (explicit snapshot times)")
        if self.every is not None and not (_number(self.every) and 0 < self.every < math.inf):
            raise ConfigError(f"every must be a positive finite number of seconds, got {self.every!r}")
        if self.start is not None and not (_number(self.start) and math.isfinite(self.start)):
            raise ConfigError(f"start must be a finite time, got {self.start!r}")
        if self.times is not None:
            times = np.asarray(self.times, np.float64) if _all_numbers(self.times) else None
            if times is None or times.ndim != 1 or not len(times) or not np.isfinite(times).all():
                raise ConfigError(f"times must be a non-empty sequence of finite numbers, got {self.times!r}")
            if (np.diff(times) <= 0).any():
                raise ConfigError("times must be strictly increasing")
            object.__setattr__(self, "times", tuple(times.tolist()))
        if self.kind == "window":
            width = self.width if self.width is not None else self.every
            if width is None or not (_number(width) and 0 < width < math.inf):
                raise ConfigError(
                    f"a window snapshot needs a positive finite width (or every=), got {width!r}"
                )
            object.__setattr__(self, "width", float(width))
        elif self.width is not None:
            raise ConfigError("width applies to kind='window' only")
        if self.weight == "decay":
            if not (_number(self.half_life) and 0 < self.half_life < math.inf):
                raise ConfigError(f"weight='decay' needs a positive finite half_life, got {self.half_life!r}")
        elif self.half_life is not None:
            raise ConfigError("half_life applies to weight='decay' only")
        if self.num_nodes is not None and not (
            isinstance(self.num_nodes, int | np.integer) and not isinstance(self.num_nodes, bool)
        ):
            raise ConfigError(f"num_nodes must be an int or None, got {self.num_nodes!r}")
        if self.num_nodes is not None and self.num_nodes < 0:
            raise ConfigError(f"num_nodes must be >= 0, got {self.num_nodes}")

    # ------------------------------------------------------------------ schedule
    def first_time(self, first_event_t: float) -> float:
        """The first snapshot time for a stream whose first event is at ``first_event_t``."""
        if self.times is not None:
            return self.times[0]
        if self.start is not None:
            return float(self.start)
        return (math.floor(first_event_t / self.every) + 1) * self.every

    def time_at(self, index: int, first: float) -> float | None:
        """The ``index``-th snapshot time of a schedule starting at ``first`` (None past the last given
        time); a product, not a running sum, so a long schedule does not drift."""
        if self.times is not None:
            return self.times[index] if index < len(self.times) else None
        return first + index * self.every

    @property
    def tau(self) -> float:
        """The decay's time constant: weight ``exp(-(t - t_e) / tau)``."""
        return self.half_life / math.log(2.0)


def _number(x) -> bool:
    return isinstance(x, int | float | np.integer | np.floating) and not isinstance(x, bool)


def _all_numbers(values) -> bool:
    try:
        return all(_number(v) for v in values)
    except TypeError:
        return False
