"""Graph shift operators as padded neighbor tables: who sends what to whom in one communication round.

A graph filter applies a shift operator ``S`` (adjacency, normalized adjacency, Laplacian...) ``K - 1`` times.
On a team of agents, ``(S x)_i = S_ii x_i + sum_j S_ij x_j`` is one round of messages: node ``i``
receives ``x_j`` from each neighbor ``j`` with ``S_ij != 0``. So the operator is stored the way agents see it:
per node, its in-neighbors in ascending id order (padded to the largest degree ``D`` with -1) and their
weights, plus the diagonal. Sums then run over the same slots in the same order whether one process computes
every node or each agent computes its own row, which is what makes decentralized execution bit-identical to
centralized.

Graphs may differ per *lane* (a leading dimension ``L``): a batch of flocks each with its own communication
graph. ``L == 1`` is one graph shared by every lane. Links are undirected for failures: ``pair_codes`` names
the link ``{i, j}`` so both directions fail together.

>>> import numpy as np
>>> A = np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]], dtype=float)
>>> S = ShiftOperator.from_adjacency(A, normalize="degree")
>>> S.neighbors[0].tolist(), S.weights[0].tolist()
([[1, -1], [0, 2], [1, -1]], [[1.0, 0.0], [0.5, 0.5], [1.0, 0.0]])
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError

Normalization = Literal["none", "max_eig", "degree"]


@dataclass(frozen=True, eq=False)
class ShiftOperator:
    """In-neighbor tables of ``S``: ``neighbors [L, N, D]`` (-1 = padding), ``weights [L, N, D]``,
    ``self_weights [L, N]`` (the diagonal)."""

    neighbors: np.ndarray
    weights: Tensor
    self_weights: Tensor

    def __post_init__(self) -> None:
        nbr = self.neighbors
        if nbr.ndim != 3 or nbr.dtype != np.int64:
            raise ConfigError(f"ShiftOperator.neighbors must be int64 [L, N, D], got {nbr.dtype} {nbr.shape}")
        if tuple(self.weights.shape) != nbr.shape or tuple(self.self_weights.shape) != nbr.shape[:2]:
            raise ConfigError(
                f"ShiftOperator weights {tuple(self.weights.shape)} / self_weights "
                f"{tuple(self.self_weights.shape)} do not match neighbors {nbr.shape}"
            )
        if nbr.size and (nbr.min() < -1 or nbr.max() >= nbr.shape[1]):
            raise ConfigError(f"ShiftOperator.neighbors holds ids outside [-1, {nbr.shape[1]})")

    @property
    def lanes(self) -> int:
        return self.neighbors.shape[0]

    @property
    def num_nodes(self) -> int:
        return self.neighbors.shape[1]

    @property
    def max_degree(self) -> int:
        return self.neighbors.shape[2]

    @cached_property
    def valid(self) -> Tensor:
        """``[L, N, D]`` bool: the slot holds a neighbor."""
        return torch.from_numpy(self.neighbors >= 0)

    @cached_property
    def gather_index(self) -> Tensor:
        """``[L, N, D]`` long: neighbor ids, padding pointing at node 0 (weight 0, value unused)."""
        return torch.from_numpy(np.maximum(self.neighbors, 0))

    @cached_property
    def pair_codes(self) -> np.ndarray:
        """``[L, N, D]`` int64 id of the undirected link ``min(i, j) * N + max(i, j)``; -1 on padding."""
        n = self.num_nodes
        i = np.broadcast_to(np.arange(n)[None, :, None], self.neighbors.shape)
        j = self.neighbors
        return np.where(j >= 0, np.minimum(i, j) * n + np.maximum(i, j), -1)

    @cached_property
    def degree(self) -> np.ndarray:
        """``[L, N]`` number of neighbors."""
        return (self.neighbors >= 0).sum(axis=2)

    @cached_property
    def reverse(self) -> tuple[np.ndarray, np.ndarray]:
        """Out-neighbor tables ``(node, slot)`` each ``[L, N, D_out]``: for sender ``j``, every receiver ``i``
        (ascending) and the slot ``d`` with ``neighbors[i, d] == j``; -1 padding. Backward passes sum the
        gradients a sender gets in this order, wherever the receivers run."""
        lanes, n, d = self.neighbors.shape
        lane, recv, slot = np.nonzero(self.neighbors >= 0)
        send = self.neighbors[lane, recv, slot]
        order = np.lexsort((recv, send, lane))
        lane, recv, slot, send = lane[order], recv[order], slot[order], send[order]
        counts = np.zeros((lanes, n), np.int64)
        np.add.at(counts, (lane, send), 1)
        width = int(counts.max()) if counts.size else 0
        starts = np.zeros(lanes * n + 1, np.int64)
        np.cumsum(counts.ravel(), out=starts[1:])
        pos = np.arange(len(send)) - starts[lane * n + send]
        node = np.full((lanes, n, width), -1, np.int64)
        slots = np.full((lanes, n, width), -1, np.int64)
        node[lane, send, pos] = recv
        slots[lane, send, pos] = slot
        return node, slots

    def to_dense(self) -> Tensor:
        """``[L, N, N]`` dense matrix (tests and small graphs)."""
        lanes, n, _ = self.neighbors.shape
        dense = torch.zeros(lanes, n, n, dtype=self.weights.dtype)
        lane, i, d = np.nonzero(self.neighbors >= 0)
        dense[lane, i, self.neighbors[lane, i, d]] = self.weights[lane, i, d]
        dense[:, np.arange(n), np.arange(n)] += self.self_weights
        return dense

    @classmethod
    def from_dense(cls, matrix: np.ndarray | Tensor, dtype: torch.dtype = torch.float32) -> ShiftOperator:
        """From ``[N, N]`` or ``[L, N, N]``: row ``i`` lists what node ``i`` receives (``S_ij != 0``)."""
        m = torch.as_tensor(matrix).detach().to(torch.float64).cpu().numpy()
        if m.ndim == 2:
            m = m[None]
        if m.ndim != 3 or m.shape[1] != m.shape[2]:
            raise ConfigError(f"a shift operator must be [N, N] or [L, N, N], got {m.shape}")
        if not np.isfinite(m).all():
            raise ConfigError("the shift operator holds NaN or infinite weights")
        lanes, n, _ = m.shape
        diag = m[:, np.arange(n), np.arange(n)].copy()
        off = m.copy()
        off[:, np.arange(n), np.arange(n)] = 0.0
        nz = off != 0
        width = max(int(nz.sum(axis=2).max()) if n else 0, 1)
        # Stable sort puts each row's neighbor columns first, ascending.
        order = np.argsort(~nz, axis=2, kind="stable")[:, :, :width]
        keep = np.take_along_axis(nz, order, axis=2)
        neighbors = np.where(keep, order, -1).astype(np.int64)
        weights = np.where(keep, np.take_along_axis(off, order, axis=2), 0.0)
        return cls(neighbors, torch.from_numpy(weights).to(dtype), torch.from_numpy(diag).to(dtype))

    @classmethod
    def from_adjacency(
        cls, adjacency: np.ndarray | Tensor, normalize: Normalization = "max_eig", dtype=torch.float32
    ) -> ShiftOperator:
        """``A / lambda_max(A)`` (``max_eig``: spectral radius 1, as in the SGNN and alelab experiments),
        ``D^-1 A`` (``degree``: a neighbor mean, computable by each agent alone) or ``A`` (``none``)."""
        a = torch.as_tensor(adjacency).detach().to(torch.float64).cpu().numpy()
        if a.ndim == 2:
            a = a[None]
        if normalize == "max_eig":
            lam = np.abs(np.linalg.eigvals(a)).max(axis=1)
            a = a / np.where(lam > 0, lam, 1.0)[:, None, None]
        elif normalize == "degree":
            deg = np.abs(a).sum(axis=2, keepdims=True)
            a = a / np.where(deg > 0, deg, 1.0)
        elif normalize != "none":
            raise ConfigError(f"normalize must be 'none', 'max_eig' or 'degree', got {normalize!r}")
        return cls.from_dense(a, dtype)
