"""The evaluation protocol every task shares: a head trained on the training split's labels, its epoch
picked on validation, its figures reported on test (chronological 70/15/15, ``labels.LabelSplit``).

The inputs are whatever the task reads at each label's time: a link model's embeddings (ours) or causal
stream features (the logistic-regression baselines: the same protocol with a linear head), so a model
and its baselines are trained, selected and scored the same way on the same rows.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import ConfigError
from .head import StagedHead
from .labels import LabelSplit
from .task import Task


@dataclass(frozen=True)
class HeadConfig:
    """How a head's stages are trained (``head.StagedHead``): ``hidden`` widths of its MLPs (``()``: no
    feature MLP, a linear joint stage), Adam at ``lr`` with ``weight_decay``, minibatches of ``batch_size``
    shuffled by ``seed``, at most ``epochs`` passes a stage, stopping ``patience`` epochs past the best
    validation figure (``Task.selection``); ``balanced``: every class weighs the same in the loss
    (``Task.balance``), or each label alike (False); None: as the task's protocol says (``Task.balanced``:
    node classification's plain loss, DyGLib's; the rating signs' balanced one). The linear stage is
    trained with ``LINEAR``'s settings (the logistic-regression baseline's), whatever this config's, but
    under this config's loss. ``penalties``: also fit one linear head over all the inputs at once
    (``fit_linear``) at each of these L2 penalties, and keep whichever head, staged or linear, scores best
    on validation (``()``: the staged head alone)."""

    hidden: tuple[int, ...] = (80,)
    dropout: float = 0.1
    lr: float = 1e-3
    weight_decay: float = 0.0
    batch_size: int = 128
    epochs: int = 50
    patience: int = 5
    balanced: bool | None = None
    seed: int = 0
    penalties: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        for name in ("batch_size", "epochs", "patience"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ConfigError(f"HeadConfig.{name} must be an int >= 1, got {getattr(self, name)!r}")
        if not (self.lr > 0 and self.weight_decay >= 0 and 0 <= self.dropout < 1):
            raise ConfigError("HeadConfig needs lr > 0, weight_decay >= 0 and 0 <= dropout < 1")
        if not all(isinstance(p, int | float) and 0 <= p < math.inf for p in self.penalties):
            raise ConfigError(f"HeadConfig.penalties must be numbers >= 0, got {self.penalties!r}")
        if not (self.balanced is None or isinstance(self.balanced, bool)):
            raise ConfigError(
                f"HeadConfig.balanced must be a bool or None (the task's), got {self.balanced!r}"
            )

    def weighs_classes(self, task: Task) -> bool:
        """Whether ``task``'s loss weighs every class the same under this config (``balanced``)."""
        return task.balanced if self.balanced is None else self.balanced


LINEAR = HeadConfig(hidden=(), lr=1e-2, batch_size=64, epochs=30, balanced=True)


@dataclass(frozen=True)
class HeadResult:
    """A fitted head's figures on validation and test, its predictions for every row (``Task.predict``),
    the epochs it ran (all stages), the epoch of the last stage whose weights it kept (1-based; 0: that
    stage improved nothing and answers as the ones before), the validation figure per epoch, and the
    validation figure after each stage (``stages``: their names)."""

    val: dict[str, float]
    test: dict[str, float]
    scores: np.ndarray
    epochs: int
    best_epoch: int
    val_per_epoch: list[float] = field(default_factory=list)
    stages: dict[str, float] = field(default_factory=dict)


def fit_head(
    task: Task,
    x: np.ndarray,
    y: np.ndarray,
    split: LabelSplit,
    config: HeadConfig | None = None,
    *,
    features: int | None = None,
) -> HeadResult:
    """Train ``task``'s staged head on ``x[split.train]`` (inputs standardised by the training rows' mean
    and spread), whose last ``features`` columns (default: all) are stream features: each stage in turn,
    the earlier ones frozen, keeping the epoch with the best validation figure, or none where no epoch
    beats the stages before it; then score every row. With ``config.penalties``, the linear heads over all
    the inputs at once too (``fit_linear``), and the best of them all on validation."""
    config = config or HeadConfig()
    x = np.asarray(x, np.float32)
    if x.ndim != 2 or len(x) != len(y):
        raise ConfigError(f"fit_head: inputs of shape {x.shape} for {len(y)} labels")
    if not len(split.train):
        raise ConfigError("fit_head: the training split holds no labels")
    mean = x[split.train].mean(axis=0)
    std = x[split.train].std(axis=0)
    inputs = torch.from_numpy((x - mean) / np.where(std > 0, std, 1.0))
    torch.manual_seed(config.seed)
    features = x.shape[1] if features is None else features
    head = StagedHead(task, x.shape[1], features, config.hidden, config.dropout)
    staged = fit_stages(task, head, inputs, y, split, config)
    fitted = [
        staged,
        *(fit_linear(task, inputs, y, split, p, config.weighs_classes(task)) for p in config.penalties),
    ]
    best = max(fitted, key=lambda r: task.selection(r.val))  # the staged head on a tie
    return dataclasses.replace(best, stages={**staged.stages, **_linear_figures(fitted[1:], config)})


def _linear_figures(fitted: list[HeadResult], config: HeadConfig) -> dict[str, float]:
    """Each linear head's validation figure, named by its penalty (``linear_all_<penalty>``)."""
    return {
        f"linear_all_{p:g}": r.stages["linear_all"] for p, r in zip(config.penalties, fitted, strict=True)
    }


def fit_linear(
    task: Task, inputs: torch.Tensor, y: np.ndarray, split: LabelSplit, penalty: float, balanced: bool = True
) -> HeadResult:
    """One linear head over all of ``inputs`` (standardised) at once, its loss on the training rows plus
    ``penalty / 2`` times its squared weights, minimised by L-BFGS (a convex problem: no epochs to pick,
    and the start drawn under the caller's seed barely matters). Why beside the staged head: its later
    stages are each fitted on what the regression on the stream features leaves, while a regularised
    regression on the embedding and the features together moves the features' weights too. Measured on
    JODIE Wikipedia (benchmarks/RESULTS.md): better on validation on one seed of three, so opt-in."""
    data = _Data(task, inputs, y, split)
    head = StagedHead(task, inputs.shape[1], inputs.shape[1], (), 0.0)
    rows = torch.from_numpy(split.train)
    x, target = data.inputs[rows], data.target[rows]
    weights = data.weight(HeadConfig(balanced=balanced))
    weight = None if weights is None else weights[rows]
    optimizer = torch.optim.LBFGS(head.parameters(), max_iter=200, line_search_fn="strong_wolfe")

    def objective() -> torch.Tensor:
        optimizer.zero_grad()
        loss = task.loss(head(x), target, weight) + 0.5 * penalty * head.linear.weight.square().sum()
        loss.backward()
        return loss

    optimizer.step(objective)
    scores = _predict(task, head, data.inputs)
    val, test = (task.metrics(scores[r], y[r]) for r in (split.val, split.test))
    figure = task.selection(val)
    return HeadResult(val, test, scores, 1, 1, [figure], {"linear_all": figure})


def fit_stages(
    task: Task,
    head: torch.nn.Module,
    inputs: torch.Tensor,
    y: np.ndarray,
    split: LabelSplit,
    config: HeadConfig,
) -> HeadResult:
    """Train ``head`` (a ``StagedHead``, or one with its ``stages``, ``stage``, ``features`` and
    ``module``) on ``inputs`` as ``fit_head`` says, a stage at a time; then score every row."""
    data = _Data(task, inputs, y, split)
    best, stages, history, best_epoch = -math.inf, {}, [], 0
    for stage, name in enumerate(head.stages):
        head.stage = stage + 1
        if name == "linear" and not head.features:
            continue  # nothing to fit: a constant 0, the joint stage's own bias takes the prior
        how = (
            dataclasses.replace(LINEAR, balanced=config.balanced, seed=config.seed)
            if name == "linear"
            else config
        )
        best, best_epoch = _fit_stage(head, stage, data, how, best, history)
        stages[name] = best
    scores = _predict(task, head, data.inputs)
    val, test = (task.metrics(scores[rows], y[rows]) for rows in (split.val, split.test))
    return HeadResult(val, test, scores, len(history), best_epoch, history, stages)


class _Data:
    """A head's standardised inputs, targets and split, as its stages read them (``weight``: their loss)."""

    def __init__(self, task: Task, inputs: torch.Tensor, y: np.ndarray, split: LabelSplit) -> None:
        self.task, self.inputs, self.y, self.split = task, inputs, y, split
        self.target = task.target(y)

    def weight(self, config: HeadConfig) -> torch.Tensor | None:
        """Each row's weight in the loss of a stage trained under ``config``: the training rows' class
        weights where ``config.weighs_classes`` (0 elsewhere), or None (each label alike). The one place a
        stage's loss is decided: every stage, the linear one too, reads the config it is given."""
        weight = self.task.balance(self.y[self.split.train]) if config.weighs_classes(self.task) else None
        if weight is None:
            return None
        rows = torch.zeros(len(self.y))
        rows[torch.from_numpy(self.split.train)] = torch.as_tensor(weight, dtype=torch.float32)
        return rows

    def val_figure(self, head: torch.nn.Module) -> float:
        rows = self.split.val
        return self.task.selection(
            self.task.metrics(_predict(self.task, head, self.inputs[rows]), self.y[rows])
        )


def _fit_stage(
    head: StagedHead, stage: int, data: _Data, config: HeadConfig, best: float, history: list[float]
) -> tuple[float, int]:
    """Train stage ``stage``'s parameters alone, under ``config``'s settings and loss (``_Data.weight``);
    keep its best validation epoch if it beats ``best`` (the stages before it: the head as it enters,
    epoch 0). Returns the validation figure kept and the epoch."""
    module = head.module(stage)
    params = list(module.parameters())
    weights = data.weight(config)
    optimizer = torch.optim.Adam(params, lr=config.lr, weight_decay=config.weight_decay)
    rng = np.random.default_rng(config.seed + stage)
    best_state, best_epoch = None, 0
    for epoch in range(1, config.epochs + 1):
        head.eval()  # the frozen stages without dropout: they answer as they will
        module.train()
        order = data.split.train[rng.permutation(len(data.split.train))]
        for lo in range(0, len(order), config.batch_size):
            rows = torch.from_numpy(order[lo : lo + config.batch_size])
            optimizer.zero_grad()
            weight = None if weights is None else weights[rows]
            data.task.loss(head(data.inputs[rows]), data.target[rows], weight).backward()
            optimizer.step()
        history.append(data.val_figure(head))
        if history[-1] > best or (best_state is None and best == -math.inf):  # the first stage: any
            best, best_epoch = history[-1], epoch
            best_state = [p.detach().clone() for p in params]
        elif epoch - best_epoch >= config.patience:
            break
    with torch.no_grad():
        for p, kept in zip(params, best_state or [torch.zeros_like(p) for p in params], strict=True):
            p.copy_(kept)  # no epoch beat the stages before: the branch stays at its zero start
    return best, best_epoch


@torch.no_grad()
def _predict(task: Task, head: torch.nn.Module, inputs: torch.Tensor) -> np.ndarray:
    head.eval()
    return task.predict(head(inputs))
