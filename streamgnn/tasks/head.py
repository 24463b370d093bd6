"""A task's head in stages, so that what the model adds is added to its baselines, never traded for them.

A head reads ``[embeddings ; stream features]`` (the features last, ``features`` columns). Its output is a
sum: a linear map of the stream features (stage 0: exactly the logistic-regression baseline's model), then
an MLP over the stream features (stage 1: what a nonlinearity over them adds), then an MLP over
everything, embeddings included (stage 2: what the link model's state adds). Each branch's last layer
starts at zero, so turning a stage on leaves the head's predictions as they were: a stage is fitted on
what the earlier ones leave (``protocol.fit_head`` freezes them; the online head stops their gradients),
and it is kept only where it improves on them (validation offline, the recent prequential loss online).

Why not one MLP over all the inputs: 100-200 embedding columns, mostly uninformative about a given label,
beside 4-13 informative stream features let such a head fit the training period's noise, and it scored
below a logistic regression on the features alone on every bundled task (benchmarks/CHANGELOG.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from ..errors import ConfigError

if TYPE_CHECKING:  # (only named: ``Task.head`` builds this head)
    from .task import Task


def mlp(in_dim: int, hidden: tuple[int, ...], out_dim: int, dropout: float) -> nn.Sequential:
    """``in_dim -> hidden... -> out_dim`` with ReLU and dropout, its last layer zero (outputs 0 at start)."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(in_dim, width), nn.ReLU(), nn.Dropout(dropout)]
        in_dim = width
    last = nn.Linear(in_dim, out_dim)
    nn.init.zeros_(last.weight)
    nn.init.zeros_(last.bias)
    return nn.Sequential(*layers, last)


class _Zero(nn.Module):
    """The linear stage of a head without stream features: 0 for every row."""

    def __init__(self, out_dim: int) -> None:
        super().__init__()
        self.out_dim = out_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.new_zeros(len(x), self.out_dim)


class StagedHead(nn.Module):
    """``task``'s head over ``in_dim`` inputs whose last ``features`` are stream features (module
    docstring). ``stages`` lists what it has, in order: ``linear`` (always), ``features`` (an MLP of
    ``hidden`` widths over the stream features; only with features and hidden layers) and ``joint`` (over
    every input; only when there are inputs beside the features). ``stage``: how many of them answer."""

    def __init__(
        self, task: Task, in_dim: int, features: int, hidden: tuple[int, ...], dropout: float
    ) -> None:
        super().__init__()
        if not 0 <= features <= in_dim:
            raise ConfigError(f"a head over {in_dim} inputs cannot have {features} stream features")
        self.in_dim, self.features = int(in_dim), int(features)
        # no stream features: a constant 0, the joint stage's own bias takes the prior
        self.linear = nn.Linear(self.features, task.out_dim) if self.features else _Zero(task.out_dim)
        self.stages = ["linear"]
        self.branches = nn.ModuleDict()
        if self.features and hidden:
            self.branches["features"] = mlp(self.features, hidden, task.out_dim, dropout)
            self.stages.append("features")
        if in_dim > self.features:
            self.branches["joint"] = mlp(in_dim, hidden, task.out_dim, dropout)
            self.stages.append("joint")
        self.stage = len(self.stages)

    def parts(self, x: torch.Tensor, *, detach: bool = False) -> list[torch.Tensor]:
        """Every stage's output: the linear map's, then each sum with one more branch. ``detach``: each
        branch learns on what the earlier stages leave, without moving them (the online head)."""
        feats = x[:, self.in_dim - self.features :]
        out = [self.linear(feats)]
        for name in self.stages[1:]:
            prev = out[-1].detach() if detach else out[-1]
            out.append(prev + self.branches[name](feats if name == "features" else x))
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.parts(x)[self.stage - 1]

    def module(self, stage: int) -> nn.Module:
        """What stage ``stage`` (0-based) adds."""
        name = self.stages[stage]
        return self.linear if name == "linear" else self.branches[name]
