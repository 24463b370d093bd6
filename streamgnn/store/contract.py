"""The typed contract between readers (samplers, trainers) and a temporal graph store.

As PyG splits a graph into a ``GraphStore`` (edges) and a ``FeatureStore`` (tensors) so that one loader
runs over any storage (``torch_geometric.sampler.base``), readers here see a store only through the two
protocols below: the adjacency as flat arrays a Numba kernel reads (``GraphStore.view``) and the feature
arrays plus point-in-time node features (``FeatureStore``). ``TemporalGraphStore`` implements both for a
whole graph; a rank's shard (``streamgnn.shard``) is the same kind of store over the vertices it owns,
so ``TemporalSampler`` and the trainers run unchanged on either.

A view is a set of references, not a copy: it stays valid until the store's next mutation (an ingest),
and a store hands out the same view object until then, so taking one costs an attribute read.

>>> import numpy as np
>>> from streamgnn import EventBatch
>>> from streamgnn.store import GraphStore, TemporalGraphStore
>>> store = TemporalGraphStore()
>>> _ = store.ingest(EventBatch.from_columns(src=[1, 2], dst=[2, 3], t=[1.0, 2.0], eid=[0, 1]))
>>> isinstance(store, GraphStore), store.view().num_edges, store.view() is store.view()
(True, 2, True)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True, slots=True)
class TCSRView:
    """The adjacency as flat arrays (see ``store.kernels``): node ``v``'s time-ordered incident rows are
    ``pool[start[v] : start[v] + deg[v]]``, each ``(neighbor, code)`` with ``code = e`` for an out-edge and
    ``~e`` for an in-edge; ``edge_t[e]`` its time, ``edge_del[e]`` its deletion time (empty: no deletes).
    ``watermark`` is at least every stored edge time. ``kernel_args`` is the tuple the sampling kernels
    take, built once per view."""

    start: np.ndarray
    deg: np.ndarray
    pool: np.ndarray
    edge_t: np.ndarray
    edge_del: np.ndarray
    num_nodes: int
    num_edges: int
    watermark: float = np.inf
    kernel_args: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        graph = (self.start, self.deg, self.pool, self.edge_t, self.edge_del, self.num_nodes, self.watermark)
        object.__setattr__(self, "kernel_args", graph)


@dataclass(frozen=True, slots=True)
class FeatureView:
    """Feature arrays: ``edge_feat[e]`` per internal edge id (None: the stream has none); node feature
    versions as a second block structure, node ``v``'s updates ``upool[ustart[v] : ustart[v] + udeg[v]]``
    in time order, each row's code an index into ``upd_t`` and ``node_feat``."""

    edge_feat: np.ndarray | None
    ustart: np.ndarray
    udeg: np.ndarray
    upool: np.ndarray
    upd_t: np.ndarray
    node_feat: np.ndarray | None


@runtime_checkable
class GraphStore(Protocol):
    """What a sampler reads of the graph: internal ids ``0..num_nodes-1``, one view of the adjacency."""

    @property
    def num_nodes(self) -> int: ...

    def view(self) -> TCSRView: ...


@runtime_checkable
class FeatureStore(Protocol):
    """What a sampler or trainer reads of features: the arrays, and node features in force at a time."""

    @property
    def edge_feature_dim(self) -> int | None: ...

    @property
    def node_feature_dim(self) -> int | None: ...

    def feature_view(self) -> FeatureView: ...

    def node_features_internal(self, nodes: np.ndarray, t) -> np.ndarray: ...
