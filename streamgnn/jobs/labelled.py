"""A labelled task in the live training job: labels from their feed (``tasks.feed``) routed to an online
head (``tasks.online``) over the job's model, predicted before they are learned from.

As each global batch is stepped, before the graph holds it (the trainer calls ``before_apply``), the
feed's new labels are admitted and those due are scored:

- a label at or before the newest event time the job has already stepped is late (its moment was
  scored: the state holds events at or after its time) and becomes a dead letter, as does a label whose
  node (or edge end) no event has, in the store or in the batch about to be stepped (a label at that
  batch's newest time apart: the next batch may hold its node's first event at the same time);
- the others wait until the events reach their time: a label is due before the first batch whose newest
  event is at or after it, so the state it is read from holds only events strictly before it (a label
  never sees its own event, nor any later one);
- due labels read their ends' embeddings from the step's own (those it scores the batch from: an edge
  label on the batch's own event reads exactly what its link was scored from), others are embedded from
  the model as it is (at the earliest of their times); scored by the head, then learned from when the
  job learns on this batch (its budget, ``train.follow``); with ``task.joint_weight``, their loss is
  also added to the step's link loss (``joint``, ``tasks.joint``), computed from the same state.

With ``task.horizon`` (node affinity: a label describes the period after its time), a label is scored as
above but known only at ``t + horizon``: its inputs are held (``awaiting``) and the head takes it in
(``OnlineHead.reveal``: the prior's counts, the stages' judge, learning; node affinity's revealed shares)
before the first label at or after that time is scored, or once the events pass it, never earlier: no
prediction before ``t + horizon`` was helped by it.

With ``task.predictions_topic``, each scored label's prediction is published there (``_publish``), in
the order the labels are scored; a dead letter gets none. A resumed job publishes again those of the
labels after its checkpoint (at least once: the key, time and ``step`` tell a repeat).

Labels after the stream's last event stay pending (counted; a checkpoint keeps them, and a resumed job
scores them once the events reach them). ``state()`` is the head's, the pending labels, the feed's
position and the counters: a resumed job continues exactly.

In a sharded job every rank runs this, in step: rank 0 reads the feed for all, each label's owner embeds
it and publishes its prediction, and every rank holds the same head (``label_ranks``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch
from prometheus_client import Gauge

from ..errors import CheckpointError, ConfigError
from ..events import DeadLetter, EventBatch
from ..serve.predict import prediction_fields
from ..tasks.affinity import NodeAffinity, RevealedShares
from ..tasks.config import TaskConfig
from ..tasks.feed import FileLabels, KafkaLabels, empty_labels, merge
from ..tasks.joint import JointHead
from ..tasks.labels import Labels
from ..tasks.live_features import LiveFeatures, Recent
from ..tasks.online import OnlineHead
from ..train.protocol import JointTerm
from ..train.step import Attached, StepEmbeddings
from .label_ranks import placement

LETTERS_KEPT = 100  # the first dead letters, as the summary quotes them


class LabelledStream(Attached):
    """Routes ``feed``'s labels through ``trainer``'s model to an ``OnlineHead`` (module docstring);
    ``registry``: where its Prometheus gauges go (None: none)."""

    def __init__(self, config: TaskConfig, feed, trainer, registry=None, sink=None) -> None:
        self.config, self.task, self.feed, self.trainer = config, config.task(), feed, trainer
        self.sink = sink  # where each label's prediction goes (a ``KafkaSink``), or None
        self.ranks = placement(trainer)  # one process, or a rank of a sharded job
        self.joint_head = None  # the task's loss trained with the link loss (``tasks.joint``), or None
        if config.joint_weight:
            self.joint_head = JointHead(
                self.task, trainer.link_model, config.joint_weight, trainer.config.seed
            )
        self._terms: tuple[JointTerm, ...] = ()
        dim = trainer.link_model.out_dim
        if dim is None:
            raise ConfigError(f"task: {type(trainer.link_model).__name__} embeds nothing for a head to read")
        edges = self.task.on_edges
        self.features = LiveFeatures(config.tau, rated=edges) if config.features else None
        width = 0 if self.features is None else self.features.width(edges)
        # node affinity: each class's revealed shares of the label's node (``affinity.RevealedShares``)
        self.revealed = RevealedShares(self.task.classes) if isinstance(self.task, NodeAffinity) else None
        in_dim = self.task.fixed_inputs + dim * (2 if edges else 1) + width
        self.head = OnlineHead(config, in_dim, trainer.config.seed, features=width)
        self.pending = empty_labels(self.task)
        # labels scored but not known yet (``task.horizon``), and their inputs
        self.awaiting, self.awaiting_x = self.pending, np.zeros((0, in_dim), np.float32)
        self.watermark = -math.inf
        self.dead_letters = 0
        self.letters: list[DeadLetter] = []
        self.scored_here = 0  # labels this process embedded and published (a sharded rank: its own)
        self.held_back = feed.waiting()  # labels the feed holds back (a file's, after the events)
        if registry is not None:
            self._export(registry)

    @classmethod
    def open(cls, config: TaskConfig, trainer, *, bootstrap: str | None, registry=None) -> LabelledStream:
        """The stream with its feed (``config.labels_file``, or ``labels_topic`` at ``bootstrap``) and its
        predictions' sink (``predictions_topic`` at ``bootstrap``, if set)."""
        task = config.task()
        for name in ("labels_topic", "predictions_topic"):
            if getattr(config, name) is not None and bootstrap is None:
                raise ConfigError(f"task.{name} needs the broker's bootstrap address (kafka.bootstrap)")
        sink = None
        if config.predictions_topic is not None:
            from ..connectors.sink import KafkaSink

            sink = KafkaSink(bootstrap, predictions_topic=config.predictions_topic)
        try:
            if config.labels_file is not None:
                feed = FileLabels(config.labels_file, task)
            else:
                feed = KafkaLabels(config.labels_topic, bootstrap, task)
        except BaseException:
            if sink is not None:
                sink.close()
            raise
        return cls(config, feed, trainer, registry, sink)

    # ------------------------------------------------------------------ per batch
    def before_apply(self, batch: EventBatch, learn: bool, embedded: StepEmbeddings) -> None:
        """Admit the feed's new labels and score (and learn from) those due before ``batch``, reading
        their ends' embeddings from ``embedded`` (the step's own) where it has them."""
        if not len(batch):
            return
        until = float(np.max(batch.t))
        new, letters, self.held_back = self.ranks.take(self.feed, until)
        late = new.t <= self.watermark
        for i in np.flatnonzero(late):
            letters.append(DeadLetter(
                f"late label: time {new.t[i]} is not after {self.watermark}, the newest event already "
                f"learned (its moment was scored)", _origin(new, i), _payload(new, i), -1,
            ))  # fmt: skip
        self.pending = merge(self.pending, new.take(~late))
        due = int(np.searchsorted(self.pending.t, until, side="right"))
        # known now: what describes only events stepped, or before every label about to be scored
        self._reveal(max(self.watermark, float(self.pending.t[0])) if due else self.watermark, learn)
        if due:
            flush, self.pending = self.pending.take(slice(0, due)), self.pending.take(slice(due, None))
            flush, unknown = self._known(flush, batch, until, embedded.blank)
            letters += unknown
            if len(flush):
                x, mine = self._inputs(flush, embedded, batch)
                known = not self.config.horizon
                scores = self.head.observe(x, flush.y, flush.t, learn=learn, known=known)
                if not known:  # (after every awaiting label's time: the order they were scored in)
                    self.awaiting = merge(self.awaiting, flush)
                    self.awaiting_x = np.concatenate([self.awaiting_x, x])
                self._publish(flush.take(mine), scores[mine])
                self.scored_here += int(mine.sum())
                if learn and self.joint_head is not None:  # (after scoring: they move later answers only)
                    ends = [flush.node] if flush.dst is None else [flush.node, flush.dst]
                    rows = [self._rows(e, embedded.blank) for e in ends]
                    self._terms = (
                        self.joint_head.term(
                            rows, flush.y, float(flush.t[0]), embedded.blank, self.trainer.steps
                        ),
                    )
        self.watermark = max(self.watermark, until)
        self._letters(letters)

    def _reveal(self, now: float, learn: bool) -> None:
        """Take in the awaiting labels whose period ends by ``now`` (``t + horizon <= now``: the events
        stepped so far reach it, or it is before every label about to be scored, which may read it: it
        describes only events before them), in the order they were scored."""
        known = self.awaiting.t + self.config.horizon <= now
        if known.any():
            taken = self.awaiting.take(known)
            self.head.reveal(self.awaiting_x[known], taken.y, learn=learn)
            if self.revealed is not None:  # (node affinity: its horizon is > 0, so every label comes here)
                self.revealed.reveal(taken.node, taken.y)
            self.awaiting, self.awaiting_x = self.awaiting.take(~known), self.awaiting_x[~known]

    def joint(self) -> tuple[JointTerm, ...]:
        """The joint loss of the labels learned before this batch (once), for the step's backward pass."""
        terms, self._terms = self._terms, ()
        return terms

    def _known(
        self, labels: Labels, batch: EventBatch, until: float, blank: int
    ) -> tuple[Labels, list[DeadLetter]]:
        """The labels whose node (and edge destination) an event has, and a dead letter for each other.
        A label at ``until``, the batch's newest time, is kept whatever its node: the source's next batch
        may hold more events of that time, its node's first among them (it reads the blank row)."""
        seen = np.ones(len(labels), bool)
        letters = []
        for name, ids in (("node", labels.node), ("edge destination", labels.dst)):
            if ids is None:
                continue
            known = np.isin(ids, batch.src) | np.isin(ids, batch.dst) | (labels.t >= until)
            known |= self._rows(ids, blank) >= 0
            for i in np.flatnonzero(~known & seen):
                letters.append(DeadLetter(
                    f"unknown {name} {_plain(ids[i])!r}: no event up to the label's time has it",
                    _origin(labels, i), _payload(labels, i), -1,
                ))  # fmt: skip
            seen &= known
        return labels.take(seen), letters

    def _inputs(
        self, labels: Labels, embedded: StepEmbeddings, batch: EventBatch
    ) -> tuple[np.ndarray, np.ndarray]:
        """The head's inputs: each label's node (edge: both ends') embedding, and its stream features at its
        own time (``batch``'s events before it counted: ``live_features.Recent``); and which labels are
        this process's (``label_ranks``: all, or a rank's own). An end the step embeds to score its batch
        is read from there (``StepEmbeddings.find``: the step's forward pass, from the state before the
        batch); the others are embedded from the model now, at the earliest label time, each node once
        (nodes the store has not seen yet read the blank row, as ``step`` does). A sharded rank embeds its
        own labels' ends and gathers everyone's."""
        tr, blank = self.trainer, embedded.blank
        ends = [labels.node] if labels.dst is None else [labels.node, labels.dst]
        rows = [self._rows(e, blank) for e in ends]
        mine = self.ranks.mine(self.ranks.index(labels.node))
        flat = np.concatenate([r[mine] for r in rows])
        at = embedded.find(flat, np.tile(labels.t[mine], len(ends)))
        d, k = tr.link_model.out_dim, int(mine.sum())
        z = np.empty((len(flat), d), np.float32)
        rest = at < 0
        if not rest.all():
            z[~rest] = embedded.z[at[~rest]]
        if self.ranks.must_embed(rest):
            nodes, back = np.unique(self.ranks.queries(flat[rest], blank), return_inverse=True)
            with torch.no_grad():
                z[rest] = tr.link_model.embed(nodes, float(labels.t[0]), blank, tr.steps)[back]
        z = z.reshape(len(ends), k, d).transpose(1, 0, 2).reshape(k, len(ends) * d)  # a label a row
        z = self.ranks.gather(z, mine).reshape(len(labels), len(ends), d)
        x = self.task.inputs(z[:, 0], z[:, 1] if labels.dst is not None else None)
        if self.revealed is not None:
            x = np.concatenate([self.revealed.rows(labels.node), x], 1)
        if self.features is None:
            return x, mine
        now = [self.ranks.index(e) for e in ends]  # (the batch's new nodes too: its events count)
        recent = Recent(*self._learned(batch))
        features = self.features.rows(now[0], now[1] if len(now) > 1 else None, labels.t, recent)
        return np.concatenate([x, features], 1), mine

    def _publish(self, labels: Labels, scores: np.ndarray) -> None:
        """Each scored label's prediction to the sink: its node (or edge), time and what the head predicted
        before learning from it, with ``step``, the trainer's steps so far: the model and head that made
        it are those a checkpoint of that step (``ckpt-<step>``) holds."""
        if self.sink is not None:
            fields = prediction_fields(self.task, scores)
            self.sink.publish_label_predictions(
                labels.node, labels.dst, labels.t, fields, step=self.trainer.steps
            )

    def _rows(self, ids: np.ndarray, blank: int) -> np.ndarray:
        """The store's dense indices of ``ids`` before the batch, -1 for a node it does not hold then (the
        batch's admission has already given the batch's new nodes the indices from ``blank`` on)."""
        if not blank:
            return np.full(len(ids), -1, np.int64)
        rows = self.ranks.index(ids)
        return np.where(rows < blank, rows, -1)

    def after_step(self, batch: EventBatch) -> None:
        """Count a stepped batch's learned edges (not its refused rows) into the stream features."""
        if self.features is None or not len(batch):
            return
        self.features.observe(*self._learned(batch), self.ranks.external)

    def _learned(self, batch: EventBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """The edges of ``batch`` the graph takes (admitted edge additions): dense ends, times, weights
        (None where the features read none)."""
        ok = self.ranks.learned(batch)
        w = None if batch.weight is None or not self.features.rated else batch.weight[ok]
        return self.ranks.index(batch.src[ok]), self.ranks.index(batch.dst[ok]), batch.t[ok], w

    def _letters(self, letters: list[DeadLetter]) -> None:
        self.dead_letters += len(letters)
        self.letters += letters[: max(0, LETTERS_KEPT - len(self.letters))]

    # ------------------------------------------------------------------ figures
    def figures(self) -> dict:
        """Prequential figures of every label scored and of the last ``config.window``, how they average
        over labels (``Task.averaging``), the counts."""
        return {
            "kind": self.config.kind, "all": self.head.figures(),
            "window": self.head.figures(self.config.window),
            "averaging": self.task.averaging or "every label alike",
            "scored": self.head.seen, "pending": self.waiting(), "awaiting": len(self.awaiting),
            "dead_letters": self.dead_letters,
            "head_steps": self.head.steps,
        }  # fmt: skip

    def waiting(self) -> int:
        """Labels the events have not reached yet (held here, or not yet handed out by a file)."""
        return len(self.pending) + self.held_back

    def write(self, path: Path) -> Path:
        """``figures()`` as JSON (an undefined figure, NaN, as null)."""
        path.write_text(json.dumps(_nulls(self.figures()), indent=1))
        return path

    def text(self) -> str:
        """One line: labels scored, the head's figures beside the prior's, pending, dead letters."""
        figures = self.head.figures()
        shown = "; ".join(
            f"{name.upper()} {value:.4f} (prior {figures['prior'][name]:.4f})"
            for name, value in figures["head"].items()
        )
        return (
            f"task {self.config.kind}: {self.head.seen:,} labels scored before learned"
            + (f": {shown}" if shown else "")
            + (f" ({self.task.averaging})" if shown and self.task.averaging else "")
            + f"; {self.waiting():,} pending; {self.dead_letters:,} label dead letters"
            + (f" ({self.scored_here:,} scored by this rank)" if self.ranks.world > 1 else "")
        )

    def _export(self, registry) -> None:
        """Gauges read when scraped (nothing is computed per batch): counts, and the last ``window``
        labels' figures of the head and of the prior, one child per figure the task reports."""
        labels, pending, dead, window = _gauges(registry)
        labels.set_function(lambda: self.head.seen)
        pending.set_function(self.waiting)
        dead.set_function(lambda: self.dead_letters)
        names = self.task.metrics(self.head.predict(np.zeros((0, self.head.in_dim))), self.pending.y[:0])
        for model in ("head", "prior"):
            for name in names:
                window.labels(model, name).set_function(
                    lambda m=model, n=name: self.head.figures(self.config.window)[m].get(n, math.nan)
                )

    # ------------------------------------------------------------------ checkpoints
    def state(self) -> dict:
        """What a checkpoint holds of the task; the predictions published so far are acknowledged first
        (a checkpoint never holds a head past a prediction the topic may not have)."""
        if self.sink is not None:
            self.sink.flush()
        return {
            "head": self.head.state(), "watermark": self.watermark, "feed": self.feed.position(),
            "features": None if self.features is None else self.features.state(),
            "joint": None if self.joint_head is None else self.joint_head.state(),
            "dead_letters": self.dead_letters, "scored_here": self.scored_here, "held_back": self.held_back,
            "pending": _labels_state(self.pending), "awaiting": _labels_state(self.awaiting),
            "awaiting_x": torch.from_numpy(self.awaiting_x.copy()),
            "revealed": None if self.revealed is None else self.revealed.state(),
        }  # fmt: skip

    def load_state(self, state: dict, where: str) -> str:
        """Continue from ``state()`` of a checkpoint (the same task, or a refusal naming both), in place: the
        trainer (``attached``) and the metrics' gauges hold this stream, and its feed is this run's. Returns
        a line to say about the joint head (``_joint_note``), or ""."""
        saved, mine = state["head"]["config"], self.config.to_dict()
        keys = ("kind", "classes", "features", "hidden")
        if any(saved.get(k) != mine[k] for k in keys):
            was, now = (", ".join(f"{k} {c.get(k)}" for k in keys) for c in (saved, mine))
            raise CheckpointError(
                f"{where} learned task {was}; this run's is {now}: resume with the same task, or use "
                "another checkpoint folder"
            )
        note = self._joint_note(state.get("joint"), where)
        self.head = OnlineHead.from_state(state["head"], f"{where}: task")
        if state.get("features") is not None:
            self.features = LiveFeatures.from_state(state["features"])
        if self.joint_head is not None and state.get("joint") is not None:
            self.joint_head.load_state(state["joint"])
        self.watermark, self.dead_letters = float(state["watermark"]), int(state["dead_letters"])
        self.scored_here = int(state.get("scored_here", self.head.seen))  # (before: one process, all)
        self.pending = self._labels_from(state["pending"])
        if "awaiting" in state:  # (before: no horizon, none)
            self.awaiting = self._labels_from(state["awaiting"])
            self.awaiting_x = state["awaiting_x"].numpy().copy()
        if state.get("revealed") is not None:
            self.revealed = RevealedShares.from_state(state["revealed"])
        self.feed.seek(state["feed"])
        self.held_back = int(state.get("held_back", self.feed.waiting()))  # (a sharded rank 0's)
        return note

    def _labels_from(self, saved: dict) -> Labels:
        """``_labels_state``'s labels back, with the task's dtypes."""
        y = np.asarray(saved["y"], self.pending.y.dtype).reshape(-1, *self.task.label_shape)
        dst = None if saved["dst"] is None else _ids(saved["dst"])
        origin = np.array(saved["origin"], dtype=object) if len(saved["origin"]) == len(y) else None
        return Labels(_ids(saved["node"]), np.asarray(saved["t"], np.float64), y, dst, origin)

    def _joint_note(self, saved: dict | None, where: str) -> str:
        """Refuse a checkpoint whose model learned the task jointly when this run's ``task.joint_weight`` is
        0: resuming would drop its joint head and silently stop the embeddings learning the labels (0 is
        also the default, so an omitted key would do it). Otherwise, what changes, in a line ("": none)."""
        weight = self.config.joint_weight
        if saved is not None and self.joint_head is None:
            was = float(saved["weight"])
            raise CheckpointError(
                f"{where} trained the task jointly with link prediction (task.joint_weight {was:g}: its "
                f"joint head's weights and optimizer); this run's task.joint_weight is 0, which would drop "
                f"them and stop training the embeddings on the labels: resume with task.joint_weight: "
                f"{was:g}, or start a new checkpoint folder to train without the joint loss"
            )
        if saved is None and self.joint_head is not None:
            return f"{where} trained the task on frozen embeddings: joint training (weight {weight:g}) starts"
        if saved is not None and float(saved["weight"]) != weight:
            return (
                f"{where} trained the task jointly at weight {float(saved['weight']):g}; {weight:g} from now"
            )
        return ""

    def close(self) -> None:
        """Close the feed; flush and close the predictions' sink."""
        self.feed.close()
        if self.sink is not None:
            try:
                self.sink.flush()
            finally:
                self.sink.close()


def _labels_state(p: Labels) -> dict:
    """Labels as JSON-able lists (a checkpoint's pending and awaiting labels)."""
    return {
        "node": p.node.tolist(), "t": p.t.tolist(), "y": p.y.tolist(),
        "dst": None if p.dst is None else p.dst.tolist(),
        "origin": [] if p.origin is None else p.origin.tolist(),
    }  # fmt: skip


def _ids(values: list) -> np.ndarray:
    """Saved ids back as the labels held them: int64, or objects where any is a string."""
    return np.array(values, dtype=object if any(isinstance(v, str) for v in values) else np.int64)


def _nulls(value):
    if isinstance(value, dict):
        return {k: _nulls(v) for k, v in value.items()}
    return None if isinstance(value, float) and math.isnan(value) else value


def _plain(value):
    """A JSON-able value of a numpy scalar (or a label's row of shares)."""
    return value.tolist() if hasattr(value, "tolist") else value


def _origin(labels: Labels, i: int) -> str:
    """Where label ``i`` was read (a file's line, a message's offset), as its dead letter names it."""
    return "labels" if labels.origin is None else str(labels.origin[i])


def _payload(labels: Labels, i: int) -> str:
    parts = {"node": labels.node[i], "t": labels.t[i], "y": labels.y[i]}
    if labels.dst is not None:
        parts["dst"] = labels.dst[i]
    return json.dumps({k: _plain(v) for k, v in parts.items()})


def _gauges(r):
    return (
        Gauge("streamgnn_task_labels", "labels scored before learned (restored on resume)", registry=r),
        Gauge("streamgnn_task_pending", "labels waiting for the events to reach their time", registry=r),
        Gauge("streamgnn_task_dead_letters", "labels refused (bad, late, unknown node)", registry=r),
        Gauge(
            "streamgnn_task_window", "prequential figure of the last task.window labels",
            ["model", "metric"], registry=r,
        ),
    )  # fmt: skip
