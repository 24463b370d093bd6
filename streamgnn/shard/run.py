"""``local_source``: what one rank of a sharded job reads, from what the job was given.

The source can be a ``LocalSource`` factory ``(ownership, start_offsets) -> LocalSource`` (what a Kafka
consumer of this rank's topic partitions needs: ``KafkaPartitions``), a ready ``LocalSource``, or any stream
of ``EventBatch`` es held whole by every rank (a dataset or file replay), of which each rank keeps its own
partitions (``PartitionedReplay``). The job itself is ``jobs.TrainJob``'s (``run_online`` and
``streamgnn train`` run it when ``TrainConfig.sharding`` is set).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..errors import ConfigError
from ..events import EventBatch, concat
from .ownership import Ownership
from .source import LocalSource, PartitionedReplay

SourceFactory = Callable[[Ownership, dict[str, int]], LocalSource]


def local_source(
    source: SourceFactory | LocalSource | Iterable[EventBatch], ownership: Ownership, offsets: dict[str, int]
) -> LocalSource:
    """This rank's ``LocalSource``, starting at the checkpoint's ``offsets`` (empty: from the start)."""
    if isinstance(source, LocalSource):
        if offsets:
            raise ConfigError(
                "resuming a sharded run needs a source factory (ownership, start_offsets) -> LocalSource: a "
                "ready-made source cannot start at the checkpoint's offsets"
            )
        return source
    if callable(source):
        return source(ownership, offsets)
    if isinstance(source, EventBatch):
        return PartitionedReplay(source, ownership, start_offsets=offsets)
    return PartitionedReplay(concat(list(source)), ownership, start_offsets=offsets)
