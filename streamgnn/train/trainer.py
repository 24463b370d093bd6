"""OnlineTrainer: prequential (test-then-train) training of a link model (TGN by default) on any stream.

Per global batch, in this order:

1. the edge additions the store will apply as new (valid, first of their event id) are the batch's
   positives; negatives are drawn from destinations seen *before* the batch;
2. neighborhoods are sampled from the store before it holds the batch, strictly before the query time: the
   batch's first event time (``query_time="batch"``: each distinct node embedded once) or each event's time;
3. the batch is ingested (rows the store rejects are dropped from everything below);
4. it is scored with the model as it was (AP/AUC against one negative per positive, MRR against
   ``eval_negatives`` fixed ones), then trained on, then fed to the model (``LinkModel.observe``);
5. touched nodes get fresh embeddings in the ``EmbeddingTable``.

So no score of an event depends on that event or on any later one: the memory holds earlier batches only,
neighbors are earlier events, and negatives come from the past. Nodes first seen in the batch read a blank
memory row, exactly as their own rows would before ``observe``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from ..checkpoint import restore_rng
from ..embeddings import EmbeddingSink, EmbeddingTable, LatencyTracker
from ..errors import ConfigError
from ..events import DeadLetter, EventBatch, EventKind
from ..sources import EventSource, as_source
from ..store import StoreConfig, TemporalGraphStore
from . import checkpoint
from .config import TrainConfig
from .distributed import DistContext, collective, init_distributed, local_device
from .driver import Batches, Budget, Drive, FollowReport
from .edgebank import make_baseline
from .metrics import LinkMetrics, RunningMetrics, WindowMetrics, losses_to_baselines, reciprocal_ranks
from .models import make_link_model
from .negatives import EVAL, TRAIN, StreamNegatives
from .protocol import Candidates, LinkModel, StepInput
from .resume import Expectation
from .serving import Serving


@dataclass(frozen=True)
class StepResult:
    """One global batch. Score rows are the scored positives in batch order (empty when not scored)."""

    events: int
    learned: int  # edge additions applied and fed to memory
    eid: np.ndarray
    t: np.ndarray
    pos: np.ndarray  # logit of each positive
    neg: np.ndarray  # logit of its AP/AUC negative (NaN where none could be drawn)
    rr: np.ndarray  # reciprocal rank among its fixed negatives (NaN where none)
    loss: float  # NaN when not trained
    dead_letters: list[DeadLetter] = field(default_factory=list)
    baselines: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(
        default_factory=dict
    )  # (pos, neg, rr)


@dataclass(frozen=True)
class OnlineResult:
    """What an online run reports; ``windows`` are the running metrics over stream time (the last
    ``metrics.MAX_WINDOWS``; ``metrics`` covers them all). ``baselines`` and
    ``baseline_windows``: the same for each baseline, on the same positives and negatives; ``flags`` says
    where the learned model loses to one. ``follow``: what the run learned from and evaluated, the sampled
    figures with their intervals and the source's lag (``driver.FollowReport``)."""

    events: int
    learned: int
    batches: int
    seconds: float
    events_per_s: float
    metrics: LinkMetrics
    windows: list[WindowMetrics]
    latency_p50_ms: float
    latency_p99_ms: float
    dead_letters: int
    checkpoint: Path | None = None
    plot_path: Path | None = None
    summary_path: Path | None = None
    baselines: dict[str, LinkMetrics] = field(default_factory=dict)
    baseline_windows: dict[str, list[WindowMetrics]] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    follow: FollowReport | None = None

    def as_dict(self) -> dict:
        """Plain JSON-able values (paths as strings)."""
        plain = {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(self).items()}
        plain["follow"] = None if self.follow is None else self.follow.as_dict()
        return plain


class OnlineTrainer:
    """Test-then-train over a stream, with running metrics, serving, checkpoints and data parallelism.

    ``store`` may already hold history (its memory starts blank). On rank 0 an ``EmbeddingTable`` is kept
    when ``config.serve_every`` > 0 (pass ``table`` to share one with readers); ``sink`` receives it every
    ``config.publish_every`` refreshes. ``link_model``: any ``LinkModel`` to drive instead of the model that
    ``config.model`` describes (``models.make_link_model``).

    The per-batch protocol is this class; the stream loop is ``driver``'s (the sharded trainer's too); the
    seams are modules of their own: the model (``protocol.LinkModel``, TGN's in ``tgn_model``), negatives
    (``negatives``), serving (``serving``) and checkpoints (``checkpoint``).
    """

    source_identity: dict | None = None  # the stream read, as checkpoints record it (``resume``'s identities)

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
        self.position = 0  # events consumed from the source
        self._replayed = 0  # events a replayed source must skip (set by ``resume``)
        self.budget: Budget | None = None  # the latest ``fit``'s (what it learned and evaluated so far)
        self.learned = 0
        self.dead_letter_count = 0
        self.negatives = StreamNegatives(config.seed, config.train_negative_pool)
        self.negatives.rebuild(self.store)
        for model in self.stream_models():
            model.attach(self.store)
        if self.table is not None and self.store.num_nodes:
            self.refresh(np.arange(self.store.num_nodes))  # history nodes are servable before any step

    @property
    def model(self) -> torch.nn.Module | None:
        """The torch module of the model (``TGN`` by default), if it has one."""
        return getattr(self.link_model, "model", None)

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:
        return getattr(self.link_model, "optimizer", None)

    @property
    def table(self) -> EmbeddingTable | None:
        return self.serving.table

    @property
    def sink(self) -> EmbeddingSink | None:
        return self.serving.sink

    @property
    def latency(self) -> LatencyTracker:
        return self.serving.latency

    # ------------------------------------------------------------------ per batch
    def step(
        self,
        batch: EventBatch,
        *,
        train: bool = True,
        score: bool = True,
        ingest: bool = True,
        negatives: np.ndarray | None = None,
        negatives_valid: np.ndarray | None = None,
        arrival: float | None = None,
    ) -> StepResult:
        """Process one global batch (every rank passes the same one); see the module docstring.

        ``ingest=False``: the store already holds the batch (offline evaluation on a prebuilt graph), so every
        valid edge addition is a positive and sampling still sees only events strictly before the query times.
        ``negatives``: external ids ``[len(batch), q]`` to score against instead of online draws (column 0 is
        the AP/AUC negative), with ``negatives_valid`` marking real entries.
        """
        started = time.perf_counter()
        arrival = started if arrival is None else arrival
        cfg, store, d, lm = self.config, self.store, self.dist, self.link_model
        rows = self._fresh_rows(batch) if ingest else self._edge_rows(batch)
        m = len(rows)
        t = batch.t[rows].copy()
        feat = edge_features(batch, rows, cfg.model.edge_feature_dim)
        pre_src, pre_dst = self._known(batch.src[rows]), self._known(batch.dst[rows])
        scoring = score and m > 0 and (negatives is not None or self.negatives.ready)
        training = train and m > 0 and self.negatives.ready and lm.trainable
        t_query = t if cfg.query_time == "event" else np.full_like(t, t.min(initial=math.inf))
        # store.num_nodes: a row no node owns yet (zero memory, no pending messages)
        view = StepInput(pre_src, pre_dst, t, t_query, store.num_nodes, d.scorers(m), d.rank, self.steps)
        candidates = self._candidates(view, rows, negatives, negatives_valid) if scoring else None
        train_neg = None
        if training:
            train_neg = self.negatives.draw(
                pre_src, pre_dst, num=1, strategy=cfg.train_negatives, step=self.steps, purpose=TRAIN,
                frac=cfg.train_negative_fraction,
            )[:, 0]  # fmt: skip
        prepared = lm.prepare(view, candidates, train_neg) if scoring or training else None
        base_prepared = (
            {n: b.prepare(view, candidates, None) for n, b in self.baselines.items()} if scoring else {}
        )

        letters: list[DeadLetter] = []
        if ingest:
            letters = store.ingest(batch).dead_letters
            self.dead_letter_count += len(letters)
        keep = ~np.isin(rows, [letter.index for letter in letters])

        pos = neg = rr = np.zeros(0)
        if scoring:
            pos, neg, rr = (x[keep] for x in self._score(lm, prepared, candidates, view))
        base_scores = {
            name: tuple(x[keep] for x in self._score(self.baselines[name], p, candidates, view))
            for name, p in base_prepared.items()
        }
        loss = lm.train(prepared, keep) if training else math.nan

        kept = rows[keep]
        post_src, post_dst = store.node_index(batch.src[kept]), store.node_index(batch.dst[kept])
        for model in self.stream_models():
            model.observe(post_src, post_dst, t[keep], None if feat is None else feat[keep])
        self.negatives.observe(post_src, post_dst)
        self.learned += len(kept)
        self.steps += 1
        touched = np.concatenate([post_src, post_dst, self._touched_otherwise(batch)])
        self.serving.after_step(store, self._embed, touched, arrival, len(batch), self.steps)
        scored = kept if scoring else kept[:0]
        seconds = time.perf_counter() - started
        if scoring or training:
            self.metrics.add(pos, neg, rr, batch.t[scored], loss, seconds)
        for name, scores in base_scores.items():
            self.baseline_metrics[name].add(*scores, batch.t[scored], math.nan, seconds)
        return StepResult(
            len(batch), len(kept), batch.eid[scored], batch.t[scored], pos, neg, rr, loss, letters,
            base_scores,
        )  # fmt: skip

    def score_pairs(
        self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, candidates: np.ndarray | None = None
    ) -> np.ndarray:
        """Logits of edges ``(src[i], dst[i])`` at times ``t`` (external ids), scored as ``step`` scores a
        positive, from the state now and changing none of it: for negatives that replace the source as
        well as the destination (DyGLib's historical and inductive ones), which ``step`` cannot rank.

        ``candidates``: external ids ``[m, q]`` (``-1``: none) to score as each row's destination too:
        ``[m, 1 + q]``, the edge's logit then each candidate's (NaN for none), for an evaluator of its own
        (TGB's); one process only. Without: ``[m]``."""
        t = np.asarray(t, np.float64)
        m, d, lm = len(t), self.dist, self.link_model
        pre_src, pre_dst = self._known(np.asarray(src)), self._known(np.asarray(dst))
        t_query = t if self.config.query_time == "event" else np.full_like(t, t.min(initial=math.inf))
        view = StepInput(pre_src, pre_dst, t, t_query, self.store.num_nodes, d.scorers(m), d.rank, self.steps)
        if candidates is None:
            cands = Candidates(pre_dst[:, None], np.ones((m, 1), bool), False)  # (column 0 is unused)
            return self._score(lm, lm.prepare(view, cands, None), cands, view)[0]
        if d.world_size > 1:
            raise ConfigError("score_pairs with candidates runs in one process (its logits are not gathered)")
        valid = np.asarray(candidates) >= 0
        ids = self._known(np.where(valid, candidates, np.asarray(dst)[:, None]).reshape(-1)).reshape(m, -1)
        cands = Candidates(ids, valid, True)
        _, ranked = lm.score(lm.prepare(view, cands, None)) if m else (None, np.zeros((0, 1 + ids.shape[1])))
        return np.where(np.c_[np.ones((m, 1), bool), valid], ranked, np.nan)

    def stream_models(self) -> list[LinkModel]:
        """The learned model and the baselines: every model that follows the stream."""
        return [self.link_model, *self.baselines.values()]

    def _candidates(
        self, view: StepInput, rows: np.ndarray, negatives: np.ndarray | None, valid: np.ndarray | None
    ) -> Candidates:
        """The batch's evaluation negatives: the given external ids, or drawn from the stream so far."""
        cfg = self.config
        m = len(rows)
        if negatives is not None:
            neg_ids = self._known(np.asarray(negatives)[rows].reshape(-1)).reshape(m, -1)
            neg_ok = np.ones(neg_ids.shape, bool) if valid is None else valid[rows]
            return Candidates(neg_ids, neg_ok, neg_ids.shape[1] > 0 and cfg.eval_negatives > 0)
        if cfg.eval_strategy == "inductive":
            raise ConfigError(
                "eval_strategy='inductive' needs fixed negatives (fit_offline draws them against the "
                "training split): online, every destination already seen is history"
            )
        neg_ids = self.negatives.draw(
            view.src, view.dst, num=max(cfg.eval_negatives, 1), strategy=cfg.eval_strategy,
            groups=view.t, step=self.steps, purpose=EVAL,
        )  # fmt: skip
        return Candidates(neg_ids, neg_ids >= 0, cfg.eval_negatives > 0)

    def _score(
        self, model: LinkModel, prepared, candidates: Candidates, view: StepInput
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(pos, neg, rr)`` of every row from ``model``'s logits of this rank's slice (``local_scores``)."""
        local = local_scores(model, prepared, candidates, view.rows)
        full = self.dist.gather_rows(local, len(view.scorer), self.device)
        return full[:, 0], full[:, 1], full[:, 2]

    def _touched_otherwise(self, batch: EventBatch) -> np.ndarray:
        """Known nodes of the batch's node updates and edge deletions: their embeddings change too."""
        upd, dele = batch.kind == EventKind.NODE_UPDATE, batch.kind == EventKind.EDGE_DELETE
        if not (upd.any() or dele.any()):
            return np.zeros(0, np.int64)
        nodes = self._known(np.concatenate([batch.src[upd | dele], batch.dst[dele]]))
        return nodes[nodes >= 0]

    def _fresh_rows(self, batch: EventBatch) -> np.ndarray:
        """Rows the store will apply as new edge additions: valid, first of their id, never applied before."""
        _, letters = batch.validate()
        ok = np.ones(len(batch), bool)
        ok[[letter.index for letter in letters]] = False
        idx = np.flatnonzero(ok)
        eids = batch.eid[idx]
        first = np.zeros(len(idx), bool)
        first[np.unique(eids, return_index=True)[1]] = True
        idx = idx[first & ~self.store.seen.contains(eids)]
        return idx[batch.kind[idx] == EventKind.EDGE_ADD]

    @staticmethod
    def _edge_rows(batch: EventBatch) -> np.ndarray:
        """Valid edge additions, duplicates included (the store already holds them)."""
        _, letters = batch.validate()
        ok = batch.kind == EventKind.EDGE_ADD
        ok[[letter.index for letter in letters]] = False
        return np.flatnonzero(ok)

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
        behind, for ``config.follow``'s budget.
        """
        source = as_source(source)
        # a replay's offset is the events handed out (``position``); a live source's, its own
        positions = positions or (None if source.replay else source.positions)
        self.budget = Budget(self, lag or (None if source.replay else source.lag))
        skip = 0 if positions is not None else self._replayed
        self._replayed = 0
        show = progress and self.dist.is_main
        drive = Drive(
            self, every=self.config.checkpoint_interval, limit=max_events, progress=show, total=total,
            budget=self.budget,
        )  # fmt: skip
        batches = self._global_batches(source, skip, drive, by_offsets=positions is not None)
        saved, events = drive.run(
            batches, lambda: self.save_checkpoint(None if positions is None else positions())
        )
        self.serving.finish(self.store, self._embed)
        seconds = drive.elapsed()
        return OnlineResult(
            events, self.learned, self.steps, seconds, events / seconds if seconds > 0 else math.nan,
            latency_p50_ms=1e3 * self.latency.percentile(50),
            latency_p99_ms=1e3 * self.latency.percentile(99), dead_letters=self.dead_letter_count,
            checkpoint=saved, follow=self.budget.report(),
            **run_metrics(self.link_model, self.metrics, self.baseline_metrics),
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

    def reset_stream(self, store: TemporalGraphStore | None = None) -> None:
        """Start a new pass over a replayed stream: fresh store (default: empty), blank memory and negative
        history; learned parameters and optimizer state stay (e.g. between offline epochs)."""
        self.store = self._admitting(store)
        for model in self.stream_models():
            model.reset_state()
            model.attach(self.store)
        self.negatives.rebuild(self.store)
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
    def save_checkpoint(self, source_offsets: dict[str, int] | None = None) -> Path | None:
        """Write a checkpoint to ``config.checkpoint_dir`` (rank 0 writes; every rank must call)."""
        cfg = self.config
        if not cfg.checkpoint_dir:
            raise ConfigError("save_checkpoint needs config.checkpoint_dir")
        path = None
        if self.dist.is_main:
            path = checkpoint.save(
                Path(cfg.checkpoint_dir), self.steps, self.store, dict(source_offsets or {}),
                *self.state(), cfg.checkpoint_keep,
            )  # fmt: skip
        if self.dist.active:
            collective("barrier")
        return path

    def state(self) -> tuple[dict, dict]:
        """``(tensors, values)`` a resume continues from bit for bit (the store apart: a checkpoint saves it
        beside them): the ``TrainerState`` values and the model, metrics, RNG and served rows."""
        state = checkpoint.stream_tensors(self)
        if self.table is not None:  # the served rows, so a resume serves what this run served
            state["serving"] = self.serving.state_dict()
        return state, checkpoint.TrainerState.of(self).values()

    @classmethod
    def resume(
        cls,
        checkpoint_dir: str | Path,
        *,
        config: TrainConfig | None = None,
        table: EmbeddingTable | None = None,
        sink: EmbeddingSink | None = None,
        dist: DistContext | None = None,
        link_model: LinkModel | None = None,
        expect: Expectation | None = None,
    ) -> OnlineTrainer:
        """A trainer in exactly the state of the newest checkpoint under ``checkpoint_dir``.

        ``config`` defaults to the saved one; pass one to change e.g. the device or checkpoint cadence
        (the model shape must match the saved parameters). ``link_model``: the same kind of model the
        checkpoint was written by, if not the default TGN. ``expect``: what this run is (``train.resume``):
        a checkpoint that does not fit it is refused before its state is parsed, and the trainer's
        checkpoints record ``expect.source`` from now on (default: the checkpoint's own).
        """
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
        checkpoint.restore_stream_tensors(trainer, ckpt.state)
        checkpoint.TrainerState.from_values(man).apply(trainer)
        trainer._replayed = trainer.position
        restore_rng(ckpt.rng)
        if trainer.table is not None and "serving" in ckpt.state:
            trainer.serving.load_state_dict(ckpt.state["serving"])
        elif trainer.table is not None:  # the run served nothing (serve_every=0): embed every node now
            trainer.refresh(np.arange(trainer.store.num_nodes))
        return trainer


def run_metrics(model: LinkModel, metrics: RunningMetrics, baselines: dict[str, RunningMetrics]) -> dict:
    """An ``OnlineResult``'s metric fields, the running metrics closed: the model's, each baseline's, and
    where the learned model scores below a baseline (none when it learns nothing)."""
    for running in (metrics, *baselines.values()):
        running.close()
    summary = metrics.summary()
    base = {name: running.summary() for name, running in baselines.items()}
    name = getattr(model, "name", type(model).__name__)
    return {
        "metrics": summary, "windows": list(metrics.windows), "baselines": base,
        "baseline_windows": {n: list(r.windows) for n, r in baselines.items()},
        "flags": losses_to_baselines(name, summary, base) if model.trainable else [],
    }  # fmt: skip


def local_scores(model: LinkModel, prepared, candidates: Candidates, rows: np.ndarray) -> np.ndarray:
    """``[pos, neg, rr]`` (float64 ``[n, 3]``) of this rank's ``rows`` from ``model``'s logits: the metric
    definitions are the loop's, the same for every model and trainer (NaN where a row has no negative)."""
    local = np.full((len(rows), 3), math.nan)
    if len(rows):
        ap, ranked = model.score(prepared)
        ok = candidates.valid[rows]
        local[:, 0] = ap[:, 0]
        local[:, 1] = np.where(ok[:, 0], ap[:, 1], np.nan)
        if ranked is not None:
            local[:, 2] = reciprocal_ranks(ranked[:, 0], ranked[:, 1:], ok)
    return local


def edge_features(batch: EventBatch, rows: np.ndarray, dim: int) -> np.ndarray | None:
    """The ``dim`` edge features of ``batch``'s ``rows`` the model reads (None: it reads none); a batch with
    another width is refused (the online and the sharded trainer)."""
    if not dim:
        return None
    if not len(rows):
        return np.zeros((0, dim), np.float32)
    if batch.feature_dim != dim:
        raise ConfigError(
            f"the model expects {dim} edge features per event, the batch has {batch.feature_dim or 0}"
        )
    return batch.features[rows]
