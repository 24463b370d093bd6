"""Which partitioner a store or router runs, and its knobs: one frozen, validated config.

``PartitionerConfig("fennel", buffer_edges=4)`` or just ``"fennel"`` wherever a config is taken
(``StoreConfig(partitioner=...)``, the router, the benchmark). Unknown keys and out-of-range values are
refused with the name of what is wrong.

    >>> PartitionerConfig.parse({"name": "ldg", "buffer_edges": 8}).buffer_edges
    8
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from ..configs import Config
from ..errors import ConfigError

VERTEX_METHODS = ("hash", "ldg", "fennel")  # edge-cut: every vertex in one partition
EDGE_METHODS = ("hdrf", "dbh")  # vertex-cut: every edge in one partition, vertices replicated
METHODS = VERTEX_METHODS + EDGE_METHODS
Method = Literal[METHODS]  # PartitionerConfig.name, checked by ``Config`` however built


@dataclass(frozen=True)
class RebalanceConfig(Config):
    """When and how far a stateful vertex partitioner moves placed vertices (rebalancing).

    Every ``every_edges`` edges of the stream (0: only when asked), at that exact stream position:
    partitions holding more than ``max_imbalance`` times the mean vertex count are drained (their
    vertices move to the partition below the limit holding most of their neighbors); then, if the cut of
    the last ``window_edges`` edges is above ``max_window_cut`` (0: always), the window's vertices are
    re-placed from their whole adjacency with the partitioner's own score (restreaming them, up to
    ``passes`` times), each only when that beats staying by more than ``min_gain``. At most ``max_moves``
    vertices move per check.
    """

    every_edges: int = 0
    max_imbalance: float = 1.2
    max_window_cut: float = 0.0
    min_gain: float = 0.0
    max_moves: int = 100_000
    passes: int = 3

    def __post_init__(self) -> None:
        for key, lo in (("every_edges", 0), ("max_moves", 1), ("passes", 1)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                raise ConfigError(f"rebalance {key} must be an int >= {lo}, got {value!r}")
        for key, lo in (("max_imbalance", 1.0), ("max_window_cut", 0.0), ("min_gain", 0.0)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int | float) or not (lo <= value < math.inf):
                raise ConfigError(f"rebalance {key} must be finite and >= {lo}, got {value!r}")


@dataclass(frozen=True)
class PartitionerConfig(Config):
    """``name``: one of ``METHODS``; ``hash`` keeps no state (any producer can compute it).

    Vertex partitioners (``ldg``, ``fennel``) place a vertex once, from its neighbors already placed:
    ``buffer_edges`` is how many of its first edges it waits for (1: place at first sight, from that
    edge's other end), ``buffer_time`` the most stream time it waits, ``max_pending`` the most vertices
    that wait at once (the oldest is placed first). ``balance_slack`` is the allowed excess of a
    partition over the mean vertex count (Fennel's nu - 1, LDG's capacity). ``gamma``/``alpha`` are
    Fennel's; ``alpha=None`` estimates ``alpha = k**(gamma-1) m / n**gamma`` from the vertices ``n`` and
    edges ``m`` seen so far (the stream's totals are not known up front); ``expected_nodes`` (if known)
    is used for ``n`` until the stream has seen more, which makes the first placements less crowded by
    the balance term. ``hdrf_lambda``/``hdrf_epsilon`` are HDRF's balance weight and its epsilon.
    ``window_edges`` is how many recent edges are kept for the windowed cut that rebalancing watches;
    ``rebalance`` (a ``RebalanceConfig`` or a mapping of its fields) says when vertices move.
    """

    name: Method = "hash"
    buffer_edges: int = 1
    buffer_time: float = math.inf
    max_pending: int = 100_000
    balance_slack: float = 0.1
    gamma: float = 1.5
    alpha: float | None = None
    expected_nodes: int = 0
    hdrf_lambda: float = 1.0
    hdrf_epsilon: float = 1.0
    window_edges: int = 65_536
    rebalance: RebalanceConfig = RebalanceConfig()

    def __post_init__(self) -> None:
        if isinstance(self.rebalance, Mapping):
            object.__setattr__(self, "rebalance", RebalanceConfig.from_dict(self.rebalance, "rebalance"))
        if not isinstance(self.rebalance, RebalanceConfig):
            raise ConfigError(f"rebalance must be a RebalanceConfig or a mapping, got {self.rebalance!r}")
        if self.rebalance.every_edges and self.name not in ("ldg", "fennel"):
            raise ConfigError(
                f"rebalancing moves vertices of 'ldg' or 'fennel'; {self.name!r} cannot (hash is what every "
                "producer computes; edge partitioners place edges, not vertices)"
            )
        for key, lo in (("buffer_edges", 1), ("max_pending", 1), ("expected_nodes", 0), ("window_edges", 0)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                raise ConfigError(f"partitioner {key} must be an int >= {lo}, got {value!r}")
        if self.buffer_edges > 1024:
            raise ConfigError(f"partitioner buffer_edges must be <= 1024, got {self.buffer_edges}")
        for key, ok, what in (
            ("buffer_time", lambda x: x >= 0, ">= 0 (inf: no time limit)"),
            ("balance_slack", lambda x: 0 <= x < math.inf, "finite and >= 0"),
            ("gamma", lambda x: 1 <= x < math.inf, "finite and >= 1"),
            ("hdrf_lambda", lambda x: 0 <= x < math.inf, "finite and >= 0"),
            ("hdrf_epsilon", lambda x: 0 < x < math.inf, "finite and > 0"),
        ):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int | float) or not ok(value):
                raise ConfigError(f"partitioner {key} must be {what}, got {value!r}")
        if self.alpha is not None and not (0 < self.alpha < math.inf):
            raise ConfigError(
                f"partitioner alpha must be finite and > 0 (or None: estimated), got {self.alpha}"
            )

    @property
    def stateful(self) -> bool:
        return self.name != "hash"

    @property
    def places_vertices(self) -> bool:
        """True for vertex partitioners (edge-cut); False for edge partitioners (vertex-cut)."""
        return self.name in VERTEX_METHODS

    @classmethod
    def parse(cls, spec: str | Mapping | PartitionerConfig) -> PartitionerConfig:
        """A config from a method name, a mapping of fields (unknown keys refused) or a config."""
        if isinstance(spec, PartitionerConfig):
            return spec
        if isinstance(spec, str):
            spec = {"name": spec}
        if isinstance(spec, Mapping):
            return cls.from_dict(spec, "partitioner")
        raise ConfigError(f"partitioner must be a name, a mapping or a PartitionerConfig, got {spec!r}")


__all__ = ["EDGE_METHODS", "METHODS", "VERTEX_METHODS", "PartitionerConfig", "RebalanceConfig"]
