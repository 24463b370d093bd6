"""The per-batch step of every online trainer, written once: ``StreamTrainer.step``.

Per global batch, in this order (the same for the one-process, the replicated and the sharded trainer):

1. admission decides the batch's positives (``Positives``: the edge additions it admits as new) and their
   internal ids before and after it; negatives are drawn from destinations seen *before* the batch;
2. the models ``prepare`` from the graph before it holds the batch, at the query times (the batch's first
   event time, ``query_time="batch"``, or each event's); what the trainer carries beside its model (a
   labelled task, ``Attached``) is told of the batch, with the embeddings the step scores it from;
3. the batch is applied (the store, or each rank's shard);
4. it is scored with the models as they were (AP/AUC against one negative per positive, MRR against
   ``eval_negatives`` fixed ones; every rank's score rows gathered in one exchange), then trained on, then
   fed to every model that follows the stream (``LinkModel.observe``);
5. touched nodes get fresh served rows; the running metrics take the scores.

What differs between the trainers is how the step is distributed: a few hooks each implements, its
*distribution hooks* (``StreamTrainer``'s ``_admit``, ``_apply``, ``_gather``, ``_observed``, ``_touched``,
``_embed`` and ``served``): where admission's state lives, how the batch is applied, who scores which rows
and how the scores come together.
The stream loop around the step is ``driver.Drive`` (with ``driver.Budget`` deciding, per batch, whether it
learns and is scored), run by ``StreamTrainer.drive`` for both trainers.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from ..embeddings import EmbeddingTable
from ..errors import ConfigError
from ..events import DeadLetter, EventBatch
from .config import QUERY_TIMES
from .distributed import collective
from .driver import Batches, Budget, Drive, FollowReport, StepHook
from .metrics import LinkMetrics, RunningMetrics, WindowMetrics, losses_to_baselines, reciprocal_ranks
from .negatives import EVAL, TRAIN
from .protocol import Candidates, JointTerm, LinkModel, StepInput


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


@dataclass(frozen=True)
class Positives:
    """A batch's positives as admission decided them (a trainer's ``_admit``): their ``rows`` in the batch,
    internal ids before the batch (``pre_*``, -1 for a node it adds) and after it, ``num_nodes`` known
    before it (the row no node owns yet), ``scorer`` (the rank that scores each) and the trainer's own
    record of the admission (``admitted``), for its ``_apply``."""

    rows: np.ndarray
    pre_src: np.ndarray
    pre_dst: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    num_nodes: int
    scorer: np.ndarray
    admitted: object = None


@dataclass(frozen=True)
class StepEmbeddings:
    """The embeddings a step scores its batch from, handed to what follows the step (``Attached``) so it
    need not embed the same nodes again: this rank's scored rows' sources then destinations, ``nodes``
    (internal ids before the batch; -1: a node the batch adds, which reads the blank row) at ``t`` (each
    row's query time), ``z`` their embeddings (``LinkModel.embedded``). Empty when the step does not score,
    or the model keeps no per-node embeddings. ``blank``: the nodes known before the batch (admission has
    given the batch's new nodes the ids from there on; they read the blank row, ``blank``)."""

    nodes: np.ndarray  # int64 [k]
    t: np.ndarray  # float64 [k]
    z: np.ndarray  # float32 [k, out_dim]
    blank: int

    @classmethod
    def none(cls, blank: int) -> StepEmbeddings:
        return cls(np.zeros(0, np.int64), np.zeros(0), np.zeros((0, 0), np.float32), blank)

    def find(self, nodes: np.ndarray, t: np.ndarray) -> np.ndarray:
        """For each of ``nodes`` (internal ids before the batch, -1: unknown) at times ``t``: a row of the
        same node, the latest embedded at or before its time (else its earliest: every row is read from
        the state before the batch, so a later query time adds no event), or -1 where none is."""
        if not len(self.nodes):
            return np.full(len(nodes), -1, np.int64)
        order = np.lexsort((self.t, self.nodes))
        keys = np.rec.fromarrays([self.nodes[order], self.t[order]])
        asked = np.rec.fromarrays([np.asarray(nodes, np.int64), np.asarray(t, np.float64)])
        first = np.searchsorted(keys.f0, asked.f0, side="left")
        found = (first < len(order)) & (keys.f0[np.minimum(first, len(order) - 1)] == asked.f0)
        last = np.searchsorted(keys, asked, side="right") - 1  # the latest at or before, if of this node
        pos = np.where(last >= first, last, first)
        return np.where(found, order[np.minimum(pos, len(order) - 1)], -1)


class Attached(Protocol):
    """What a trainer carries beside its model (``StreamTrainer.attached``): told of each batch after the
    step read the graph for it and before the graph holds it (whether it will be learned from, and the
    embeddings the step scores it from), and part of the trainer's checkpoint state. A follower subclasses
    it, so that every follower has ``joint`` and the step asks each plainly."""

    def before_apply(self, batch: EventBatch, learn: bool, embedded: StepEmbeddings) -> None: ...

    def state(self) -> dict: ...

    def joint(self) -> tuple[JointTerm, ...]:
        """The losses it computed in ``before_apply`` (from the state before the batch), handed over once
        and added to the link loss when the step trains (``LinkModel.train``'s ``joint``): a labelled task
        trained jointly with link prediction. Empty (what a follower that subclasses ``Attached`` gets
        unless it says otherwise): nothing to add."""
        return ()


def query_times(t: np.ndarray, query_time: str) -> np.ndarray:
    """When each of a batch's positives at times ``t`` is embedded (``TrainConfig.query_time``): "event", at
    its own time; "batch", all at the batch's first. An evaluation over a store that already holds the batch
    (``step(ingest=False)``) that embeds at "event" sees the batch's earlier events, strictly before each
    time, as DyGLib's neighbor sampler does (``benchmarks/dyglib.py``)."""
    if query_time not in QUERY_TIMES:
        raise ConfigError(f"query_time must be one of {QUERY_TIMES}, got {query_time!r}")
    return t if query_time == "event" else np.full_like(t, t.min(initial=math.inf))


class StreamTrainer:
    """The step and the stream loop of an online trainer; a subclass gives its distribution hooks (module
    docstring).

    A subclass sets ``config``, ``dist``, ``device``, ``link_model``, ``baselines`` (name -> ``LinkModel``)
    with their ``baseline_metrics``, ``metrics``, ``negatives`` (``StreamNegatives``), ``serving`` and the
    counters ``steps``, ``learned``, ``position``, ``dead_letter_count``."""

    source_identity: dict | None = None  # the stream read, as checkpoints record it (``resume``'s identities)
    budget: Budget | None = None  # the latest ``fit``'s (what it learned and evaluated so far)
    # what follows the steps beside the model, by name (a job's labelled task): told ``before_apply``
    # of each step, and its ``state()`` saved under its name in the trainer's checkpoints
    attached: dict[str, Attached]

    @property
    def model(self) -> torch.nn.Module | None:
        """The torch module of the model (``TGN`` by default), if it has one."""
        return getattr(self.link_model, "model", None)

    @property
    def table(self) -> EmbeddingTable | None:
        """The served rows (a sharded rank's: of the vertices it owns; None when ``serve_every`` is 0)."""
        return self.serving.table

    def stream_models(self) -> list[LinkModel]:
        """The learned model and the baselines: every model that follows the stream."""
        return [self.link_model, *self.baselines.values()]

    # ------------------------------------------------------------------ the step
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
        serve: bool = True,
        query_time: str | None = None,
    ) -> StepResult:
        """Process one global batch (every rank passes the same one); see the module docstring.

        ``ingest=False``: the store already holds the batch (offline evaluation on a prebuilt graph), so every
        valid edge addition is a positive and sampling still sees only events strictly before the query times.
        ``negatives``: external ids ``[len(batch), q]`` to score against instead of online draws (column 0 is
        the AP/AUC negative), with ``negatives_valid`` marking real entries. ``serve=False``: the touched
        nodes wait for a later step's refresh (a budget's parts of one item: served once, after the last).
        ``query_time``: this step's (``query_times``; default ``config.query_time``).
        """
        started = time.perf_counter()
        arrival = started if arrival is None else arrival
        cfg, lm = self.config, self.link_model
        pos = self._admit(batch, ingest)
        rows, m = pos.rows, len(pos.rows)
        t = batch.t[rows].copy()
        feat = edge_features(batch, rows, cfg.model.edge_feature_dim)
        scoring = score and m > 0 and (negatives is not None or self.negatives.ready)
        training = train and m > 0 and self.negatives.ready and lm.trainable
        t_query = query_times(t, query_time or cfg.query_time)
        view = StepInput(pos.pre_src, pos.pre_dst, t, t_query, pos.num_nodes, pos.scorer, self.dist.rank,
                         self.steps)  # fmt: skip
        candidates = self._candidates(view, rows, negatives, negatives_valid) if scoring else None
        train_neg = None
        if training:
            train_neg = self.negatives.draw(
                view.src, view.dst, num=1, strategy=cfg.train_negatives, step=self.steps, purpose=TRAIN,
                frac=cfg.train_negative_fraction,
            )[:, 0]  # fmt: skip
            # (drawn after admission: a node the batch adds is not known before it)
            train_neg = np.where(train_neg < pos.num_nodes, train_neg, -1)
        prepared = lm.prepare(view, candidates, train_neg) if scoring or training else None
        base_prepared = (
            {n: b.prepare(view, candidates, None) for n, b in self.baselines.items()} if scoring else {}
        )
        joint: list[JointTerm] = []  # the followers' losses on this batch's labels, with the link loss
        if self.attached:  # (before the graph holds the batch: what they embed themselves must not see it)
            embedded = step_embeddings(lm, prepared, view) if scoring else StepEmbeddings.none(view.blank)
            for follower in self.attached.values():
                follower.before_apply(batch, train, embedded)
                joint += follower.joint()
        letters = self._apply(batch, pos)
        local = []
        if scoring:
            local = [local_scores(lm, prepared, candidates, view.rows)]
            local += [
                local_scores(self.baselines[n], p, candidates, view.rows) for n, p in base_prepared.items()
            ]
        keep = np.ones(m, bool)
        loss = lm.train(prepared, keep, joint) if training else math.nan
        scores = self._gather(np.concatenate(local, 1), view) if scoring else np.zeros((0, 3))
        # (one exchange for the model's and the baselines' scores: three columns each)
        by_model = {
            n: tuple(scores[:, 3 * i + j] for j in range(3)) for i, n in enumerate(["", *base_prepared])
        }
        self._stepped(batch, pos, t, feat, arrival, serve)
        scored = rows if scoring else rows[:0]
        seconds = time.perf_counter() - started
        p, neg, rr = by_model.pop("", (np.zeros(0),) * 3)
        if scoring or training:
            self.metrics.add(p, neg, rr, batch.t[scored], loss, seconds)
        for name, s in by_model.items():
            self.baseline_metrics[name].add(*s, batch.t[scored], math.nan, seconds)
        return StepResult(
            len(batch), m, batch.eid[scored], batch.t[scored], p, neg, rr, loss, letters, by_model
        )

    def _stepped(
        self, batch: EventBatch, pos: Positives, t: np.ndarray, feat, arrival: float, serve: bool
    ) -> None:
        """After the scores and the training: every model and the negatives see the batch, the counters
        move, the touched nodes' served rows are refreshed (when ``serve``, and one is due)."""
        for model in self.stream_models():
            model.observe(pos.src, pos.dst, t, feat)
        self.learned += len(pos.rows)
        self.steps += 1
        self._observed(pos)
        touched = self._touched(batch, pos)
        self.serving.after_step(self.served, self._embed, touched, arrival, len(batch), self.steps, serve)

    def _candidates(
        self, view: StepInput, rows: np.ndarray, negatives: np.ndarray | None, valid: np.ndarray | None
    ) -> Candidates:
        """The batch's evaluation negatives: the given external ids, or drawn from the stream so far."""
        cfg = self.config
        m = len(rows)
        if negatives is not None:  # (looked up after admission: a node the batch adds is not known before it)
            neg_ids = self._known(np.asarray(negatives)[rows].reshape(-1)).reshape(m, -1)
            neg_ids = np.where(neg_ids < view.blank, neg_ids, -1)
            neg_ok = np.ones(neg_ids.shape, bool) if valid is None else valid[rows]
            return Candidates(neg_ids, neg_ok, neg_ids.shape[1] > 0 and cfg.eval_negatives > 0)
        if cfg.eval_strategy == "inductive":
            raise ConfigError(
                "eval_strategy='inductive' needs fixed negatives (fit_offline draws them against the "
                "training split): online, every destination already seen is history"
            )
        # a draw is keyed by its row: each rank draws for the whole batch, right for the rows it scores
        neg_ids = self.negatives.draw(
            view.src, view.dst, num=max(cfg.eval_negatives, 1), strategy=cfg.eval_strategy,
            groups=view.t, step=self.steps, purpose=EVAL,
        )  # fmt: skip
        return Candidates(neg_ids, neg_ids >= 0, cfg.eval_negatives > 0)

    # ------------------------------------------------------------------ the distribution hooks
    served: object  # what ``serving`` reads node ids and times from (the store, or the global index)

    def _admit(self, batch: EventBatch, ingest: bool) -> Positives:
        """Admission's decision on ``batch``, before anything reads the graph for it."""
        raise NotImplementedError

    def _apply(self, batch: EventBatch, pos: Positives) -> list[DeadLetter]:
        """Apply the admitted batch to the graph; the dead letters this rank reports (counted)."""
        raise NotImplementedError

    def _gather(self, local: np.ndarray, view: StepInput) -> np.ndarray:
        """Every rank's score rows (``local``: this rank's ``view.rows``) in batch order."""
        raise NotImplementedError

    def _observed(self, pos: Positives) -> None:
        """After the models saw the batch and it was counted: the negatives' pool and history take its
        positives (and whatever else of the trainer's follows the step)."""
        raise NotImplementedError

    def _touched(self, batch: EventBatch, pos: Positives) -> np.ndarray:
        """Nodes whose served rows the batch changed (this rank's)."""
        raise NotImplementedError

    def _embed(self, nodes: np.ndarray, t: float) -> np.ndarray:
        """Served rows of ``nodes`` at time ``t``."""
        raise NotImplementedError

    def _known(self, ext: np.ndarray) -> np.ndarray:
        """Internal ids of external ones, -1 where unknown (for given negatives)."""
        raise NotImplementedError

    def _write_checkpoint(self, root: Path, offsets: dict[str, int]) -> Path | None:
        """Write this process's part of a checkpoint of the current step (None: it writes none)."""
        raise NotImplementedError

    def _all_dead_letters(self) -> int:
        """The run's dead letters, every rank's."""
        return self.dead_letter_count

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, source_offsets: dict[str, int] | None = None) -> Path | None:
        """Write a checkpoint of the current step to ``config.checkpoint_dir``, with the source's offsets
        (every rank calls it after the same step; a replicated run's rank 0 writes the one checkpoint, a
        sharded run's every rank its own). Returns this rank's (None: it wrote none)."""
        if not self.config.checkpoint_dir:
            raise ConfigError("save_checkpoint needs config.checkpoint_dir")
        path = self._write_checkpoint(Path(self.config.checkpoint_dir), dict(source_offsets or {}))
        if self.dist.active:
            collective("barrier")
        return path

    # ------------------------------------------------------------------ the stream
    def drive(
        self,
        batches: Callable[[Drive], Batches],
        save: Callable[[], Path | None],
        *,
        lag: Callable[[], int | None] | None,
        max_events: int | None,
        progress: bool,
        total: int | None,
        on_step: StepHook | None,
    ) -> OnlineResult:
        """The stream loop (``driver.Drive`` over ``batches(drive)``, learning and evaluating on the
        ``driver.Budget``), then the end of the stream's serving and the run's ``OnlineResult``."""
        self.budget = Budget(self, lag)
        drive = Drive(
            self, every=self.config.checkpoint_interval, limit=max_events, total=total, budget=self.budget,
            progress=progress and self.dist.is_main, on_step=on_step,
            min_pause_s=self.config.checkpoint_pause_s,
        )  # fmt: skip
        saved, events = drive.run(batches(drive), save)
        self.serving.finish(self.served, self._embed)
        seconds = drive.elapsed()
        latency = self.serving.latency
        return OnlineResult(
            events, self.learned, self.steps, seconds, events / seconds if seconds > 0 else math.nan,
            latency_p50_ms=1e3 * latency.percentile(50), latency_p99_ms=1e3 * latency.percentile(99),
            dead_letters=self._all_dead_letters(), checkpoint=saved, follow=self.budget.report(),
            **run_metrics(self.link_model, self.metrics, self.baseline_metrics),
        )  # fmt: skip


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


def step_embeddings(model: LinkModel, prepared, view: StepInput) -> StepEmbeddings:
    """``StepEmbeddings`` of a scored step: ``model.embedded``'s rows with their nodes and query times."""
    z = model.embedded(prepared)
    if z is None:
        return StepEmbeddings.none(view.blank)
    r = view.rows
    return StepEmbeddings(
        np.concatenate([view.src[r], view.dst[r]]), np.tile(view.t_query[r], 2), z, view.blank
    )


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
