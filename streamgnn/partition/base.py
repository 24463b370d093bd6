"""The contract between a partitioner and whoever calls it (the store, the Kafka router).

The caller owns the vertex id map and ``labels``, an int32 array over internal vertex ids (dense, in order
of first appearance) holding each vertex's partition, or ``PENDING`` (-1) while a vertex waits to be
placed. The partitioner owns the rest of its state. Calls come in stream order:

- ``add_vertices(labels, lo, hi, external)`` when the caller creates vertices ``lo..hi-1``;
- ``observe(labels, kind, src, dst, t)`` with the events it applied, in arrival order (internal ids).

Both are deterministic functions of the events so far, never of batch boundaries, so every process that
replays a stream computes the same assignment. ``state()``/``from_state`` carry the state through the
store's checkpoint (plain arrays, layout-free: equal states give equal arrays).

    >>> import numpy as np
    >>> from streamgnn.partition import make_partitioner
    >>> p = make_partitioner("ldg", 2)
    >>> labels = np.empty(3, np.int32)
    >>> p.add_vertices(labels, 0, 3, np.arange(3))
    >>> p.observe(labels, np.zeros(2, np.int8), np.array([0, 1]), np.array([1, 2]), np.array([0.0, 1.0]))
    >>> labels.tolist()  # 1 joins 0; 2 would too, but partition 0 is full (capacity 1.1 * 3 / 2)
    [0, 0, 1]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .config import PartitionerConfig

PENDING = -1


@dataclass
class Routes:
    """Where a batch's events go, for a router: ``dest[i]`` the partition of event i (-1: its source
    vertex still waits), and the vertices placed during the batch with ``at`` = ``2 i`` (while event i
    was processed) or ``2 i + 1`` (after it). Edge partitioners add ``both[i, p]``: whether partition p
    held replicas of both ends of delete i when it came (the partitions that may hold its edge)."""

    dest: np.ndarray
    placed: np.ndarray
    at: np.ndarray
    both: np.ndarray | None = None


MAX_PARTITIONS = 1 << 20


def partition_count_problem(value) -> str | None:
    """What is wrong with ``value`` as a graph partition count, or None. Every setting of one (a store's,
    a sharded run's, a router's) is checked here: an int in ``[1, MAX_PARTITIONS]``. The bound refuses what
    cannot be meant: a partition is a share of the graph meant to hold many vertices, and some work is per
    partition wherever partitions are real (a sharded run reads one Kafka topic partition per graph
    partition; LDG and Fennel score every partition for each vertex they place)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        return f"num_partitions must be an int >= 1, got {value!r}"
    if value > MAX_PARTITIONS:
        return (
            f"num_partitions is {value:,}, more than {MAX_PARTITIONS:,} (2**20): a partition is a share of "
            "the graph meant to hold many vertices, and a sharded run reads a Kafka topic partition for each"
        )
    return None


class Partitioner:
    """Base of the partitioners; ``hash`` is this class itself (no state, labels from external ids)."""

    def __init__(self, config: PartitionerConfig, num_partitions: int) -> None:
        problem = partition_count_problem(num_partitions)
        if problem is not None:
            raise ConfigError(problem)
        self.config = config
        self.num_partitions = int(num_partitions)
        self.moved = 0  # vertices moved by rebalancing, over the stream's life
        self.on_move: list[Callable] = []  # hooks called with each ``rebalance.Moves``

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def pending(self) -> int:
        """Vertices waiting to be placed."""
        return 0

    def add_vertices(self, labels: np.ndarray, lo: int, hi: int, external: np.ndarray) -> None:
        from .hashing import hash_partition

        labels[lo:hi] = hash_partition(external, self.num_partitions)

    def observe(self, labels, kind, src, dst, t, routes: bool = False, graph=None) -> Routes | None:
        """Account for applied events; with ``routes``, also say where each goes. ``graph`` (a callable
        returning the store's ``TCSRView``, which holds these events) lets a partitioner rebalance."""
        if not routes:
            return None
        empty = np.zeros(0, np.int64)
        dest = np.where(src >= 0, labels[np.maximum(src, 0)], PENDING).astype(np.int32)
        return Routes(dest, empty, empty)

    def flush(self, labels: np.ndarray) -> np.ndarray:
        """Place every waiting vertex now (end of a stream); returns them, in placement order."""
        return np.zeros(0, np.int64)

    def move(self, labels: np.ndarray, vertices: np.ndarray, to: np.ndarray) -> None:
        """Relabel placed ``vertices`` to partitions ``to`` (rebalancing)."""
        raise ConfigError(
            f"the {self.name!r} partitioner cannot move vertices: hash placement is what every producer "
            "computes; rebalancing needs a stateful vertex partitioner ('ldg' or 'fennel')"
        )

    def edge_partitions(self, labels: np.ndarray, src: np.ndarray, eid: np.ndarray) -> np.ndarray:
        """The partition holding each edge: its source's for vertex partitioners (-1: source waits)."""
        return labels[src]

    def state(self) -> dict[str, np.ndarray]:
        """The state as plain arrays, in one canonical form (checkpoints and content hashes hold it)."""
        return {"moved": np.array([self.moved], np.int64)} if self.moved else {}

    @classmethod
    def from_state(
        cls, config, num_partitions: int, arrays: dict[str, np.ndarray], labels: np.ndarray, num_edges: int
    ) -> Partitioner:
        """The partitioner ``config`` names over ``num_partitions``, as its ``state()`` was, for the caller's
        ``labels`` and ``num_edges`` edges; ValueError where the arrays do not fit them."""
        from . import make_partitioner  # (the package picks the class a config names)

        partitioner = make_partitioner(config, num_partitions)
        partitioner._load(arrays, labels, num_edges)
        return partitioner

    def _load(self, arrays: dict[str, np.ndarray], labels: np.ndarray, num_edges: int) -> None:
        """Take ``state()``'s arrays into this new partitioner (each class loads its own part)."""
        self.moved = int(arrays["moved"][0]) if "moved" in arrays else 0
        if len(labels) and (labels.min() < PENDING or labels.max() >= self.num_partitions):
            raise ValueError(f"partition labels outside [-1, {self.num_partitions})")


__all__ = ["PENDING", "Partitioner", "Routes"]
