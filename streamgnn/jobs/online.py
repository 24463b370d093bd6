"""``run_online``: the end-to-end online job (train on a stream, serve embeddings, report)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ..embeddings import EmbeddingSink
from ..errors import ConfigError
from ..events import EventBatch
from ..store import TemporalGraphStore
from ..train.config import TrainConfig
from ..train.distributed import init_distributed
from ..train.report import write_report
from ..train.resume import Expectation, trainer_kind
from ..train.trainer import OnlineResult, OnlineTrainer
from .resume import choose, source_identity
from .train import TrainJob


def run_online(
    source: Iterable[EventBatch],
    store: TemporalGraphStore,
    config: TrainConfig,
    *,
    sink: EmbeddingSink | None = None,
    out_dir: str | Path | None = None,
    progress: bool = True,
    max_events: int | None = None,
    total: int | None = None,
) -> OnlineResult:
    """Train test-then-train on ``source`` into ``store``; with ``out_dir``, write ``metrics.png`` (running
    metrics over stream time) and ``summary.json``. Resumes from ``config.checkpoint_dir`` if it holds a
    checkpoint (``store`` is then replaced by the checkpoint's), refusing one of another source or model as
    ``streamgnn train`` does (``jobs.resume``).

    ``max_events``: where the job ends, counted from the stream's start: the events a resumed checkpoint
    holds count, so the same call ends at the same point whether or not an earlier run was interrupted.

    With ``config.sharding`` set, each rank trains on its own partitions instead (the sharded ``TrainJob``):
    ``source`` is then a stream every rank replays, or a factory of this rank's ``LocalSource``."""
    if config.sharding is not None:  # each rank owns partitions: the sharded job (streamgnn.shard)
        if store is not None and store.num_nodes:
            raise ConfigError("a sharded run builds each rank's shard from the stream: pass an empty store")
        job = TrainJob(config, source, out_dir=None if out_dir is None else str(out_dir), log_every_s=0)
        return job.run(max_events=max_events, progress=progress, total=total)
    ckpt_dir = Path(config.checkpoint_dir) if config.checkpoint_dir else None
    chosen, note = choose(ckpt_dir, None)  # refused: a folder it would train over
    resumed = chosen is not None
    dist = init_distributed()
    expect = Expectation(source_identity(source, None), trainer_kind(False, dist.world_size), config)
    if resumed:
        trainer = OnlineTrainer.resume(chosen, config=config, sink=sink, dist=dist, expect=expect)
        if progress and trainer.dist.is_main:
            for line in ([note] if note else []) + expect.notes:
                print(line, flush=True)
            print(f"resumed from {chosen}: {trainer.position:,} events already learned", flush=True)
    else:
        trainer = OnlineTrainer(config, store, sink=sink, dist=dist)
        trainer.source_identity = expect.source
    more = None if max_events is None else max(0, max_events - trainer.position)
    result = trainer.fit(source, max_events=more, progress=progress, total=total)
    if resumed and not result.events and progress and trainer.dist.is_main:
        print(
            f"nothing left to do: the stream has no events after the {trainer.position:,} that {ckpt_dir} "
            "holds (delete it to train from scratch)", flush=True,
        )  # fmt: skip
    if out_dir is None or not trainer.dist.is_main:
        return result
    return write_report(result, out_dir)
