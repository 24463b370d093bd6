"""The evaluation protocol every task shares: a head trained on the training split's labels, its epoch
picked on validation, its figures reported on test (chronological 70/15/15, ``labels.LabelSplit``).

The inputs are whatever the task reads at each label's time: a link model's embeddings (ours) or causal
stream features (the logistic-regression baselines: the same protocol with a linear head), so a model
and its baselines are trained, selected and scored the same way on the same rows.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import ConfigError
from .labels import LabelSplit
from .task import Task


@dataclass(frozen=True)
class HeadConfig:
    """How a head is trained: ``hidden`` widths (``()``: linear, a logistic regression), Adam at ``lr``
    with ``weight_decay``, minibatches of ``batch_size`` shuffled by ``seed``, at most ``epochs`` passes,
    stopping ``patience`` epochs past the best validation figure (``Task.selection``)."""

    hidden: tuple[int, ...] = (80,)
    dropout: float = 0.1
    lr: float = 1e-3
    weight_decay: float = 0.0
    batch_size: int = 128
    epochs: int = 50
    patience: int = 5
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("batch_size", "epochs", "patience"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ConfigError(f"HeadConfig.{name} must be an int >= 1, got {getattr(self, name)!r}")
        if not (self.lr > 0 and self.weight_decay >= 0 and 0 <= self.dropout < 1):
            raise ConfigError("HeadConfig needs lr > 0, weight_decay >= 0 and 0 <= dropout < 1")


@dataclass(frozen=True)
class HeadResult:
    """A fitted head's figures on validation and test, its predictions for every row (``Task.predict``),
    the epochs it ran and the one whose weights it kept (1-based)."""

    val: dict[str, float]
    test: dict[str, float]
    scores: np.ndarray
    epochs: int
    best_epoch: int
    val_per_epoch: list[float] = field(default_factory=list)


def fit_head(
    task: Task, x: np.ndarray, y: np.ndarray, split: LabelSplit, config: HeadConfig | None = None
) -> HeadResult:
    """Train ``task``'s head on ``x[split.train]`` (inputs standardised by the training rows' mean and
    spread), keep the epoch with the best validation figure, and score every row with it."""
    config = config or HeadConfig()
    x = np.asarray(x, np.float32)
    if x.ndim != 2 or len(x) != len(y):
        raise ConfigError(f"fit_head: inputs of shape {x.shape} for {len(y)} labels")
    if not len(split.train):
        raise ConfigError("fit_head: the training split holds no labels")
    mean = x[split.train].mean(axis=0)
    std = x[split.train].std(axis=0)
    inputs = torch.from_numpy((x - mean) / np.where(std > 0, std, 1.0))
    target = task.target(y)
    torch.manual_seed(config.seed)
    head = task.head(x.shape[1], config.hidden, config.dropout)
    optimizer = torch.optim.Adam(head.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    rng = np.random.default_rng(config.seed)
    best, best_epoch, best_state, history = -math.inf, 0, None, []
    for epoch in range(1, config.epochs + 1):
        head.train()
        order = split.train[rng.permutation(len(split.train))]
        for lo in range(0, len(order), config.batch_size):
            rows = torch.from_numpy(order[lo : lo + config.batch_size])
            optimizer.zero_grad()
            task.loss(head(inputs[rows]), target[rows]).backward()
            optimizer.step()
        history.append(task.selection(task.metrics(_predict(task, head, inputs[split.val]), y[split.val])))
        if history[-1] > best or best_state is None or best == -math.inf:
            best, best_epoch, best_state = history[-1], epoch, copy.deepcopy(head.state_dict())
        elif epoch - best_epoch >= config.patience:
            break
    head.load_state_dict(best_state)
    scores = _predict(task, head, inputs)
    val, test = (task.metrics(scores[rows], y[rows]) for rows in (split.val, split.test))
    return HeadResult(val, test, scores, len(history), best_epoch, history)


@torch.no_grad()
def _predict(task: Task, head: torch.nn.Module, inputs: torch.Tensor) -> np.ndarray:
    head.eval()
    return task.predict(head(inputs))
