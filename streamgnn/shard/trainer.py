"""ShardedTrainer: partition-parallel test-then-train; each rank holds its partitions' graph and memory.

Per global batch (identical on every rank, see ``GlobalBatcher``), the same protocol as ``OnlineTrainer``:

1. ``GlobalIndex.admit``: validation, event-id dedup, lateness and global ids, the same on every rank;
2. each rank takes the positives whose source it owns (the events it read) and draws their negatives: the
   pool of destinations is replicated, the history of a source lives with its owner, and each event's draw is
   keyed by its place in the global batch, so the draws are those one process makes;
3. the owner of each queried vertex embeds it (``Embedder``): it samples the vertex's neighbors from its
   complete adjacency and gathers the memory rows of the tree (exact: other ranks' rows from their owners,
   pending messages included; communication-free: every rank embeds its own queries from its shard, other
   ranks' rows from a halo copy at most ``staleness`` batches old), and each rank reads the pair features of
   its events (``ShardPairs``: the source's side from its shard, the destination's from its owner);
4. the batch goes into each shard (events with an owned endpoint: a cut edge is kept by both owners);
5. scores are gathered, gradients averaged so that they equal the one-process gradient, and each owner
   commits its vertices' memory updates;
6. every ``serve_every`` batches each rank refreshes the served rows of the vertices it owns that the
   batches touched (``ShardServing``: a collective) and publishes them to its sink every ``publish_every``
   refreshes.

Exact mode therefore computes what one process computes (same samples, memory rows, losses; the model within
float tolerance): only reduction orders differ. Training dropout draws different masks for different
tensor shapes, so equality across world sizes holds with ``dropout=0``, as for the replicated mode.

The model is driven through the ``LinkModel`` protocol alone, in the online loop's order (``prepare`` before
the shards hold the batch, ``score``, ``train``, ``observe``, ``embed`` to serve), and so are the baselines
of ``TrainConfig.baselines``, scored on the same negatives. ``StepInput.scorer`` names each event's rank (the
owner of its source): a model scores and trains ``StepInput.rows`` and sums its loss over ranks. What a
model must provide to run sharded: that protocol, and its stream state in parts that live with the shards.
TGN gets them as its access (``tgn_access``: owners embed and commit memory, ``ShardPairs`` reads pair
features), its memory rows and halo as a ``state.RankState`` its access hands over (``tgn_state``);
DyGFormer a neighbor reader (``sequences``: each vertex's sequence from its owner, or from the shard when
communication-free); EdgeBank needs none (it keeps the pairs of the sources its rank owns). What stays here
is the distribution: admission, ownership, ingest into the shards and the exchange of scores; it calls the
models' rank states (``states``) where the shard changes and reads their bytes through ``LinkModel.nbytes``.

Lateness with several sources: ``GlobalIndex.admit`` judges it on the global batches, which merge the ranks'
reads by time, so an event is late only against the batches already cut (its rank read it after the
watermark passed its time), never against another partition's newer rows. A replayed file is handed out in
time order, so one process reading it row by row can dead-letter an event that a sharded run keeps (README,
"Scale out").
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import numpy as np
import torch

from ..embeddings import EmbeddingSink, EmbeddingTable
from ..errors import ConfigError
from ..events import EventBatch, EventKind
from ..store import StoreConfig, TemporalGraphStore
from ..train.config import ShardConfig, TrainConfig
from ..train.distributed import DistContext, init_distributed, local_device
from ..train.driver import Batches, Drive, StepHook
from ..train.edgebank import make_baseline
from ..train.metrics import RunningMetrics
from ..train.models import make_link_model
from ..train.negatives import StreamNegatives
from ..train.protocol import StepInput
from ..train.resume import Expectation
from ..train.step import OnlineResult, Positives, StreamTrainer
from . import checkpoint
from .batches import GlobalBatcher
from .comm import Collectives
from .ownership import GlobalIndex, Ownership, as_one_store
from .sequences import shard_neighbors
from .serving import ShardServing, owned_vertices
from .source import LocalSource
from .state import PARTS, RankState
from .tgn_access import shard_access

ADD, UPDATE = int(EventKind.EDGE_ADD), int(EventKind.NODE_UPDATE)


class ShardedTrainer(StreamTrainer):
    """One rank of a sharded run; ``step`` takes each global batch (every rank the same one, in step), ``fit``
    reads this rank's ``LocalSource`` and agrees on the global batches with the other ranks.

    >>> from streamgnn.datasets import load
    >>> from streamgnn.nn import TGNConfig
    >>> from streamgnn.shard import PartitionedReplay, ShardConfig
    >>> model = TGNConfig(memory_dim=8, time_dim=8, embedding_dim=8)  # pair features included
    >>> trainer = ShardedTrainer(TrainConfig(model=model, sharding=ShardConfig()))  # alone: owns everything
    >>> events = load("jodie_wikipedia")[:600]
    >>> trainer.fit(PartitionedReplay(events, trainer.ownership), progress=False).events
    600
    """

    def __init__(
        self, config: TrainConfig, *, dist: DistContext | None = None, sink: EmbeddingSink | None = None
    ):
        self.config, self.shard_config = config, config.sharding or ShardConfig()
        dataclasses.replace(config, sharding=self.shard_config)  # what a sharded config refuses
        if config.train_negative_pool in ("id_range", "train_part"):
            raise ConfigError(
                "sharded training draws negatives from the replicated pool of seen destinations: use "
                f"train_negative_pool='seen_blank' or 'seen', not {config.train_negative_pool!r}"
            )
        self.dist = dist or init_distributed()
        self.device = local_device(config.device)
        d = self.dist
        self.ownership = Ownership.of(self.shard_config, d.world_size, d.rank)
        self.exchange = Collectives(d.rank, d.world_size, self.device)
        self.index = GlobalIndex(self.ownership, config.allowed_lateness)
        self.store = TemporalGraphStore(StoreConfig(dense_ids=True))  # this rank's shard, in global ids
        self.exact = self.shard_config.mode == "exact"
        self.states: list[RankState] = []  # the models' state that lives with the shards: their access's own
        torch.manual_seed(config.seed)
        self.link_model = make_link_model(
            config, device=self.device, dist=d, access=shard_access(self), neighbors=shard_neighbors(self)
        )
        # each rank's baselines keep the pairs of the sources it owns: those of the events it scores
        self.baselines = {name: make_baseline(name, config, self.index.owned) for name in config.baselines}
        self.baseline_metrics = {name: RunningMetrics(config.window_events) for name in self.baselines}
        self.rebind_store()
        # pool replicated, history of owned sources only
        self.negatives = StreamNegatives(config.seed, config.train_negative_pool)
        self.metrics = RunningMetrics(config.window_events)
        # every rank serves (and publishes to its ``sink``) the rows of the vertices it owns
        out_dim = self.link_model.out_dim
        table = EmbeddingTable(out_dim) if config.serve_every > 0 and out_dim is not None else None
        self.serving = ShardServing(
            table, sink, serve_every=config.serve_every, publish_every=config.publish_every,
            total=lambda n: int(self.dist.all_sum([n], self.device)[0]),
        )  # fmt: skip
        self.steps = self.learned = self.position = self.dead_letter_count = 0
        self.attached = {}  # a labelled task's stream (``jobs.labelled``), on every rank
        self.admitted_rows = np.zeros(0, np.int64)  # rows of the last batch the global index admitted
        self.resumed_from: Path | None = None  # this rank's checkpoint the trainer was resumed from
        self.batcher: GlobalBatcher | None = None
        self.start_offsets: dict[str, int] = {}  # where this rank's source resumes (``resume``'s)
        # a checkpoint's batcher ``state()``, for the batcher the next ``fit`` builds (``from_state``)
        self.saved_batcher: dict[str, np.ndarray] | None = None

    def rebind_store(self) -> None:
        """Point every model at ``self.store`` (after a checkpoint replaced it)."""
        for model in self.stream_models():
            model.attach(self.store)

    # ------------------------------------------------------------------ the stream
    def fit(
        self, source: LocalSource, *, max_events: int | None = None, progress: bool = True,
        total: int | None = None, on_step: StepHook | None = None,
    ) -> OnlineResult:  # fmt: skip
        """Train on this rank's ``source`` (every rank calls ``fit`` with its own) until every source is done
        or ``max_events`` more global events; checkpoints every ``checkpoint_every`` global batches (at the
        same batch on every rank) and at the end. ``on_step``: as ``OnlineTrainer.fit``'s."""
        cfg = self.config
        parts = (source, self.ownership, self.exchange, cfg.batch_size)
        idle = self.serving.publish  # while the stream is idle, the last refreshed rows go out
        saved, self.saved_batcher = self.saved_batcher, None
        if saved is None:
            self.batcher = GlobalBatcher(*parts, on_idle=idle)
        else:
            self.batcher = GlobalBatcher.from_state(saved, self.index.seen.contains, *parts, on_idle=idle)
        return self.drive(
            self._global_batches, lambda: self.save_checkpoint(source.positions()),
            lag=None if source.replay else source.lag, max_events=max_events, progress=progress, total=total,
            on_step=on_step,
        )  # fmt: skip

    def _global_batches(self, drive: Drive) -> Batches:
        """The global batches the ranks agree on (``drive``'s generator), of ``drive.batch_size`` events (the
        budget's plan: the same on every rank), the last cut at ``drive.room()``. Counts the rows this rank's
        source could not take (undecodable, invalid) as they come, so checkpoints hold them."""
        seen = self.batcher.source.dead_letter_count()
        try:
            while True:
                self.batcher.batch_size = drive.batch_size(self.config.batch_size)
                if (batch := self.batcher.next_batch(drive.room())) is None:
                    break
                seen = self._count_source_letters(seen)
                yield batch, time.perf_counter(), True
        finally:
            self._count_source_letters(seen)

    def _count_source_letters(self, seen: int) -> int:
        """Add the letters the batcher and the source made since the source's count was ``seen``."""
        now = self.batcher.source.dead_letter_count()
        self.dead_letter_count += len(self.batcher.dead_letters) + now - seen
        self.batcher.dead_letters.clear()
        return now

    def _write_checkpoint(self, root: Path, offsets: dict[str, int]) -> Path:
        """Every rank writes its own (``shard.checkpoint``)."""
        return checkpoint.save(self, root, offsets)

    @classmethod
    def resume(
        cls,
        checkpoint_dir: str | Path | None,
        *,
        config: TrainConfig | None = None,
        expect: Expectation | None = None,
        dist: DistContext | None = None,
        sink: EmbeddingSink | None = None,
    ) -> ShardedTrainer:
        """A trainer at the newest step every rank checkpointed under ``checkpoint_dir`` (the one resume
        signature: ``train.resume``; None: ``config.checkpoint_dir``; a fresh trainer if there is none),
        and in ``start_offsets`` the source offsets this rank resumes at (give them to its source).
        ``config`` defaults to the one this rank's newest checkpoint saved. A resumed trainer serves every
        vertex it owns at once (checkpoints do not hold the served rows)."""
        dist = dist or init_distributed()
        if checkpoint_dir is None and config is not None and config.checkpoint_dir:
            checkpoint_dir = config.checkpoint_dir
        root = Path(checkpoint_dir) if checkpoint_dir else None
        if config is None:
            config = dataclasses.replace(checkpoint.saved_config(root, dist.rank), checkpoint_dir=str(root))
        trainer = cls(config, dist=dist, sink=sink)
        trainer.source_identity = expect.source if expect is not None else None
        step = None if root is None else checkpoint.common_step(trainer, root)
        if step is None:
            return trainer
        trainer.start_offsets = checkpoint.load(trainer, root, step, expect)
        trainer.resumed_from = checkpoint.step_dir(root, dist.rank, step)
        trainer.serving.refresh(trainer.index, trainer._embed, owned_vertices(trainer.index))
        return trainer

    def batcher_state(self) -> dict[str, np.ndarray]:
        if self.batcher is None:
            return self.saved_batcher or {}
        return self.batcher.state()

    def nbytes(self) -> dict[str, int]:
        """This rank's bytes by part, from each part's own accounting (allocated capacity included)."""
        parts = dict.fromkeys(PARTS, 0)  # a part the model does not hold reads 0
        parts.update(
            store=self.store.nbytes()["total"], index=self.index.nbytes(),
            negatives=self.negatives.sampler.nbytes() if self.negatives.ready else 0,
        )  # fmt: skip
        parts.update(self.link_model.nbytes())
        for name, bank in self.baselines.items():
            parts[f"baseline.{name}"] = sum(bank.nbytes().values())
        parts["total"] = sum(parts.values())
        return parts

    # ------------------------------------------------------------------ the step's distribution hooks
    @property
    def served(self) -> GlobalIndex:
        return self.index

    def _admit(self, batch: EventBatch, ingest: bool) -> Positives:
        """``GlobalIndex.admit`` (the same on every rank); the rank states get the vertices it added that
        this rank owns. Each positive is scored and trained by the owner of its source: the rank that
        read it."""
        if not ingest:
            raise ConfigError("a sharded step ingests every batch it steps (ingest=False is one process's)")
        before = self.index.num_nodes
        adm = self.index.admit(batch)
        self.admitted_rows = adm.rows  # the same on every rank (a labelled task's features follow them)
        new = np.arange(before, self.index.num_nodes)
        for state in self.states:
            state.add_vertices(new[self.index.owned(new)])
        add = batch.kind[adm.rows] == ADD
        src, dst = adm.src[add], adm.dst[add]
        scorer = self.index.owner(src).astype(np.int64)
        return Positives(adm.rows[add], adm.pre_src[add], adm.pre_dst[add], src, dst, before, scorer, adm)

    def _apply(self, batch: EventBatch, pos: Positives) -> list:
        return self._ingest(batch, pos.admitted)

    def _gather(self, local: np.ndarray, view: StepInput) -> np.ndarray:
        return self._gather_rows(local, view.scorer, len(view.scorer))

    def _observed(self, pos: Positives) -> None:
        """The pool is replicated, the history of owned sources only; the rank states step."""
        self.negatives.observe(pos.src, pos.dst, history=self.index.owned(pos.src))
        for state in self.states:
            state.stepped(self.steps)

    def _touched(self, batch: EventBatch, pos: Positives) -> np.ndarray:
        """The owned vertices of every admitted event."""
        adm = pos.admitted
        touched = np.concatenate([adm.src, adm.dst])
        touched = np.unique(touched[touched >= 0])
        return touched[self.index.owned(touched)]

    def _known(self, ext: np.ndarray) -> np.ndarray:
        raise ConfigError("a sharded step draws its own negatives (fixed ones are fit_offline's)")

    def _all_dead_letters(self) -> int:
        return int(self.dist.all_sum([self.dead_letter_count], self.device)[0])

    def _embed(self, gids: np.ndarray, t: float) -> np.ndarray:
        """Served rows of owned ``gids`` at time ``t`` (a collective: every rank calls)."""
        return self.link_model.embed(gids, t, self.index.num_nodes, self.steps)

    def _ingest(self, batch: EventBatch, adm) -> list:
        """Events with an owned endpoint into the shard (global ids). Returns the dead letters this rank
        reports, so that each is reported once, by the rank that read its row (the owner of the event's
        source partition), which knows the row's message: the index's (the same on every rank) and its
        shard's."""
        refused = batch.take(np.array([letter.index for letter in adm.dead_letters], np.int64))
        reader = self.ownership.rank_of(self.ownership.source_partitions(refused))
        letters = [letter for letter, r in zip(adm.dead_letters, reader, strict=True) if r == self.dist.rank]
        letters = [as_one_store(letter, batch, letter.index) for letter in letters]
        kind = batch.kind[adm.rows]
        owned_src = self.index.owned(adm.src)
        mine = owned_src | (self.index.owned(adm.dst) & (kind != UPDATE))
        rows = adm.rows[mine]
        if len(rows):
            part = batch.take(rows)
            src = adm.src[mine]
            dst = np.where(kind[mine] == UPDATE, src, adm.dst[mine])
            shard_batch = EventBatch(part.kind, src, dst, part.t, part.eid, part.weight, part.features)
            report = self.store.ingest(shard_batch, "shard")
            for state in self.states:
                state.ingested(shard_batch)
            reported = owned_src[mine]
            for letter in report.dead_letters:
                if reported[letter.index]:
                    letters.append(as_one_store(letter, batch, int(rows[letter.index]), shard_batch))
        self.dead_letter_count += len(letters)
        return letters

    def _gather_rows(self, local: np.ndarray, scorer: np.ndarray, m: int) -> np.ndarray:
        """Every rank's score rows in global batch order (``scorer``: each row's rank)."""
        rows_of = [np.flatnonzero(scorer == r) for r in range(self.exchange.world_size)]
        expect = [[len(rows)] for rows in rows_of]  # every rank knows whose rows are whose
        got = self.exchange.all_to_all([(local,)] * len(rows_of), "scores", expect)
        full = np.full((m, local.shape[1]), math.nan)
        for rows, (vals,) in zip(rows_of, got, strict=True):
            full[rows] = vals
        return full
