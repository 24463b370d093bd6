"""TGN's memory over shards (a ``state.RankState``): each rank's owned rows, a halo of others', the embedder.

``shard_access`` makes one per sharded TGN model and hands it to the trainer, which calls its hooks:

- ``add_vertices``: a blank memory row for each vertex this rank now owns (``memory.OwnedMemory``);
- ``ingested``: an edge between an owned vertex and another rank's makes the owned one halo there;
- ``stepped``: communication-free, every ``ShardConfig.staleness`` batches each owner pushes the rows that
  changed to the ranks holding them as halo (``memory.HaloCache``; a collective); exact mode keeps no halo;
- ``state``/``load_state``: the rows under ``owned.*`` (and ``halo.*``), the names checkpoints have always
  used.

The embedder (``compute.Embedder``) works over these rows and keeps the row cache; ``nbytes`` gives the
parts ``memory``, ``halo`` and ``cache`` (the model reports them, ``TGNLinkModel.nbytes``).

>>> from streamgnn.nn import TGNConfig
>>> from streamgnn.shard import ShardConfig, ShardedTrainer
>>> from streamgnn.train import TrainConfig
>>> model = TGNConfig(memory_dim=8, time_dim=8, embedding_dim=8)
>>> trainer = ShardedTrainer(TrainConfig(model=model, sharding=ShardConfig(mode="comm_free")))
>>> (state,) = trainer.states
>>> type(state).__name__, state.parts
('TGNShardState', ('owned', 'halo'))
"""

from __future__ import annotations

import numpy as np

from ..events import EventBatch, EventKind
from ..nn import TGN
from .compute import Embedder
from .memory import HaloCache, OwnedMemory

ADD = int(EventKind.EDGE_ADD)


class TGNShardState:
    """This rank's part of TGN's memory (module docstring); ``trainer`` gives the index and the exchange."""

    def __init__(self, trainer, module: TGN) -> None:
        mcfg = trainer.config.model
        self.index, self.exchange = trainer.index, trainer.exchange
        self.rank, self.staleness = trainer.dist.rank, trainer.shard_config.staleness
        self.owned = OwnedMemory(mcfg.memory_dim, mcfg.edge_feature_dim)
        self.halo = None if trainer.exact else HaloCache(mcfg.memory_dim)  # others' rows, communication-free
        self.embedder = Embedder(trainer, module, self.owned, self.halo)
        self.parts = ("owned",) if self.halo is None else ("owned", "halo")

    def add_vertices(self, gids: np.ndarray) -> None:
        self.owned.add_rows(gids)

    def ingested(self, batch: EventBatch) -> None:
        """Edge additions between an owned and another rank's vertex make the owned one halo there."""
        add = batch.kind == ADD
        src, dst = batch.src[add], batch.dst[add]
        a, b = self.index.owned(src), self.index.owned(dst)
        for owned, other in ((src[a & ~b], dst[a & ~b]), (dst[b & ~a], src[b & ~a])):
            if len(owned):
                self.owned.mark_replicas(owned, self.index.owner(other))

    def stepped(self, steps: int) -> None:
        if self.halo is not None and steps % self.staleness == 0:
            self._sync_halo()

    def _sync_halo(self) -> None:
        """Push the rows that changed since the last sync to the ranks holding them as halo (a collective)."""
        o, parts = self.owned, []
        for r in range(self.exchange.world_size):
            s = o.changed_halo(r) if r != self.rank else np.zeros(0, np.int64)
            parts.append((o.gid[s], o.memory[s], o.last_update[s]))
        for gids, memory, last in self.exchange.all_to_all(parts, "halo_sync"):
            self.halo.update(gids, memory, last)
        o.mark_synced()

    def nbytes(self) -> dict[str, int]:
        return {
            "memory": self.owned.nbytes(),
            "halo": 0 if self.halo is None else self.halo.nbytes(),
            "cache": self.embedder.cache.nbytes(),
        }

    def state(self) -> dict[str, dict[str, np.ndarray]]:
        out = {"owned": self.owned.state()}
        if self.halo is not None:
            out["halo"] = self.halo.state()
        return out

    def load_state(self, state: dict[str, dict[str, np.ndarray]]) -> None:
        self.owned.load_state(state["owned"])
        if self.halo is not None:
            self.halo.load_state(state["halo"])
