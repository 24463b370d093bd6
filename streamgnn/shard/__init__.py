"""Sharded store and partition-parallel training: each rank owns graph partitions (their adjacency, TGN
memory rows, walk-feature rows and negative history) and reads only its own Kafka partitions; W ranks learn
what one does, with TGN or the DyGFormer-style model (whose sequences the owners read, ``sequences``)."""

from ..train.config import ShardConfig
from .batches import GlobalBatcher
from .cache import RowCache
from .comm import Collectives
from .memory import OwnedMemory
from .ownership import GlobalIndex, Ownership
from .pairs import ShardPairs
from .run import local_source
from .source import KafkaPartitions, LocalSource, PartitionedReplay
from .trainer import ShardedTrainer
from .walks import ShardWalks

__all__ = [
    "Collectives",
    "GlobalBatcher",
    "GlobalIndex",
    "KafkaPartitions",
    "LocalSource",
    "OwnedMemory",
    "Ownership",
    "PartitionedReplay",
    "RowCache",
    "ShardPairs",
    "ShardConfig",
    "ShardedTrainer",
    "ShardWalks",
    "local_source",
]
