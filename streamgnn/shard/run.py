"""``run_sharded``: the sharded online job one rank runs (``run_online`` calls it when
``TrainConfig.sharding`` is set): resume from the common checkpoint, read this rank's partitions, train,
report.

The source can be a ``LocalSource`` factory ``(ownership, start_offsets) -> LocalSource`` (what a Kafka
consumer of this rank's topic partitions needs: ``KafkaPartitions``), a ready ``LocalSource``, or any stream
of ``EventBatch`` es held whole by every rank (a dataset or file replay), of which each rank keeps its own
partitions (``PartitionedReplay``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from ..errors import ConfigError
from ..events import EventBatch, concat
from ..train.config import TrainConfig
from ..train.report import write_report
from ..train.trainer import OnlineResult
from .ownership import Ownership
from .source import LocalSource, PartitionedReplay
from .trainer import ShardedTrainer

SourceFactory = Callable[[Ownership, dict[str, int]], LocalSource]


def run_sharded(
    source: SourceFactory | LocalSource | Iterable[EventBatch],
    config: TrainConfig,
    *,
    out_dir: str | Path | None = None,
    progress: bool = True,
    max_events: int | None = None,
    total: int | None = None,
) -> OnlineResult:
    """Train this rank of a sharded job (every rank calls it); with ``out_dir``, rank 0 writes
    ``metrics.png`` and ``summary.json``. Resumes from ``config.checkpoint_dir`` where every rank has a
    checkpoint."""
    trainer, offsets = ShardedTrainer.resume(config)
    local = _local_source(source, trainer.ownership, offsets)
    try:
        result = trainer.fit(local, max_events=max_events, progress=progress, total=total)
    finally:
        if local is not source and callable(getattr(local, "close", None)):
            local.close()  # a source this function made (e.g. a Kafka consumer) is closed here
    if out_dir is None or not trainer.dist.is_main:
        return result
    return write_report(result, out_dir)


def _local_source(source, ownership: Ownership, offsets: dict[str, int]) -> LocalSource:
    if all(hasattr(source, name) for name in ("pull", "done", "positions")):
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
