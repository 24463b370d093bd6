"""Edges as a table (``EdgeTable``), the selections of one, and a table as PyG ``Data``: what the store's
queries return, apart from the store that builds them."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class EdgeTable:
    """Edges by internal edge id; ``src``/``dst`` are internal node ids."""

    eid: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    t: np.ndarray
    weight: np.ndarray | None
    deleted_at: np.ndarray

    def __len__(self) -> int:
        return len(self.eid)

    def subset(self, ok: np.ndarray) -> EdgeTable:
        """The rows where ``ok`` holds."""
        weight = None if self.weight is None else self.weight[ok]
        return EdgeTable(self.eid[ok], self.src[ok], self.dst[ok], self.t[ok], weight, self.deleted_at[ok])


def live(deleted_at: np.ndarray, t: float) -> np.ndarray:
    """Not deleted at ``t``; a never-deleted edge (inf) stays live even for ``t = inf`` ("now")."""
    return (deleted_at > t) | np.isposinf(deleted_at)


def to_pyg(store, table: EdgeTable, t: float | None = None):
    """A PyG ``Data`` of ``table`` over all of ``store``'s current nodes; node features are those in force
    at ``t`` (default: now)."""
    from torch_geometric.data import Data

    data = Data(
        edge_index=torch.from_numpy(np.stack([table.src, table.dst])),
        edge_time=torch.from_numpy(table.t),
        edge_id=torch.from_numpy(table.eid),
        num_nodes=store.num_nodes,
    )
    if table.weight is not None:
        data.edge_weight = torch.from_numpy(table.weight)
    if store.edge_feat is not None:
        data.edge_attr = torch.from_numpy(store.edge_feat[table.eid])
    if store.node_feat is not None:
        at = math.inf if t is None else t
        data.x = torch.from_numpy(store.node_features_internal(np.arange(store.num_nodes), at))
    return data
