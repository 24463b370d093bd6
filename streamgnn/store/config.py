"""``StoreConfig``: what a store is asked to be. Its own module because the store and its checkpoint both
build one (a checkpoint rebuilds the store it records), and neither should import the other for it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..configs import Config
from ..errors import ConfigError, EventValidationError
from ..partition import PartitionerConfig, partition_count_problem


def check_lateness(value, name: str = "allowed_lateness") -> None:
    """The one check of an allowed lateness, wherever a run takes one (admission, store, trainer, router):
    a number >= 0 in stream time, ``inf`` for any order; ``ConfigError`` naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ConfigError(f"{name} must be a number >= 0 (inf: any order), got {value!r}")


@dataclass(frozen=True)
class StoreConfig(Config):
    """``allowed_lateness``: how far (in stream time) behind the newest event a late event may be and
    still be placed in time order; later ones are dead-lettered. ``inf`` accepts any order.
    ``partitioner``: how vertices (or edges) are placed in the ``num_partitions`` partitions: a method name
    (``"hash"``, ``"ldg"``, ``"fennel"``, ``"hdrf"``, ``"dbh"``), a mapping of ``PartitionerConfig`` fields
    or a ``PartitionerConfig``; stored as a ``PartitionerConfig``. ``dense_ids``: node ids are already
    dense ints >= 0 (a shard in a sharded run's global ids) and serve as internal ids, with no id map
    (``DenseIds``)."""

    num_partitions: int = 1
    allowed_lateness: float = math.inf
    partitioner: PartitionerConfig | str = "hash"
    dense_ids: bool = False

    def __post_init__(self) -> None:
        problem = partition_count_problem(self.num_partitions)
        if problem is not None:
            raise EventValidationError(problem)
        check_lateness(self.allowed_lateness)
        object.__setattr__(self, "partitioner", PartitionerConfig.parse(self.partitioner))
