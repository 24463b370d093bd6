"""Vertex and edge partitioning of a stream, one pass, with state that checkpoints.

Vertex partitioners (edge-cut): ``hash`` (stateless, the default), ``ldg``, ``fennel``. Edge partitioners
(vertex-cut): ``hdrf``, ``dbh``. ``make_partitioner(spec, k)`` builds one; the store runs the one its
``StoreConfig.partitioner`` names.
"""

from .base import MAX_PARTITIONS, PENDING, Partitioner, Routes, partition_count_problem
from .config import EDGE_METHODS, METHODS, VERTEX_METHODS, PartitionerConfig, RebalanceConfig
from .hashing import hash_partition
from .metrics import PartitionReport, PartitionTimeline, partition_report
from .rebalance import Moves


def make_partitioner(spec, num_partitions: int) -> Partitioner:
    """A partitioner from a name, a mapping of ``PartitionerConfig`` fields or a config."""
    config = PartitionerConfig.parse(spec)
    if config.name in ("ldg", "fennel"):
        from .greedy import GreedyPartitioner

        return GreedyPartitioner(config, num_partitions)
    if config.name in EDGE_METHODS:
        from .edges import EdgePartitioner

        return EdgePartitioner(config, num_partitions)
    return Partitioner(config, num_partitions)


__all__ = [
    "EDGE_METHODS",
    "MAX_PARTITIONS",
    "METHODS",
    "PENDING",
    "VERTEX_METHODS",
    "Moves",
    "PartitionReport",
    "PartitionTimeline",
    "Partitioner",
    "PartitionerConfig",
    "RebalanceConfig",
    "Routes",
    "hash_partition",
    "make_partitioner",
    "partition_report",
    "partition_count_problem",
]
