"""The long-running training job behind ``streamgnn train``: a source (a dataset, a file or a Kafka topic),
online training (data-parallel under ``torchrun``), embeddings published to a compacted topic, checkpoints,
Prometheus metrics and one log line per interval.

Under ``torchrun`` every rank runs this. A dataset or file is read by every rank (the same batches by
construction); a topic is read by rank 0 and broadcast (``BroadcastSource``). A restarted job resumes from
the newest checkpoint, the one rank 0 names (all ranks load the same one even while a new one is written).

With ``config.sharding`` set the job is sharded (``streamgnn.shard``): each rank owns graph partitions and
reads only them, from its own topic partitions (``KafkaPartitions``) or from a dataset or file every rank
replays (``PartitionedReplay``); it resumes from the newest step every rank checkpointed, and publishes the
embeddings of the vertices it owns, so the topic holds every vertex once. Metrics, status lines and the
report are the replicated job's. A labelled task (``task``) runs on every rank (``label_ranks``).

    job = TrainJob(config, topic="events", bootstrap="localhost:9092", embeddings_topic="embeddings")
    result = job.run(idle_timeout_s=30)  # None: follow the topic until stopped
"""

from __future__ import annotations

import os
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import CheckpointError, ConfigError, StreamGNNError
from ..progress import IntervalLog, IntervalRate
from ..serve.metrics import WorkerMetrics
from ..shard.run import local_source
from ..shard.source import KafkaPartitions
from ..shard.trainer import ShardedTrainer
from ..sources import EventSource, as_source
from ..tasks.config import TaskConfig
from ..train.broadcast import BroadcastSource
from ..train.config import TrainConfig
from ..train.distributed import collective, init_distributed
from ..train.report import write_report
from ..train.resume import Expectation, ResumeConfig, trainer_kind
from ..train.trainer import OnlineResult, OnlineTrainer
from .labelled import LabelledStream
from .resume import check_folder, choose, source_identity


@dataclass
class TrainJob:
    """One worker of the job; see the module docstring. Give ``topic`` + ``bootstrap`` for Kafka, or
    ``source`` (any iterable of EventBatches every rank can read alike: ``DatasetSource``, ``CsvSource``;
    sharded, also what ``shard.run.local_source`` takes: a factory of this rank's ``LocalSource``)."""

    config: TrainConfig
    source: object | None = None
    topic: str | None = None
    bootstrap: str | None = None
    embeddings_topic: str | None = None
    dead_letter_topic: str | None = None
    metrics_port: int | None = None
    log_every_s: float = 10.0
    out_dir: str | None = None
    resume: ResumeConfig = field(default_factory=ResumeConfig)
    task: TaskConfig | None = None

    def __post_init__(self) -> None:
        if (self.source is None) == (self.topic is None):
            raise ConfigError("give either a source (dataset or file) or a Kafka topic to train from")
        if (self.topic or self.embeddings_topic) and not self.bootstrap:
            raise ConfigError("a Kafka topic needs the broker's bootstrap address")
        self.dist = init_distributed()
        self.metrics = WorkerMetrics()
        self.sharded = self.config.sharding is not None
        if self.source is not None and not self.sharded:  # (sharded: maybe a factory of LocalSources)
            self.source = as_source(self.source)
        self.trainer: OnlineTrainer | ShardedTrainer | None = None
        self._rate = IntervalRate()
        self._lag_reader = None
        self._source = None  # the KafkaSource this rank reads (replicated: rank 0's)
        self._chosen = None  # the checkpoint this run resumed from (sharded: this rank's)
        self.labelled: LabelledStream | None = None
        # A labelled task runs in one process or on the ranks of a sharded job (``jobs.label_ranks``: each
        # label embedded by its node's owner). Replicas under torchrun would each score a slice of the
        # batch and embed the rest apart: their heads would drift. Refused before anything starts.
        if self.task is not None and self.dist.world_size > 1 and not self.sharded:
            raise ConfigError(
                f"task: a labelled task is learned by one process or by the sharded job, not by replicas "
                f"under torchrun ({self.dist.world_size} processes): add train.sharding, run it as one "
                "process, or drop the task section"
            )
        if self.task is not None and self.task.joint_weight and self.sharded:
            raise ConfigError(
                "task.joint_weight under train.sharding: joint training is built for one process (the "
                "sharded job's head learns on the embeddings as they are); set it to 0 there"
            )

    # ------------------------------------------------------------------ build
    def _expectation(self) -> Expectation:
        """What this run is, for the checkpoint it resumes from to be checked against (``train.resume``)."""
        partitions = None
        if self.topic is not None:  # how many the topic has now: a checkpoint records it
            from ..connectors.kafka import TopicReader

            with TopicReader(self.bootstrap) as reader:
                partitions = len(reader.partitions(self.topic)) or None
        return Expectation(
            source_identity(self.source, self.topic, partitions),
            trainer_kind(self.sharded, self.dist.world_size), self.config,
            allow=self.resume.mismatch == "allow",
        )  # fmt: skip

    def _trainer(self, sink) -> OnlineTrainer:
        """A trainer resumed from the checkpoint rank 0 chose (every rank the same one, even while a newer
        one lands), or a new one; a refusal rank 0 met is every rank's."""
        chosen = note = error = None
        if self.dist.is_main:
            try:
                chosen, note = choose(self.config.checkpoint_dir, self.resume.checkpoint)
            except StreamGNNError as exc:
                error = str(exc)
        if self.dist.active:
            box = [(chosen, note, error)]
            collective("broadcast_object_list", box, 0)
            chosen, note, error = box[0]
        if error is not None:
            raise CheckpointError(error)
        expect = self._expectation()
        self._chosen = chosen
        if chosen is None:
            trainer = OnlineTrainer(self.config, sink=sink, dist=self.dist)
            trainer.source_identity = expect.source
            return trainer
        trainer = OnlineTrainer.resume(chosen, config=self.config, sink=sink, dist=self.dist, expect=expect)
        if self.dist.is_main:
            for line in ([note] if note else []) + expect.notes:
                print(line, flush=True)
            print(f"resumed from {chosen}: {trainer.position:,} events already learned", flush=True)
        return trainer

    def _stream(self, trainer: OnlineTrainer, idle_timeout_s: float | None):
        if self.topic is None:
            return self.source, None
        from ..connectors.kafka import KafkaSource

        source = None
        if self.dist.is_main:
            source = KafkaSource(
                self.topic, bootstrap_servers=self.bootstrap, store=trainer.store,
                dead_letter_topic=self.dead_letter_topic, max_batch_events=self._max_batch(),
            ).start()  # fmt: skip
        idle = trainer.serving.publish  # the last refreshed rows go out while the topic is quiet
        return BroadcastSource(source, self.dist, idle_timeout_s=idle_timeout_s, on_idle=idle), source

    def _sharded(self, sink, idle_timeout_s: float | None):
        """This rank's trainer (resumed where every rank checkpointed) and its partitions of the stream."""
        if self.resume.checkpoint is not None:
            raise ConfigError(
                "resume.checkpoint (--resume-from) names one checkpoint of a one-process or replicated run; "
                "a sharded run resumes from the newest step every rank holds in train.checkpoint_dir"
            )
        if self.config.checkpoint_dir:
            check_folder(Path(self.config.checkpoint_dir), sharded=True)
        expect = self._expectation()
        trainer = ShardedTrainer.resume(
            self.config.checkpoint_dir, config=self.config, dist=self.dist, sink=sink, expect=expect
        )
        offsets = trainer.start_offsets
        self._chosen = trainer.resumed_from
        if trainer.steps and self.dist.is_main:
            for line in expect.notes:
                print(line, flush=True)
            print(f"resumed from {self.config.checkpoint_dir}: {trainer.position:,} events already learned",
                  flush=True)  # fmt: skip
        if self.topic is None:
            return trainer, local_source(self.source, trainer.ownership, offsets)
        local = KafkaPartitions(
            self.topic, trainer.ownership, idle_timeout_s=idle_timeout_s, bootstrap_servers=self.bootstrap,
            start_offsets=offsets, dead_letter_topic=self.dead_letter_topic,
            max_batch_events=self._max_batch(),
        )  # fmt: skip
        self._source = local.source
        return trainer, local

    def _labelled(self, trainer) -> LabelledStream:
        """The task's label stream, continued from the checkpoint resumed when it holds the task's state."""
        labelled = LabelledStream.open(
            self.task, trainer, bootstrap=self.bootstrap, registry=self.metrics.registry
        )
        if self._chosen is not None:
            from ..shard.checkpoint import KIND
            from ..train.checkpoint import load_tensors

            path, _, state = load_tensors(self._chosen, kind=KIND if self.sharded else "trainer")
            if "task" in state:
                note = labelled.load_state(state["task"], str(path))
                if note:
                    print(note, flush=True)
            else:
                print(f"{path} holds no task state: the task's head starts now", flush=True)
        trainer.attached["task"] = labelled  # told of each step, saved in its checkpoints
        return labelled

    def _max_batch(self) -> int:
        """Events per source batch: room for the batches the budget grows to (``FollowConfig``)."""
        return max(10 * self.config.batch_size, self.config.follow.max_batch_size)

    # ------------------------------------------------------------------ monitoring
    def _on_step(self, batch, result, arrival: float) -> None:
        m, trainer = self.metrics, self.trainer
        if self.labelled is not None:
            self.labelled.after_step(batch)
        m.ingested.inc(len(batch))
        for letter in result.dead_letters:
            m.dead_letter(letter.reason)
        if self._source is not None and result.dead_letters:
            # sharded: the letters about the rows this rank read, which its batcher traces to their messages
            (trainer.batcher if self.sharded else self._source).report_dead_letters(result.dead_letters)
        elif result.dead_letters and isinstance(self.source, EventSource):  # (sharded: or a factory)
            self.source.report_dead_letters(result.dead_letters)  # a file's tally: the command shows them
        if trainer.table is not None:
            m.freshness.observe(time.perf_counter() - arrival)
        if trainer.metrics.windows:
            w = trainer.metrics.windows[-1]
            for name, gauge in m.window.items():
                gauge.set(getattr(w, name))
            m.loss.set(w.loss)
        m.steps.set(trainer.steps)
        m.position.set(trainer.position)
        m.learned.set(trainer.learned)
        if trainer.budget is not None:  # what the budget learned from and evaluated so far
            budget = trainer.budget
            m.learned_fraction.set(budget.learned_events / budget.events if budget.events else 1.0)
            m.evaluated.set(budget.evaluated)
            m.batch_size.set(budget.batch_size)

    @staticmethod
    def _fingerprint(trainer) -> int:
        """CRC32 of the model's parameters: equal across replicas that agree."""
        params = torch.cat([p.detach().reshape(-1).cpu() for p in trainer.model.parameters()])
        return zlib.crc32(params.numpy().tobytes())

    def _lag(self) -> dict[str, int]:
        if self._source is None:
            return {}
        from ..connectors.kafka import TopicReader, partition_key

        if self._lag_reader is None:
            self._lag_reader = TopicReader(self.bootstrap)
        positions = self._source.positions()
        read = self._lag_reader.partitions(self.topic)
        if self.sharded:  # a rank reads its own partitions
            own = self.trainer.ownership
            read = [p for p in read if own.rank_of(p) == own.rank]
        ends = self._lag_reader.end_offsets(self.topic, read)
        keys = {p: partition_key(self.topic, p) for p in read}
        lag = {keys[p]: max(0, ends[p] - positions.get(keys[p], 0)) for p in read}
        self.metrics.set_lag(lag)
        return lag

    def _status(self) -> str:
        trainer = self.trainer
        if trainer is None:
            return "starting"
        pos = trainer.position
        rate = self._rate(pos)
        self.metrics.events_per_s.set(rate)
        w = trainer.metrics.windows[-1] if trainer.metrics.windows else None
        quality = f"window AP {w.ap:.4f} MRR {w.mrr:.4f}" if w else "no window closed yet"
        budget = trainer.budget
        if budget is not None and budget.follow.budgeted and budget.events:  # what the figures are of
            share = budget.learned_events / budget.events
            quality += f" (a sample: {budget.evaluated:,} events scored), learned from {share:.0%} of events"
        if self.labelled is not None:
            quality += f"; {self.labelled.text()}"
        lag = sum(self._lag().values()) if self._source is not None else None
        return (
            f"rank {self.dist.rank}/{self.dist.world_size}: {pos:,} events ({rate:,.0f}/s), "
            f"step {trainer.steps:,}, {quality}" + ("" if lag is None else f", lag {lag:,} messages")
        )

    # ------------------------------------------------------------------ run
    def run(
        self,
        *,
        idle_timeout_s: float | None = None,
        max_events: int | None = None,
        progress: bool = True,
        total: int | None = None,
    ) -> OnlineResult:
        from contextlib import ExitStack

        if self.metrics_port is not None:
            from prometheus_client import start_http_server

            # one port per process of a node: torchrun --nproc-per-node N takes ports PORT..PORT+N-1
            port = self.metrics_port + int(os.environ.get("LOCAL_RANK", "0"))
            try:
                start_http_server(port, registry=self.metrics.registry)
            except OSError as exc:
                raise ConfigError(f"cannot serve metrics on port {port}: {exc.strerror or exc}") from None
        with ExitStack() as stack:
            sink = None  # replicated: rank 0 publishes every row; sharded: each rank its own vertices'
            if self.embeddings_topic and (self.dist.is_main or self.sharded) and self.config.serve_every:
                from ..connectors.sink import KafkaSink

                sink = stack.enter_context(
                    KafkaSink(self.bootstrap, embeddings_topic=self.embeddings_topic, fmt="binary")
                )
            if self.sharded:
                trainer, stream = self._sharded(sink, idle_timeout_s)
                if stream is not self.source:
                    stack.callback(stream.close)  # a source made here (a Kafka consumer) is closed here
            else:
                trainer = self._trainer(sink)
                stream, self._source = self._stream(trainer, idle_timeout_s)
                if self._source is not None:
                    stack.callback(self._source.close)
            self.trainer = trainer
            if self.task is not None:
                self.labelled = self._labelled(trainer)
                stack.callback(self.labelled.close)
            # computed when scraped, not per step (a CRC of every parameter took 4 ms a batch, a third of
            # a state-only step on a quiet host: benchmarks/RESULTS.md, issue 32)
            self.metrics.fingerprint.set_function(lambda: self._fingerprint(trainer))
            log = IntervalLog(f"train rank {self.dist.rank}", self._status, self.log_every_s)
            stack.callback(log.stop)
            # where the job ends, counted from the stream's start: the same command ends at the same
            # point whether or not an earlier run was interrupted
            more = None if max_events is None else max(0, max_events - trainer.position)
            result = trainer.fit(
                stream,
                max_events=more,
                progress=progress and self.dist.is_main,
                total=total,
                on_step=self._on_step,
            )
        if self._lag_reader is not None:  # a status asked after the run opens a new one
            self._lag_reader.close()
            self._lag_reader = None
        if result.events == 0 and trainer.position:
            print(f"nothing left to do: the source holds no events after the {trainer.position:,} learned")
        if self.out_dir and self.dist.is_main and result.windows:
            result = write_report(result, self.out_dir)
        if self.out_dir and self.labelled is not None and self.dist.is_main:  # (sharded: every rank's)
            self.labelled.write(Path(self.out_dir) / "task.json")
        return result
