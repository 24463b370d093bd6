"""The ``task`` section of a job's YAML: which labelled task ``streamgnn train`` learns beside link
prediction, where its labels come from, and how its online head learns.

    task:
      kind: node_classification     # node_regression, node_affinity, edge_classification, edge_regression
      classes: 2
      labels_file: labels.jsonl     # or labels_topic: labels (with --kafka)
      predictions_topic: task-predictions   # optional: each label's prediction, published there
      joint_weight: 0.5             # optional: train the model's embeddings with the task's loss too
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..configs import Config
from ..errors import ConfigError
from .affinity import NodeAffinity
from .edge import EdgeClassification, EdgeRegression
from .node import NodeClassification, NodeRegression
from .task import Task

TaskKind = Literal[
    "node_classification", "node_regression", "node_affinity", "edge_classification", "edge_regression"
]
KINDS = {
    "node_classification": NodeClassification,
    "node_regression": NodeRegression,
    "node_affinity": NodeAffinity,
    "edge_classification": EdgeClassification,
    "edge_regression": EdgeRegression,
}


@dataclass(frozen=True)
class TaskConfig(Config):
    """A labelled task learned online (``tasks.online``): its ``kind`` and ``classes`` (classification);
    its labels from ``labels_file`` (JSON lines) or ``labels_topic`` (a Kafka topic of JSON-lines
    messages; the events' broker), one of the two. The head: an MLP of ``hidden`` widths over the model's
    embeddings (``tasks.head``: a logistic regression on the stream features, then MLPs that add to it),
    Adam at ``lr``; each learned batch takes ``steps`` steps, each on the new labels and
    ``replay_batch`` earlier ones drawn from the last ``replay`` (a ring per class: a rare class is
    otherwise seen once and forgotten). ``window``: labels per prequential window (the status line's
    and Prometheus' figures; per class, the horizon of the loss that picks the head's stage).
    ``features``: the head also reads
    the label's causal stream features (``live_features``: degree, activity decayed over ``tau``, recency;
    for edges both ends' and the reputation ones), which a memory-based embedding lacks.
    ``predictions_topic``: a Kafka topic (the events' broker) the job publishes each label's prediction to,
    as the head made it before learning from the label (``jobs.labelled``). ``joint_weight``: 0 (the
    default), the head reads the link model's embeddings as link prediction trains them; above 0, the
    task's loss on each learned batch's labels, times this weight, is added to the link loss in the same
    backward pass, so the embeddings learn the labels too (``tasks.joint``; a model with learned
    embeddings only). ``horizon``: a label at ``t`` is known only once the events pass ``t + horizon``
    (it describes that period: node affinity's next period's interactions); it is scored at ``t`` and
    learned from then (0: at once). ``node_affinity`` (``affinity.NodeAffinity``): ``y`` is each of
    ``classes`` classes' share of the node's next period (``horizon`` > 0), scored by NDCG@``top_k``, and
    ``/predict`` ranks a node's ``top_k`` classes."""

    kind: TaskKind = "node_classification"
    classes: int = 2
    labels_file: str | None = None
    labels_topic: str | None = None
    hidden: tuple[int, ...] = (80,)
    lr: float = 1e-2
    replay: int = 4096
    replay_batch: int = 256
    steps: int = 4
    window: int = 1000
    features: bool = True
    tau: float = 86400.0
    predictions_topic: str | None = None
    joint_weight: float = 0.0
    horizon: float = 0.0
    top_k: int = 10

    def __post_init__(self) -> None:
        if (self.labels_file is None) == (self.labels_topic is None):
            raise ConfigError("task: give its labels as labels_file or labels_topic (one of the two)")
        if not isinstance(self.classes, int) or self.classes < 2:
            raise ConfigError(f"task.classes must be an int >= 2, got {self.classes!r}")
        if any(not isinstance(w, int) or w < 1 for w in self.hidden):
            raise ConfigError(f"task.hidden: widths are ints >= 1, got {list(self.hidden)}")
        if not (self.lr > 0 and self.tau > 0):
            raise ConfigError(f"task.lr and task.tau must be > 0, got {self.lr} and {self.tau}")
        if isinstance(self.joint_weight, bool) or not (
            isinstance(self.joint_weight, (int, float)) and 0 <= self.joint_weight < float("inf")
        ):
            raise ConfigError(
                f"task.joint_weight must be a number >= 0 (0: no joint training), got {self.joint_weight!r}"
            )
        if isinstance(self.horizon, bool) or not (
            isinstance(self.horizon, (int, float)) and 0 <= self.horizon < float("inf")
        ):
            raise ConfigError(f"task.horizon must be a number >= 0 (0: a label is known at its time), got "
                              f"{self.horizon!r}")  # fmt: skip
        if self.kind == "node_affinity" and not self.horizon > 0:
            raise ConfigError(
                "task.horizon: a node_affinity label describes the period after its time, known only at its "
                "end: give that period's length in the events' time units (e.g. horizon: 86400 for a day)"
            )
        if self.joint_weight and self.horizon:
            raise ConfigError(
                "task.joint_weight with task.horizon > 0: the joint loss moves the model at the label's "
                "time, before the label is known; set one of them to 0"
            )
        if self.predictions_topic is not None and not self.predictions_topic.strip():
            raise ConfigError("task.predictions_topic: give a topic name, or leave it out")
        for name in ("replay", "replay_batch", "window", "steps", "top_k"):
            low = 1 if name in ("window", "steps", "top_k") else 0
            if not isinstance(getattr(self, name), int) or getattr(self, name) < low:
                raise ConfigError(f"task.{name} must be an int >= {low}, got {getattr(self, name)!r}")

    def task(self) -> Task:
        """The ``Task`` this names."""
        cls = KINDS[self.kind]
        if self.kind == "node_affinity":
            return cls(self.classes, self.top_k)
        return cls(self.classes) if self.kind.endswith("classification") else cls()
