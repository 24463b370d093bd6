"""What the embedding needs, as plain tensors: the model never talks to the store or the sampler.

Neighborhoods are dense trees: level 0 are the query nodes, level ``l + 1`` is ``hops[l].nbr`` flattened
(row-major), so a level-``l`` node's neighbors are one row of ``hops[l]``. Padding slots (``mask`` False)
hold node 0 and are ignored by attention: a tree with fan-out ``k`` costs ``n * k**L`` slots, no Python loops.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..sampling.types import SampledSubgraph


@dataclass(frozen=True)
class NeighborHop:
    """Dense neighbors of one level's ``n`` nodes, most recent right-aligned (as ``SampledHop.to_dense``)."""

    nbr: Tensor  # int64 [n, k] internal node ids
    dt: Tensor  # float32 [n, k] query time of the row's node minus edge time (>= 0)
    mask: Tensor  # bool [n, k] True where a neighbor exists
    edge_feat: Tensor | None = None  # float32 [n, k, d_e]
    node_feat: Tensor | None = None  # float32 [n, k, d_n], features of nbr at the edge time
    t: Tensor | None = None  # float64 [n, k] edge times (exact; ``dt`` is float32)

    def to(self, device: torch.device | str) -> NeighborHop:
        parts = (self.nbr, self.dt, self.mask, self.edge_feat, self.node_feat, self.t)
        return NeighborHop(*(None if x is None else x.to(device) for x in parts))


@dataclass(frozen=True)
class EmbeddingInput:
    """Query nodes at query times plus their sampled temporal neighborhood, one ``NeighborHop`` per layer."""

    nodes: Tensor  # int64 [n] internal node ids
    t: Tensor  # float64 [n] query times
    node_feat: Tensor | None = None  # float32 [n, d_n] features of the query nodes
    hops: list[NeighborHop] = field(default_factory=list)

    def to(self, device: torch.device | str) -> EmbeddingInput:
        return replace(
            self,
            nodes=self.nodes.to(device),
            t=self.t.to(device),
            node_feat=None if self.node_feat is None else self.node_feat.to(device),
            hops=[hop.to(device) for hop in self.hops],
        )

    @classmethod
    def from_subgraph(
        cls,
        sub: SampledSubgraph,
        num_neighbors: int,
        node_feat: np.ndarray | None = None,
        num_layers: int | None = None,
    ) -> EmbeddingInput:
        """Dense trees from a sampler's flat per-hop arrays.

        ``sub.hops[h]`` must query ``sub.hops[h - 1].nbr`` in order. A root with more than ``num_neighbors``
        sampled neighbors keeps its most recent ones (the same rule as ``SampledHop.to_dense``); neighbors of
        dropped entries are dropped too. ``node_feat`` are the roots' own features, if the model uses any.
        """
        if num_neighbors < 1:
            raise ConfigError(f"num_neighbors must be >= 1, got {num_neighbors}")
        k = num_neighbors
        layers = len(sub.hops) if num_layers is None else num_layers
        if layers > len(sub.hops):
            raise ConfigError(f"{layers} layers need {layers} sampled hops, the subgraph has {len(sub.hops)}")
        n_level = len(sub.roots)
        parent_pos = np.arange(n_level)  # slot of each hop query in its level's dense tree, -1 if dropped
        hops = []
        for h, hop in enumerate(sub.hops[:layers]):
            if hop.num_roots != len(parent_pos):
                raise ConfigError(f"subgraph hop {h} has {hop.num_roots} queries, expected {len(parent_pos)}")
            counts = np.diff(hop.ptr)
            col = k - counts[hop.root_index] + (np.arange(len(hop)) - hop.ptr[hop.root_index])
            parent = parent_pos[hop.root_index]
            kept = (col >= 0) & (parent >= 0)
            slot = np.where(kept, parent * k + col, -1)
            at = slot[kept]
            nbr = np.zeros(n_level * k, np.int64)
            nbr[at] = hop.nbr[kept]
            dt = np.zeros(n_level * k, np.float32)
            dt[at] = hop.dt[kept]
            edge_t = np.zeros(n_level * k, np.float64)
            edge_t[at] = hop.t[kept]
            mask = np.zeros(n_level * k, bool)
            mask[at] = True
            hops.append(
                NeighborHop(
                    nbr=torch.from_numpy(nbr.reshape(n_level, k)),
                    dt=torch.from_numpy(dt.reshape(n_level, k)),
                    mask=torch.from_numpy(mask.reshape(n_level, k)),
                    edge_feat=_dense_rows(hop.edge_features, kept, at, n_level, k),
                    node_feat=_dense_rows(hop.node_features, kept, at, n_level, k),
                    t=torch.from_numpy(edge_t.reshape(n_level, k)),
                )
            )
            parent_pos, n_level = slot, n_level * k
        return cls(
            nodes=torch.from_numpy(np.asarray(sub.roots, np.int64)),
            t=torch.from_numpy(np.asarray(sub.root_t, np.float64)),
            node_feat=None if node_feat is None else torch.from_numpy(np.asarray(node_feat, np.float32)),
            hops=hops,
        )


def _dense_rows(values: np.ndarray | None, kept: np.ndarray, at: np.ndarray, n: int, k: int) -> Tensor | None:
    if values is None:
        return None
    out = np.zeros((n * k, values.shape[1]), np.float32)
    out[at] = values[kept]
    return torch.from_numpy(out.reshape(n, k, values.shape[1]))  # (n may be 0: no -1 to infer)
