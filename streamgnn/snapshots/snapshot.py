"""Snapshot: one discrete-time view of the store as flat arrays, and the one function that emits it.

Both the incremental builder and the from-scratch ``snapshot_at`` end in ``emit``: they differ only in how
they find the live ``(src, dst)`` pairs and their aggregates, so the weight, direction and feature rules
exist once. Node ids are the store's dense internal ids (``store.external_ids`` maps them back).

    >>> import numpy as np
    >>> from streamgnn.snapshots import SnapshotSpec
    >>> s = emit(SnapshotSpec(times=(1.0,), undirected=True), 1.0, 0, np.array([0]), np.array([1]),
    ...          np.array([2]), np.array([2.0]), np.array([0.0]), None, 2)
    >>> s.edge_index.tolist(), s.edge_weight.tolist()
    ([[0, 1], [1, 0]], [1.0, 1.0])
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .spec import SnapshotSpec


@dataclass(frozen=True)
class Snapshot:
    """``edge_index`` int64 [2, E] and ``edge_weight`` float32 [E] over ``num_nodes`` nodes; ``x`` float32
    [num_nodes, F] or None. ``arrived`` (int64 [2, A], from a builder asked for arrivals): the distinct
    pairs with an edge that became due since the previous snapshot, what link prediction predicts. ``y``
    and ``extra`` hold targets once a target is attached (see ``targets``). Treat the arrays as read-only:
    consecutive snapshots may share them (left writable because PyTorch warns about read-only arrays)."""

    t: float
    index: int
    edge_index: np.ndarray
    edge_weight: np.ndarray
    x: np.ndarray | None
    num_nodes: int
    arrived: np.ndarray | None = None
    y: np.ndarray | None = None
    extra: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def num_edges(self) -> int:
        return self.edge_index.shape[1]

    def canonical(self) -> Snapshot:
        """The same snapshot with edges sorted by ``(src, dst)``: equal views compare equal."""
        order = np.lexsort(self.edge_index[::-1])
        return replace(self, edge_index=self.edge_index[:, order], edge_weight=self.edge_weight[order])

    def to_pyg(self):
        """A PyG ``Data`` as PyTorch Geometric Temporal's signals yield it (``edge_attr`` = weights)."""
        import torch
        from torch_geometric.data import Data

        def tensor(a):
            if a is None:
                return None
            return torch.from_numpy(np.array(a, np.int64 if a.dtype.kind in "iu" else np.float32))

        return Data(
            x=tensor(self.x),
            edge_index=tensor(self.edge_index),
            edge_attr=tensor(self.edge_weight),
            y=tensor(self.y),
            num_nodes=self.num_nodes,
            t=self.t,
            **{k: tensor(v) for k, v in self.extra.items()},
        )

    def nbytes(self) -> int:
        arrays = [self.edge_index, self.edge_weight, self.x, self.y, *self.extra.values()]
        return sum(a.nbytes for a in arrays if a is not None)


_ARRAYS = ("edge_index", "edge_weight", "x", "arrived", "y")


def snapshot_state(snap: Snapshot, prefix: str) -> tuple[dict[str, np.ndarray], dict]:
    """A snapshot as named arrays plus JSON values, for checkpoints (``snapshot_from_state`` inverts)."""
    arrays = {f"{prefix}{k}": getattr(snap, k) for k in _ARRAYS if getattr(snap, k) is not None}
    arrays.update({f"{prefix}extra.{k}": v for k, v in snap.extra.items()})
    return arrays, {"t": snap.t, "index": snap.index, "num_nodes": snap.num_nodes}


def snapshot_from_state(arrays: dict[str, np.ndarray], values: dict, prefix: str) -> Snapshot:
    got = {k: np.array(arrays[f"{prefix}{k}"]) if f"{prefix}{k}" in arrays else None for k in _ARRAYS}
    extra = {k[len(prefix) + 6 :]: np.array(v) for k, v in arrays.items() if k.startswith(f"{prefix}extra.")}
    return Snapshot(
        float(values["t"]), int(values["index"]), num_nodes=int(values["num_nodes"]), extra=extra, **got
    )


def emit(
    spec: SnapshotSpec,
    t: float,
    index: int,
    src: np.ndarray,
    dst: np.ndarray,
    count: np.ndarray,
    wsum: np.ndarray,
    decay: np.ndarray,
    x: np.ndarray | None,
    num_nodes: int,
) -> Snapshot:
    """The snapshot of the live pairs ``src -> dst`` (``count`` > 0 each; undirected pairs have
    ``src <= dst`` and are emitted both ways) with their aggregates, and node features ``x``."""
    weight = {"none": None, "count": count, "column": wsum, "decay": decay}[spec.weight]
    weight = np.ones(len(src), np.float32) if weight is None else weight.astype(np.float32)
    if spec.undirected:
        back = src != dst
        src, dst = np.concatenate([src, dst[back]]), np.concatenate([dst, src[back]])
        weight = np.concatenate([weight, weight[back]])
    edge_index = np.stack([src, dst]).astype(np.int64, copy=False) if len(src) else np.zeros((2, 0), np.int64)
    if spec.degree_features:
        deg = np.stack(
            [
                np.bincount(edge_index[0], minlength=num_nodes),
                np.bincount(edge_index[1], minlength=num_nodes),
            ],
            1,
        )
        deg = np.log1p(deg[:num_nodes]).astype(np.float32)
        x = deg if x is None else np.concatenate([x, deg], axis=1)
    return Snapshot(float(t), index, edge_index, weight, x, int(num_nodes))
