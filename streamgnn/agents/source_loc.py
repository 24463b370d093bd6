"""Source localization (as in the stochastic-GNN papers): which community did a diffused signal start in?

A stochastic block model graph (``nodes`` nodes in ``communities`` equal communities, edge probability
``p_in`` inside and ``p_out`` across) carries a rumor started at an unknown node ``s`` and observed after
``t`` steps of diffusion, ``x = S^t delta_s`` with ``S = A / lambda_max(A)`` and ``t`` uniform in ``[0,
max_time)``; each observation is scaled to peak 1 (a sensor network reports relative intensities). Every agent
must name the source's community from what it hears from its neighbors: a per-node classification, fully
decentralized.

An agent knows which community it belongs to, so its input is its reading tagged with that community: ``[x_i,
x_i * onehot(c_i)]`` (``communities + 1`` features). Without the tag a permutation-equivariant GNN could not
tell community 3 from community 7. Sources are uniform over all nodes.

>>> task = SourceLocalization(SourceLocConfig(nodes=20, communities=4, train=10, test=5))
>>> task.features(task.x_test).shape, task.y_test.shape
(torch.Size([5, 20, 5]), torch.Size([5]))
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..configs import Config
from ..errors import ConfigError
from ..filters.exchange import Exchange
from ..filters.graph_filter import GraphNN
from ..filters.shift import ShiftOperator


@dataclass(frozen=True)
class SourceLocConfig(Config):
    nodes: int = 100
    communities: int = 10
    p_in: float = 0.8
    p_out: float = 0.02
    max_time: int = 10
    train: int = 4000
    test: int = 500
    seed: int = 0

    def __post_init__(self) -> None:
        if self.communities < 2 or self.nodes < self.communities:
            raise ConfigError(
                f"need >= 2 communities and >= 1 node each, got {self.nodes}/{self.communities}"
            )
        if not (0 <= self.p_out <= 1 and 0 < self.p_in <= 1):
            raise ConfigError(
                f"edge probabilities must be in [0, 1], got p_in={self.p_in} p_out={self.p_out}"
            )
        if self.max_time < 1 or self.train < 1 or self.test < 1:
            raise ConfigError("max_time, train and test must be positive")


def sbm_adjacency(community: np.ndarray, p_in: float, p_out: float, rng: np.random.Generator) -> np.ndarray:
    """A connected undirected SBM draw (redrawn until connected; raises after 100 tries)."""
    n = len(community)
    prob = np.where(community[:, None] == community[None, :], p_in, p_out)
    for _ in range(100):
        a = np.triu(rng.random((n, n)) < prob, 1)
        a = (a | a.T).astype(np.float64)
        reach = np.zeros(n, bool)
        reach[0] = True
        for _ in range(n):
            nxt = reach | (a[reach].sum(axis=0) > 0)
            if (nxt == reach).all():
                break
            reach = nxt
        if reach.all():
            return a
    raise ConfigError(f"no connected SBM graph in 100 draws with p_in={p_in}, p_out={p_out}")


class SourceLocalization:
    """The graph, its shift operator, and train/test signals with their source communities."""

    def __init__(self, config: SourceLocConfig | None = None):
        self.config = c = config or SourceLocConfig()
        rng = np.random.default_rng(c.seed)
        self.community = np.repeat(np.arange(c.communities), -(-c.nodes // c.communities))[: c.nodes]
        self.adjacency = sbm_adjacency(self.community, c.p_in, c.p_out, rng)
        self.shift = ShiftOperator.from_adjacency(self.adjacency, "max_eig")
        s = self.shift.to_dense()[0].double().numpy()
        powers = [np.eye(c.nodes)]
        for _ in range(c.max_time - 1):
            powers.append(s @ powers[-1])
        self._powers = np.stack(powers)
        self.x_train, self.y_train = self._draw(c.train, rng)
        self.x_test, self.y_test = self._draw(c.test, rng)
        self._tag = torch.eye(c.communities)[torch.from_numpy(self.community)]

    def _draw(self, count: int, rng: np.random.Generator) -> tuple[Tensor, Tensor]:
        source = rng.integers(0, self.config.nodes, count)
        steps = rng.integers(0, self.config.max_time, count)
        x = self._powers[steps, :, source]
        x = x / np.abs(x).max(axis=1, keepdims=True)
        return torch.from_numpy(x).float(), torch.from_numpy(self.community[source]).long()

    @property
    def num_features(self) -> int:
        return self.config.communities + 1

    @property
    def num_classes(self) -> int:
        return self.config.communities

    def features(self, x: Tensor, nodes: np.ndarray | None = None) -> Tensor:
        """Signals ``[B, N]`` -> agent inputs ``[B, n, communities + 1]`` for ``nodes`` (default: all)."""
        tag = self._tag if nodes is None else self._tag[torch.from_numpy(np.asarray(nodes))]
        x = x if nodes is None else x[:, torch.from_numpy(np.asarray(nodes))]
        x = x.unsqueeze(-1)
        return torch.cat([x, x * tag], dim=-1)


@torch.no_grad()
def correct_counts(
    model: GraphNN, task: SourceLocalization, exchange: Exchange, rounds: int = 1, batch: int = 100
) -> tuple[int, int]:
    """``(correct, total)`` per-node predictions over the test set for the rows ``exchange`` computes.

    Each test signal is observed for ``rounds`` consecutive steps (memory kept across them, cleared between
    signals) and scored on the last: aggregations that reuse stale messages see the previous rounds' ones."""
    correct = total = 0
    rows = exchange.rows if exchange.rows.size else None
    for lo in range(0, len(task.y_test), batch):
        x = task.x_test[lo : lo + batch]
        y = task.y_test[lo : lo + batch]
        feats = task.features(x, rows)
        exchange.clear_memory()
        for _ in range(rounds):
            exchange.begin_step(task.shift)
            out = model(feats, exchange)
        correct += int((out.argmax(-1) == y[:, None]).sum())
        total += out.shape[0] * out.shape[1]
    return correct, total
