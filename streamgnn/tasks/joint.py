"""A labelled task trained jointly with link prediction: the task's loss on a step's labels, weighted,
added to the link loss in the same backward pass, so that the model's embedding module (TGN's memory
updater and attention) learns to keep what the labels are about, not only what predicts the next link.

Frozen embeddings (``task.joint_weight: 0``, the default) carry little of a rare label such as a
Wikipedia ban beyond what the stream features hold (``benchmarks/RESULTS.md``); the joint loss is the
model's side of that. Its head is its own (``JointHead``: a small MLP over the normalised embeddings,
ordinary initialisation, so its gradient reaches the embeddings from the first step); the task's answer
is still the staged head's (``head.StagedHead``), read from the jointly trained embeddings.

Labels never leak: a label's embedding for the joint loss is computed in ``before_apply``, from the state
before the batch that holds its event (the memory and the store as the step's ``prepare`` read them), at
the earliest label time of its group, and its loss only moves the weights the later labels are predicted
with. Classes weigh the same (from the counts seen so far): 217 bans in 157,474 edits would otherwise
teach it nothing. Only a model with a learned embedding (``LinkModel.joint_embed``: TGN) can take it.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..errors import ConfigError
from ..events import EventBatch
from ..train.protocol import JointTerm
from ..train.step import Attached, StepEmbeddings
from .labels import Labels
from .task import Classification, Task

HIDDEN = 80  # the joint head's width
LR = 1e-3  # its Adam's learning rate


def joint_model(model, weight: float):
    """``model`` (a ``LinkModel``) if a task can train its embeddings jointly, else a one-line refusal."""
    if not getattr(model, "trainable", False) or not hasattr(model, "joint_embed"):
        name = getattr(model, "name", type(model).__name__)
        raise ConfigError(
            f"task.joint_weight {weight}: {name} has no embedding a task loss can train (joint training "
            "needs a model with learned embeddings, e.g. TGN's); set task.joint_weight: 0 for a head over "
            "its frozen state"
        )
    return model


class JointHead:
    """The task's loss on labels for the link model's backward pass (module docstring): ``weight`` times
    ``task``'s loss of a small head over the labels' embeddings (an edge label: both ends')."""

    def __init__(self, task: Task, model, weight: float, seed: int = 0) -> None:
        if not weight > 0:
            raise ConfigError(f"task.joint_weight must be > 0 for joint training, got {weight}")
        self.task, self.model, self.weight = task, joint_model(model, weight), float(weight)
        in_dim = model.out_dim * (2 if task.on_edges else 1)
        with torch.random.fork_rng(devices=[]):  # the job's own random draws are left as they were
            torch.manual_seed(seed)
            self.head = nn.Sequential(
                nn.LayerNorm(in_dim, elementwise_affine=False),
                nn.Linear(in_dim, HIDDEN),
                nn.ReLU(),
                nn.Linear(HIDDEN, task.out_dim),
            )
        self.optimizer = torch.optim.Adam(self.head.parameters(), lr=LR)
        self.counts = np.zeros(task.classes if isinstance(task, Classification) else 1)

    def term(self, ends: list[np.ndarray], y: np.ndarray, t: float, blank: int, step: int) -> JointTerm:
        """The weighted loss of labels ``y`` whose ends are ``ends`` (internal ids before the batch, -1:
        a node the store does not hold yet, read as the blank row), embedded at ``t`` with autograd."""
        z = self.model.joint_embed(np.concatenate(ends), float(t), blank, step)
        x = torch.cat(z.float().split(len(y)), dim=1)
        weight = self._balance(np.asarray(y))
        self.head.train()
        loss = self.task.loss(self.head(x), self.task.target(np.asarray(y)), weight)
        return JointTerm(self.weight * loss, self.optimizer)

    def _balance(self, y: np.ndarray) -> torch.Tensor | None:
        """Row weights under which each class weighs the same, from every label counted so far."""
        if not isinstance(self.task, Classification):
            return None
        self.counts += np.bincount(y.astype(np.int64), minlength=len(self.counts))
        present = self.counts > 0
        per_class = np.zeros(len(self.counts))
        per_class[present] = self.counts.sum() / (present.sum() * self.counts[present])
        return torch.as_tensor(per_class[y.astype(np.int64)], dtype=torch.float32)

    def state(self) -> dict:
        return {
            "weight": self.weight,
            "head": self.head.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "counts": torch.from_numpy(self.counts.copy()),
        }

    def load_state(self, state: dict) -> None:
        """Continue from ``state()`` (a checkpoint's), in place."""
        self.head.load_state_dict(state["head"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.counts = state["counts"].numpy().copy()


class TrainingLabels(Attached):
    """Labels given up front as a follower of offline link training's steps (``stream.pretrain``,
    ``train.fit_offline``'s ``attach``): before each learned batch is applied, the labels it makes due (as
    the live job does: after the newest event of the batches before, at or before this batch's newest)
    give the step a ``JointTerm`` (``embed_at_labels`` reads each label from the same state). A batch
    older than the newest seen starts a new pass over the stream (a new epoch). Only learned batches take
    labels: the validation and test parts' steps, which learn nothing, read none."""

    def __init__(self, head: JointHead, trainer, labels: Labels) -> None:
        self.head, self.trainer, self.labels = head, trainer, labels
        self.watermark = -np.inf
        self._terms: tuple[JointTerm, ...] = ()

    def before_apply(self, batch: EventBatch, learn: bool, embedded: StepEmbeddings) -> None:
        if not len(batch):
            return
        until = float(np.max(batch.t))
        if until < self.watermark:
            self.watermark = -np.inf  # a new pass
        lo, hi = np.searchsorted(self.labels.t, [self.watermark, until], side="right")
        self.watermark = until
        if not learn or hi <= lo:
            return
        labels, blank = self.labels.take(slice(lo, hi)), embedded.blank
        ends = [labels.node] if labels.dst is None else [labels.node, labels.dst]
        rows = [self._rows(e, blank) for e in ends]
        self._terms = (self.head.term(rows, labels.y, float(labels.t[0]), blank, self.trainer.steps),)

    def _rows(self, ids: np.ndarray, blank: int) -> np.ndarray:
        """The store's rows of ``ids`` before the batch, -1 for a node it does not hold then."""
        if not blank:
            return np.full(len(ids), -1, np.int64)
        rows = self.trainer.store.node_index(ids, strict=False)
        return np.where(rows < blank, rows, -1)

    def joint(self) -> tuple[JointTerm, ...]:
        terms, self._terms = self._terms, ()
        return terms

    def state(self) -> dict:
        return {"joint": self.head.state(), "watermark": self.watermark}


def training_labels(task: Task, labels: Labels, weight: float, seed: int = 0):
    """``fit_offline``'s ``attach``: a trainer's ``TrainingLabels`` of ``labels`` at ``weight``."""
    return lambda trainer: {
        "joint": TrainingLabels(JointHead(task, trainer.link_model, weight, seed), trainer, labels)
    }
