"""Polynomial graph filters and graph neural networks built from them, executable by agents.

A graph filter with ``K`` taps maps node features ``x [B, N, F]`` to ``y = sum_k z_k H_k + b`` where ``z_0 =
x`` and ``z_k = S_k z_{k-1}``: each shift is one communication round handed to an ``Exchange``, so ``S_k`` is
whatever that round delivered. Trained with a ``LocalExchange`` under ``Bernoulli(1 - p)`` failures, every
shift sees a fresh random subgraph (random edge sampling: a stochastic GNN); evaluated with a plain
``LocalExchange`` it is the ordinary filter; run by agents over MPI it is the same computation row by row.
Shift operators may change every step (``exchange.begin_step(S_t)``): filters never hold a graph.

Node-local maps (``z_k H_k``) run as multiply-adds in a fixed feature order when ``exchange.exact`` (the
default; a matrix product's summation order may change with the number of rows): an agent computing its own
row then gets the bits the centralized model gets. Training uses the fast matrix product (``exact=False``).
Weights may carry a leading node dimension (``[n, K, F, G]``): each agent its own copy, as decentralized
training needs (``torch.func.functional_call``).

>>> import numpy as np, torch
>>> from streamgnn.filters.exchange import LocalExchange
>>> from streamgnn.filters.shift import ShiftOperator
>>> S = ShiftOperator.from_adjacency(np.ones((5, 5)) - np.eye(5))
>>> model = GraphNN(GraphNNConfig(features=(1, 8, 3), taps=3))
>>> ex = LocalExchange()
>>> ex.begin_step(S)
>>> model(torch.randn(4, 5, 1), ex).shape  # 4 signals, 5 nodes, 3 outputs per node
torch.Size([4, 5, 3])
"""

from __future__ import annotations

import copy
import math
import pickle
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor, nn

from .. import checkpoint
from ..configs import Config, from_record, stamp
from ..errors import CheckpointError, ConfigError
from .exchange import Exchange
from .robust import Aggregation

KIND = "graph-nn"  # what its checkpoints are, in the container's manifest


def local_linear(z: Tensor, weight: Tensor, exact: bool = True) -> Tensor:
    """``z [B, n, F]`` times ``weight [F, G]`` (or ``[n, F, G]``, one per row). ``exact``: multiply-adds in
    a fixed feature order, the same bits whatever the number of rows (10-50x slower than a matrix product,
    whose summation order may change with the shape: fine for training, not for checking agents)."""
    if not exact:
        if weight.dim() == 2:
            return z @ weight
        return torch.einsum("bnf,nfg->bng", z, weight)
    zs, ws = z.unbind(-1), weight.unbind(-2)
    out = zs[0].unsqueeze(-1) * ws[0]
    for zf, wf in zip(zs[1:], ws[1:], strict=True):
        out = out + zf.unsqueeze(-1) * wf
    return out


class GraphFilter(nn.Module):
    """``K``-tap graph convolution ``sum_k (S_k ... S_1 x) H_k + b`` (``H_k`` is ``F x G``)."""

    def __init__(self, in_features: int, out_features: int, taps: int, bias: bool = True):
        super().__init__()
        if min(in_features, out_features, taps) < 1:
            raise ConfigError(f"GraphFilter needs positive sizes, got {in_features}, {out_features}, {taps}")
        self.taps = taps
        bound = 1.0 / math.sqrt(in_features * taps)
        self.weight = nn.Parameter(torch.empty(taps, in_features, out_features).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None

    def forward(self, x: Tensor, exchange: Exchange, aggregation: Aggregation) -> Tensor:
        w = self.weight
        z = x
        out = local_linear(z, w[..., 0, :, :], exchange.exact)
        for k in range(1, self.taps):
            z = aggregation(z, exchange.receive(z))
            out = out + local_linear(z, w[..., k, :, :], exchange.exact)
        if self.bias is not None:
            out = out + self.bias
        return out


@dataclass(frozen=True)
class GraphNNConfig(Config):
    """Feature sizes ``(in, hidden..., out)``, taps per layer, and the aggregation used in every shift."""

    features: tuple[int, ...]
    taps: int = 3
    aggregation: Aggregation = field(default_factory=Aggregation)
    bias: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "features", tuple(int(f) for f in self.features))
        if len(self.features) < 2 or min(self.features) < 1:
            raise ConfigError(f"GraphNNConfig.features needs (in, ..., out) >= 1, got {self.features}")
        if self.taps < 1:
            raise ConfigError(f"GraphNNConfig.taps must be >= 1, got {self.taps}")
        if isinstance(self.aggregation, dict):
            object.__setattr__(self, "aggregation", Aggregation.from_dict(self.aggregation))


class GraphNN(nn.Module):
    """Graph filters with ReLU between them; the last layer's output is each node's own readout (logits,
    actions), so the whole network runs with neighbor messages only: ``(layers) * (taps - 1)`` rounds."""

    def __init__(self, config: GraphNNConfig):
        super().__init__()
        self.config = config
        f = config.features
        self.layers = nn.ModuleList(
            GraphFilter(f[i], f[i + 1], config.taps, config.bias) for i in range(len(f) - 1)
        )

    @property
    def aggregation(self) -> Aggregation:
        return self.config.aggregation

    def forward(self, x: Tensor, exchange: Exchange) -> Tensor:
        if x.shape[-1] != self.config.features[0]:
            raise ConfigError(f"GraphNN expects {self.config.features[0]} input features, got {x.shape[-1]}")
        for i, layer in enumerate(self.layers):
            x = layer(x, exchange, self.aggregation)
            if i < len(self.layers) - 1:
                x = torch.relu(x)
        return x

    def with_aggregation(self, aggregation: Aggregation) -> GraphNN:
        """The same weights (shared, not copied) executed with another aggregation."""
        other = copy.copy(self)
        other.config = GraphNNConfig(self.config.features, self.config.taps, aggregation, self.config.bias)
        return other

    def save(self, path: str | Path) -> Path:
        """Checkpoint the network (config and weights) as a ``streamgnn.checkpoint`` container at ``path``."""
        arrays = {"state": checkpoint.tensor_blob(self.state_dict())}
        return checkpoint.save(Path(path), KIND, arrays, {"config": stamp(self.config.to_dict())}, keep=1)

    @classmethod
    def load(cls, path: str | Path) -> GraphNN:
        """The network ``save`` wrote at ``path`` (or, a file, the bare ``torch.save`` of older versions)."""
        path = Path(path)
        try:
            if path.is_dir():
                ckpt = checkpoint.load(path, KIND)
                config, state = ckpt.manifest["config"], checkpoint.tensors(ckpt.arrays["state"], ckpt.path)
            else:
                blob = torch.load(path, weights_only=True)
                config, state = blob["config"], blob["state"]
            model = cls(from_record(GraphNNConfig, config, f"{path}: config", "graph_nn"))
            model.load_state_dict(state)
        except ConfigError:  # its config: a newer version, or a value this one refuses (named, one line)
            raise
        except (OSError, KeyError, RuntimeError, TypeError, ValueError, pickle.UnpicklingError) as exc:
            raise CheckpointError(f"{path}: not a GraphNN checkpoint ({exc})") from exc
        return model
