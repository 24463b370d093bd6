"""The one place a labelled task is defined: what its head reads, its loss, its metrics.

A ``Task`` turns a link model's stream state into a prediction: node tasks read the node's embedding at the
label's time, edge tasks the pair ``[z_src, z_dst]``, beside the label's causal stream features. Its head
is ``head.StagedHead`` (a logistic regression on the stream features, then MLPs that add to it: the
baselines' model is its first stage). Its evaluation protocol is ``protocol.fit_head``: train on the
training split's labels, pick each stage's epoch by the task's ``selection`` on validation, report its
metrics on test. A new task is one module: a subclass that says
which ends it reads (``on_edges``) and, where it differs from its family, its loss and metrics.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..errors import ConfigError
from ..train.metrics import average_precision
from .head import StagedHead
from .metrics import accuracy, macro_f1, mae, rmse, roc_auc


@dataclass(frozen=True)
class Task(ABC):
    """A labelled task over a link model's stream state (module docstring)."""

    on_edges = False  # the head reads [z_src, z_dst] (an edge's ends) rather than z_node
    # how ``metrics`` averages over labels given their times, as the live job's summary says it ("": it
    # pools every label alike)
    averaging = ""
    # the offline protocol's loss (``protocol.fit_head``, unless ``HeadConfig.balanced`` says otherwise):
    # every class weighing the same (``balance``), or each label alike (the plain loss)
    balanced = True

    @property
    @abstractmethod
    def out_dim(self) -> int:
        """Width of the head's output."""

    @property
    def label_shape(self) -> tuple[int, ...]:
        """The shape of one label's ``y``: ``()`` for a class or a value, ``(C,)`` for a distribution."""
        return ()

    @property
    def fixed_inputs(self) -> int:
        """How many leading inputs of the online head (``tasks.online``) are left unstandardised."""
        return 0

    def head(self, in_dim: int, features: int, hidden: tuple[int, ...], dropout: float) -> nn.Module:
        """The online head over ``in_dim`` inputs whose last ``features`` are stream features: a
        ``head.StagedHead`` (node affinity's differs)."""
        return StagedHead(self, in_dim, features, hidden, dropout)

    @abstractmethod
    def target(self, y: np.ndarray) -> torch.Tensor:
        """The labels as the loss takes them."""

    @abstractmethod
    def losses(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Each row's loss ``[n]`` of the head's outputs ``[n, out_dim]`` against ``target(y)``."""

    def loss(self, out: torch.Tensor, y: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
        """Mean loss, each row's weighted by ``weight`` (``balance``'s) where given."""
        each = self.losses(out, y)
        return each.mean() if weight is None else (each * weight).mean()

    def balance(self, y: np.ndarray) -> np.ndarray | None:
        """Per-row weights under which every class weighs the same in the loss (mean 1), or None (values).
        A rare class (217 bans in 157,474 edits) otherwise moves a head's weights hardly at all: most
        minibatches hold none of it."""
        return None

    @abstractmethod
    def predict(self, out: torch.Tensor) -> np.ndarray:
        """What the head predicts: P(positive) ``[n]``, class probabilities ``[n, C]`` or values ``[n]``."""

    @abstractmethod
    def metrics(self, scores: np.ndarray, y: np.ndarray, t: np.ndarray | None = None) -> dict[str, float]:
        """The task's figures of ``predict``'s output against the labels (NaN where undefined). ``t``: the
        labels' times, for a figure its protocol averages per label time (``averaging``: node affinity's
        NDCG, TGB's); without them every label weighs alike."""

    @abstractmethod
    def selection(self, metrics: dict[str, float]) -> float:
        """The validation figure that picks the head's epoch (higher is better)."""

    def inputs(self, z_src: np.ndarray, z_dst: np.ndarray | None) -> np.ndarray:
        """The head's input rows from the ends' embeddings (``z_dst`` is None for node labels)."""
        if not self.on_edges:
            return z_src
        if z_dst is None:
            raise ConfigError(f"{type(self).__name__} reads an edge's two ends: the labels have no dst")
        return np.concatenate([z_src, z_dst], axis=1)


@dataclass(frozen=True)
class Classification(Task):
    """``classes`` classes ``0..classes-1``: binary (one logit, BCE; AUC-ROC and AP) or multi-class
    (softmax, cross-entropy; macro-F1 and accuracy)."""

    classes: int = 2

    def __post_init__(self) -> None:
        if not isinstance(self.classes, int) or self.classes < 2:
            raise ConfigError(f"{type(self).__name__}.classes must be an int >= 2, got {self.classes!r}")

    @property
    def binary(self) -> bool:
        return self.classes == 2

    @property
    def out_dim(self) -> int:
        return 1 if self.binary else self.classes

    def target(self, y: np.ndarray) -> torch.Tensor:
        y = np.asarray(y)
        bad = (y < 0) | (y >= self.classes) | (y != np.round(y))
        if bad.any():
            raise ConfigError(
                f"{type(self).__name__}: label {y[bad][0]!r} (row {int(np.argmax(bad))}) is not a class in "
                f"0..{self.classes - 1}"
            )
        return torch.as_tensor(y, dtype=torch.float32 if self.binary else torch.long)

    def losses(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.binary:
            return nn.functional.binary_cross_entropy_with_logits(out[:, 0], y, reduction="none")
        return nn.functional.cross_entropy(out, y, reduction="none")

    def balance(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y, np.int64)
        counts = np.bincount(y, minlength=self.classes).astype(np.float64)
        present = counts > 0
        per_class = np.zeros(self.classes)
        per_class[present] = len(y) / (present.sum() * counts[present])
        return per_class[y]

    def predict(self, out: torch.Tensor) -> np.ndarray:
        if self.binary:
            return torch.sigmoid(out[:, 0]).double().numpy()
        return torch.softmax(out, dim=1).double().numpy()

    def metrics(self, scores: np.ndarray, y: np.ndarray, t: np.ndarray | None = None) -> dict[str, float]:
        if self.binary:
            return {"auc": roc_auc(scores, y), "ap": average_precision(scores, y)}
        pred = np.argmax(scores, axis=1)
        return {"macro_f1": macro_f1(pred, y, self.classes), "accuracy": accuracy(pred, y)}

    def selection(self, metrics: dict[str, float]) -> float:
        value = metrics["auc" if self.binary else "macro_f1"]
        return -math.inf if math.isnan(value) else value


@dataclass(frozen=True)
class Regression(Task):
    """A real value per label (a rating): mean squared error; MAE and RMSE."""

    @property
    def out_dim(self) -> int:
        return 1

    def target(self, y: np.ndarray) -> torch.Tensor:
        y = np.asarray(y, np.float64)
        if not np.all(np.isfinite(y)):
            raise ConfigError(
                f"{type(self).__name__}: a label is NaN or infinite (row {int(np.argmin(np.isfinite(y)))})"
            )
        return torch.as_tensor(y, dtype=torch.float32)

    def losses(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (out[:, 0] - y) ** 2

    def predict(self, out: torch.Tensor) -> np.ndarray:
        return out[:, 0].double().numpy()

    def metrics(self, scores: np.ndarray, y: np.ndarray, t: np.ndarray | None = None) -> dict[str, float]:
        return {"mae": mae(scores, y), "rmse": rmse(scores, y)}

    def selection(self, metrics: dict[str, float]) -> float:
        return -math.inf if math.isnan(metrics["rmse"]) else -metrics["rmse"]
