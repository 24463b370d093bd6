"""Centralized training of a graph network, plain or with random edge sampling (a stochastic GNN).

With ``keep < 1`` every shift of every step sees a fresh random subgraph, each link kept with probability
``keep`` independently per signal in the batch (``Bernoulli(1 - keep)`` on a ``LocalExchange``): the training
of Gao, Isufi and Ribeiro's stochastic GNNs, which makes the learned filters hold up when links drop at run
time. ``keep = 1`` is ordinary training. Everything is seeded: the same config gives the same weights.

>>> import numpy as np, torch
>>> from streamgnn.filters.graph_filter import GraphNN, GraphNNConfig
>>> from streamgnn.filters.shift import ShiftOperator
>>> S = ShiftOperator.from_adjacency(np.ones((4, 4)) - np.eye(4))
>>> def batch(rng, size):  # learn to output each node's neighbor sum
...     x = torch.from_numpy(rng.standard_normal((size, 4, 1))).float()
...     return x, S, (S.to_dense()[0] @ x).detach()
>>> model = GraphNN(GraphNNConfig(features=(1, 1), taps=2))
>>> losses = fit(model, batch, torch.nn.functional.mse_loss, FitConfig(steps=200, lr=0.05))
>>> losses[-1] < 1e-3
True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..configs import Config
from ..errors import ConfigError
from ..filters.exchange import LocalExchange
from ..filters.failures import Bernoulli, mix_seed
from ..filters.graph_filter import GraphNN
from ..filters.shift import ShiftOperator
from ..progress import progress_bar

Batch = Callable[[np.random.Generator, int], tuple[Tensor, ShiftOperator, Tensor]]


@dataclass(frozen=True)
class FitConfig(Config):
    steps: int = 1500
    batch: int = 64
    lr: float = 3e-3
    keep: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch < 1 or self.lr <= 0:
            raise ConfigError(f"FitConfig needs positive steps, batch and lr, got {self}")
        if not 0 < self.keep <= 1:
            raise ConfigError(f"FitConfig.keep (link keep probability) must be in (0, 1], got {self.keep}")


def fit(
    model: GraphNN,
    batches: Batch,
    loss_fn: Callable[[Tensor, Tensor], Tensor],
    config: FitConfig,
    desc: str | None = None,
) -> list[float]:
    """Adam on ``loss_fn(model(x), y)`` for ``config.steps`` batches of ``batches(rng, size)``; returns the
    loss of every step. ``desc`` shows a progress bar."""
    torch.manual_seed(mix_seed(config.seed, 1))
    rng = np.random.default_rng(mix_seed(config.seed, 2))
    failures = Bernoulli(1.0 - config.keep, mix_seed(config.seed, 3)) if config.keep < 1 else None
    exchange = LocalExchange(failures, per_lane=True, exact=False)
    opt = torch.optim.Adam(model.parameters(), lr=config.lr)
    losses = []
    bar = progress_bar(iterable=range(config.steps), desc=desc, disable=desc is None, leave=False)
    for _ in bar:
        x, shift, y = batches(rng, config.batch)
        exchange.begin_step(shift)
        loss = loss_fn(model(x, exchange), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if len(losses) % 50 == 0:
            bar.set_postfix(loss=f"{np.mean(losses[-50:]):.4f}")
    return losses
