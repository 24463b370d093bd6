"""DyGFormer's access over shards (``train.dygformer_model.NeighborReader``): sequences from the owners.

The DyGFormer-style model keeps no state of the stream: a query's input is its vertex's latest neighbors,
read from the store. Sharded, the owner of a vertex holds its complete adjacency (an edge is stored by the
owners of both endpoints), so:

- exact: each query goes to its vertex's owner, which samples it there (``RoutedSampler``: two
  ``all_to_all`` exchanges per batch, queries out and neighbors back, in global ids with edge times and
  features). With "recent" sampling every sequence, hence every score, loss and gradient, is what one process
  computes; the model's ``train`` averages the gradients. Serving reads only owned vertices: no exchange.
- communication-free: every query is read from this rank's shard (``LocalSampler``). A source is owned by
  the rank that scores its event, so its sequence is whole; any other vertex's holds only its edges with this
  rank's vertices (a vertex the shard never saw has none). No exchange at all.

Node ids in the sequences are global ids: the model compares them (co-occurrence) and never embeds them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..sampling import SampledSubgraph, SamplerConfig
from ..store import TemporalGraphStore
from .sampling import LocalSampler, RoutedSampler


def shard_neighbors(trainer) -> Callable[[SamplerConfig], ShardNeighbors]:
    """The function ``DyGFormerLinkModel(neighbors=...)`` takes to read from ``trainer``'s shards."""
    return lambda sampling: ShardNeighbors(trainer, sampling)


class ShardNeighbors:
    """Sequences from the owners (exact) or this rank's shard (communication-free); see the module."""

    def __init__(self, trainer, sampling: SamplerConfig) -> None:
        self.tr, self.sampling = trainer, sampling
        self.sampler: RoutedSampler | LocalSampler | None = None  # over the shard: set by ``attach``

    def attach(self, store: TemporalGraphStore) -> None:
        tr = self.tr
        edge_dim = tr.config.model.edge_feature_dim
        if tr.exact:
            self.sampler = RoutedSampler(store, tr.index, tr.exchange, self.sampling, edge_dim)
        else:
            self.sampler = LocalSampler(store, self.sampling, edge_dim)

    def sample(
        self, roots: np.ndarray, times: np.ndarray, key: int, serving: bool = False
    ) -> SampledSubgraph:
        """A collective in exact mode unless ``serving`` (every rank serves its own vertices)."""
        (sub,) = self.sampler.sample_sets([(roots, times)], key, roots_local=serving)
        return sub
