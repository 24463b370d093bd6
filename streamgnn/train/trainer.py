"""OnlineTrainer: prequential (test-then-train) training of a link model (TGN by default) on any stream.

Per global batch, ``step.StreamTrainer.step`` (the step every online trainer runs, written once): the
store's admission decides the batch's positives (``TemporalGraphStore.admit``), neighborhoods are sampled
from the store before it holds the batch (``apply``), strictly before the query time (the batch's first
event time, ``query_time="batch"``: each distinct node embedded once, or each event's time), the batch is
scored with the model as it was, trained on, fed to the model, and touched nodes get fresh embeddings.

So no score of an event depends on that event or on any later one: the memory holds earlier batches only,
neighbors are earlier events, and negatives come from the past. Nodes first seen in the batch read a blank
memory row, exactly as their own rows would before ``observe``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from ..checkpoint import load_rng_state
from ..embeddings import EmbeddingSink, EmbeddingTable, LatencyTracker
from ..errors import ConfigError
from ..events import DeadLetter, EventBatch, EventKind
from ..sources import EventSource, as_source
from ..store import StoreConfig, TemporalGraphStore
from . import checkpoint
from .config import TrainConfig
from .distributed import DistContext, init_distributed, local_device
from .driver import Batches, Drive, StepHook
from .edgebank import make_baseline
from .metrics import RunningMetrics
from .models import make_link_model
from .negatives import StreamNegatives
from .protocol import Candidates, LinkModel, StepInput
from .resume import Expectation
from .serving import Serving
from .step import OnlineResult, Positives, StepResult, StreamTrainer, local_scores, query_times

__all__ = ["OnlineResult", "OnlineTrainer", "StepResult"]


class OnlineTrainer(StreamTrainer):
    """Test-then-train over a stream, with running metrics, serving, checkpoints and data parallelism.

    ``store`` may already hold history (its memory starts blank). On rank 0 an ``EmbeddingTable`` is kept
    when ``config.serve_every`` > 0 (pass ``table`` to share one with readers); ``sink`` receives it every
    ``config.publish_every`` refreshes. ``link_model``: any ``LinkModel`` to drive instead of the model that
    ``config.model`` describes (``models.make_link_model``).

    The per-batch step and the stream loop are ``step.StreamTrainer``'s (the sharded trainer's too); this
    class gives its one-process / replicated distribution hooks (the store's admission, the replicated score
    rows); the seams are modules of their own: the model (``protocol.LinkModel``, TGN's in ``tgn_model``),
    negatives (``negatives``), serving (``serving``) and checkpoints (``checkpoint``).
    """

    def __init__(
        self,
        config: TrainConfig,
        store: TemporalGraphStore | None = None,
        *,
        table: EmbeddingTable | None = None,
        sink: EmbeddingSink | None = None,
        dist: DistContext | None = None,
        link_model: LinkModel | None = None,
    ) -> None:
        if config.sharding is not None:
            raise ConfigError(
                "config.sharding is set: OnlineTrainer replicates the whole store on every rank; use "
                "run_online or TrainJob (which switch on it) or streamgnn.shard.ShardedTrainer"
            )
        self.config = config
        self.dist = dist or init_distributed()
        self.device = local_device(config.device)
        torch.manual_seed(config.seed)
        self.link_model = link_model or make_link_model(config, device=self.device, dist=self.dist)
        self.store = self._admitting(store)
        out_dim = self.link_model.out_dim
        serving = config.serve_every > 0 and self.dist.is_main and out_dim is not None
        if table is not None and table.dim != out_dim:
            raise ConfigError(f"the table holds {table.dim}-d rows but the model embeds {out_dim}-d")
        self.serving = Serving(
            (table or EmbeddingTable(out_dim)) if serving else None, sink,
            serve_every=config.serve_every, publish_every=config.publish_every,
        )  # fmt: skip
        self.metrics = RunningMetrics(config.window_events)
        self.baselines = {name: make_baseline(name, config) for name in config.baselines}
        self.baseline_metrics = {name: RunningMetrics(config.window_events) for name in self.baselines}
        self.steps = 0
        self.attached = {}
        self.position = 0  # events consumed from the source
        self._replayed = 0  # events a replayed source must skip (set by ``resume``)
        self.learned = 0
        self.dead_letter_count = 0
        # the last batch's admitted edge additions (a labelled task's stream features follow them)
        self.admitted_rows = np.zeros(0, np.int64)
        self.negatives = StreamNegatives(config.seed, config.train_negative_pool)
        self.negatives.rebuild(self.store)
        for model in self.stream_models():
            model.attach(self.store)
        if self.table is not None and self.store.num_nodes:
            self.refresh(np.arange(self.store.num_nodes))  # history nodes are servable before any step

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:
        return getattr(self.link_model, "optimizer", None)

    @property
    def sink(self) -> EmbeddingSink | None:
        return self.serving.sink

    @property
    def latency(self) -> LatencyTracker:
        return self.serving.latency

    # ------------------------------------------------------------------ the step's distribution hooks
    @property
    def served(self) -> TemporalGraphStore:
        return self.store

    def _admit(self, batch: EventBatch, ingest: bool) -> Positives:
        """The store's admission decides (``TemporalGraphStore.admit``: nothing applied yet); its edge
        additions are the positives. ``ingest=False``: the store already holds the batch, every valid edge
        addition is one (duplicates included) and the graph stays as it is."""
        if not ingest:
            _, letters = batch.validate()
            ok = batch.kind == EventKind.EDGE_ADD
            ok[[letter.index for letter in letters]] = False
            rows = self.admitted_rows = np.flatnonzero(ok)
            src, dst = self._known(batch.src[rows]), self._known(batch.dst[rows])
            return Positives(rows, src, dst, src, dst, self.store.num_nodes, self.dist.scorers(len(rows)))
        adm = self.store.admit(batch)
        add = batch.kind[adm.rows] == EventKind.EDGE_ADD
        src, dst = adm.src[add], adm.dst[add]
        pre_src, pre_dst = adm.known_before(src), adm.known_before(dst)
        rows = self.admitted_rows = adm.rows[add]
        return Positives(rows, pre_src, pre_dst, src, dst, adm.first_new, self.dist.scorers(len(rows)), adm)

    def _apply(self, batch: EventBatch, pos: Positives) -> list[DeadLetter]:
        if pos.admitted is None:  # (ingest=False)
            return []
        letters = self.store.apply(batch, pos.admitted).dead_letters
        self.dead_letter_count += len(letters)
        return letters

    def _gather(self, local: np.ndarray, view: StepInput) -> np.ndarray:
        return self.dist.gather_rows(local, len(view.scorer), self.device)

    def _observed(self, pos: Positives) -> None:
        self.negatives.observe(pos.src, pos.dst)

    def _touched(self, batch: EventBatch, pos: Positives) -> np.ndarray:
        """The positives' nodes and the known nodes of the batch's node updates and edge deletions."""
        upd, dele = batch.kind == EventKind.NODE_UPDATE, batch.kind == EventKind.EDGE_DELETE
        if not (upd.any() or dele.any()):
            return np.concatenate([pos.src, pos.dst])
        nodes = self._known(np.concatenate([batch.src[upd | dele], batch.dst[dele]]))
        return np.concatenate([pos.src, pos.dst, nodes[nodes >= 0]])

    def score_pairs(
        self,
        src: np.ndarray,
        dst: np.ndarray,
        t: np.ndarray,
        candidates: np.ndarray | None = None,
        query_time: str | None = None,
    ) -> np.ndarray:
        """Logits of edges ``(src[i], dst[i])`` at times ``t`` (external ids), scored as ``step`` scores a
        positive, from the state now and changing none of it: for negatives that replace the source as
        well as the destination (DyGLib's historical and inductive ones), which ``step`` cannot rank.

        ``candidates``: external ids ``[m, q]`` (``-1``: none) to score as each row's destination too:
        ``[m, 1 + q]``, the edge's logit then each candidate's (NaN for none), for an evaluator of its own
        (TGB's); one process only. Without: ``[m]``. ``query_time``: as ``step``'s."""
        t = np.asarray(t, np.float64)
        m, d, lm = len(t), self.dist, self.link_model
        pre_src, pre_dst = self._known(np.asarray(src)), self._known(np.asarray(dst))
        t_query = query_times(t, query_time or self.config.query_time)
        view = StepInput(pre_src, pre_dst, t, t_query, self.store.num_nodes, d.scorers(m), d.rank, self.steps)
        if candidates is None:
            cands = Candidates(pre_dst[:, None], np.ones((m, 1), bool), False)  # (column 0 is unused)
            local = local_scores(lm, lm.prepare(view, cands, None), cands, view.rows)
            return d.gather_rows(local, m, self.device)[:, 0]
        if d.world_size > 1:
            raise ConfigError("score_pairs with candidates runs in one process (its logits are not gathered)")
        valid = np.asarray(candidates) >= 0
        ids = self._known(np.where(valid, candidates, np.asarray(dst)[:, None]).reshape(-1)).reshape(m, -1)
        cands = Candidates(ids, valid, True)
        _, ranked = lm.score(lm.prepare(view, cands, None)) if m else (None, np.zeros((0, 1 + ids.shape[1])))
        return np.where(np.c_[np.ones((m, 1), bool), valid], ranked, np.nan)

    def _known(self, ext: np.ndarray) -> np.ndarray:
        """Internal ids, -1 where unknown (an empty store knows nothing, whatever the id type)."""
        if not self.store.num_nodes:
            return np.full(len(ext), -1, np.int64)
        return self.store.node_index(ext, strict=False)

    # ------------------------------------------------------------------ serving
    def _embed(self, nodes: np.ndarray, t: float) -> np.ndarray:
        return self.link_model.embed(nodes, t, self.store.num_nodes, self.steps)

    def refresh(self, nodes: np.ndarray | None = None) -> None:
        """Recompute the table rows of ``nodes`` (internal ids; default: those touched since the last
        refresh) as of just after the newest event, pending memory messages applied."""
        self.serving.refresh(self.store, self._embed, nodes)

    # ------------------------------------------------------------------ the stream
    def fit(
        self,
        source: EventSource | Iterable[EventBatch],
        *,
        positions: Callable[[], dict[str, int]] | None = None,
        max_events: int | None = None,
        progress: bool = True,
        total: int | None = None,
        lag: Callable[[], int | None] | None = None,
        on_step: StepHook | None = None,
    ) -> OnlineResult:
        """Consume ``source`` to its end (or ``max_events`` more events), test-then-train, checkpointing
        every ``checkpoint_every`` batches and at the end.

        ``source`` is an ``streamgnn.sources.EventSource`` or batches held in memory. Each source batch is cut
        into ``batch_size`` global batches. ``positions`` (default: the source's own, for a source that is not
        a ``replay``, as ``KafkaSource``) gives offsets to save with each checkpoint; such a source is trusted
        to start where the restored store's offsets say (build it with ``store=trainer.store``), and it is
        checkpointed only between its batches so offsets and state agree. A replay is read from its start:
        right after ``resume``, the events the checkpoint had consumed are skipped. ``lag`` (default: a live
        source's own; a replay is read at the trainer's pace, never behind) gives the events the source is
        behind, for ``config.follow``'s budget. ``on_step(batch, result, arrival)``: called after each step
        (``driver.Drive``'s hook).
        """
        source = as_source(source)
        # a replay's offset is the events handed out (``position``); a live source's, its own
        positions = positions or (None if source.replay else source.positions)
        skip = 0 if positions is not None else self._replayed
        self._replayed = 0
        return self.drive(
            lambda drive: self._global_batches(source, skip, drive, by_offsets=positions is not None),
            lambda: self.save_checkpoint(None if positions is None else positions()),
            lag=lag or (None if source.replay else source.lag), max_events=max_events, progress=progress,
            total=total, on_step=on_step,
        )  # fmt: skip

    def _global_batches(self, source: EventSource, skip: int, drive: Drive, *, by_offsets: bool) -> Batches:
        """``source`` cut into global batches of ``drive.batch_size`` (``batch_size``, or the budget's as the
        lag grows; ``drive``'s generator), less its first ``skip`` events and cut at ``drive.room()``; with
        ``by_offsets``, a checkpoint may follow only the last batch of a source batch. Counts the source's
        own dead letters as they come, so checkpoints hold them (but not again for batches a resumed run
        replays)."""
        batches = iter(source)  # (a file source starts its pass's dead-letter list here)
        letters_seen = source.dead_letter_count()
        try:
            for raw in batches:
                arrival = time.perf_counter()
                cut = min(skip, len(raw))
                skip -= cut
                letters = source.dead_letter_count()
                if cut < len(raw) or not len(raw):
                    self.dead_letter_count += letters - letters_seen
                letters_seen = letters
                rest = raw[cut:]
                while len(rest):
                    size = drive.batch_size(self.config.batch_size)
                    chunk, rest = rest[:size], rest[size:]
                    left = drive.room()
                    whole = left is None or len(chunk) <= left
                    chunk = chunk if whole else chunk[:left]
                    if not len(chunk):
                        return
                    yield chunk, arrival, not by_offsets or (whole and not len(rest))
                if drive.room() == 0:
                    return
        finally:
            if not skip:
                self.dead_letter_count += source.dead_letter_count() - letters_seen

    def reset_stream(self, store: TemporalGraphStore | None = None, *, negative_pairs: bool = True) -> None:
        """Start a new pass over a replayed stream: fresh store (default: empty), blank memory and negative
        history; learned parameters and optimizer state stay (e.g. between offline epochs).
        ``negative_pairs=False``: the store's destinations join the negatives' pool but none of its pairs
        their history (``StreamNegatives.rebuild``), for a store that already holds the pass."""
        self.store = self._admitting(store)
        for model in self.stream_models():
            model.reset_state()
            model.attach(self.store)
        self.negatives.rebuild(self.store, pairs=negative_pairs)
        self.position = 0
        # The next refresh (each step's, or resume's once the state is loaded) serves the new pass's rows.
        self.serving.reset()

    def new_store(self) -> TemporalGraphStore:
        """An empty store that admits as this run does (``config.allowed_lateness``)."""
        return TemporalGraphStore(StoreConfig(allowed_lateness=self.config.allowed_lateness))

    def _admitting(self, store: TemporalGraphStore | None) -> TemporalGraphStore:
        """``store``, or a new one, admitting with ``config.allowed_lateness``; a store that admits with
        another is refused, not silently kept or changed."""
        allowed = self.config.allowed_lateness
        if store is None:
            return self.new_store()
        if store.config.allowed_lateness != allowed:
            raise ConfigError(
                f"the store admits events up to allowed_lateness={store.config.allowed_lateness} behind, but "
                f"TrainConfig.allowed_lateness={allowed}: build the store with "
                f"StoreConfig(allowed_lateness={allowed}), or set the same in the TrainConfig"
            )
        return store

    # ------------------------------------------------------------------ checkpoints
    def _write_checkpoint(self, root: Path, offsets: dict[str, int]) -> Path | None:
        """Rank 0 writes the replicas' one checkpoint."""
        if not self.dist.is_main:
            return None
        return checkpoint.save(
            root, self.steps, self.store, offsets, *self.state(), self.config.checkpoint_keep
        )  # fmt: skip

    def state(self) -> tuple[dict, dict]:
        """``(tensors, values)`` a resume continues from bit for bit (the store apart: a checkpoint saves it
        beside them): the ``TrainerState`` values and the model, metrics, RNG and served rows."""
        state = checkpoint.stream_tensors(self)
        if self.table is not None:  # the served rows, so a resume serves what this run served
            state["serving"] = self.serving.state_dict()
        for name, follower in self.attached.items():  # a labelled task's head, feeds and scores
            state[name] = follower.state()
        return state, checkpoint.TrainerState.of(self).values()

    @classmethod
    def resume(
        cls,
        checkpoint_dir: str | Path,
        *,
        config: TrainConfig | None = None,
        expect: Expectation | None = None,
        table: EmbeddingTable | None = None,
        sink: EmbeddingSink | None = None,
        dist: DistContext | None = None,
        link_model: LinkModel | None = None,
    ) -> OnlineTrainer:
        """A trainer in exactly the state of the newest checkpoint under ``checkpoint_dir`` (or of that
        checkpoint, if it is one), by the one resume signature (``train.resume``). Its own parts:
        ``table``, ``sink``, ``dist`` as the constructor's; ``link_model``: the same kind of model the
        checkpoint was written by, if not the default TGN."""
        ckpt = checkpoint.load(Path(checkpoint_dir), expect=expect)
        man = ckpt.manifest
        # Saved config: checkpoints go on where they were loaded from, even if the folder moved.
        cfg = config or replace(
            TrainConfig.from_checkpoint(man["config"], f"{checkpoint_dir}: config"),
            checkpoint_dir=str(checkpoint_dir),
        )
        # An empty store first: no refresh by an untrained model.
        trainer = cls(cfg, table=table, sink=sink, dist=dist, link_model=link_model)
        trainer.source_identity = expect.source if expect is not None else None
        ckpt.store.allow_lateness(cfg.allowed_lateness)  # a setting of this run (see TrainConfig)
        trainer.reset_stream(ckpt.store)
        checkpoint.load_stream_tensors(trainer, ckpt.state)
        checkpoint.TrainerState.from_values(man).apply(trainer)
        trainer._replayed = trainer.position
        load_rng_state(ckpt.rng)
        if trainer.table is not None and "serving" in ckpt.state:
            trainer.serving.load_state_dict(ckpt.state["serving"])
        elif trainer.table is not None:  # the run served nothing (serve_every=0): embed every node now
            trainer.refresh(np.arange(trainer.store.num_nodes))
        return trainer
