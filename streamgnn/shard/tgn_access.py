"""TGN's access over shards (``train.tgn_access``): the owner of a vertex embeds it and keeps its memory.

``ShardedTrainer`` builds the online trainer's ``TGNLinkModel`` with these in place of the one-process
ones, so scoring, the loss and the update are the model's own and the sharded trainer never touches TGN:

- ``ShardEmbeddings``: a batch's query sets go to the owners of their vertices (``compute.Embedder``), which
  sample over their complete adjacency (exact: deeper hops routed to their owners, ``RoutedSampler``;
  communication-free: from the shard, ``LocalSampler``) and embed over a gathered working set of memory
  rows; the rows come back before the batch is ingested. With random negatives in exact mode every rank
  works out every rank's queries (the batch and the negative pool are the same everywhere), so an owner
  knows what it will be asked without asking. Training rows arrive as leaves whose gradients ``finish``
  hands back to the owners.
- ``ShardMemory``: ``observe`` has each owner flush the pending messages of the batch's endpoints it owns
  (over the batch's working set when it was embedded) and queue their new messages.
- pair features: ``pairs.ShardPairs`` (the source's side from its shard, the destination's from its owner).
- the rows themselves: ``tgn_state.TGNShardState`` (owned rows, halo, the embedder and its row cache), the
  ``state.RankState`` the trainer calls as the shard changes, made here with the access.

TGN's own limits when sharded are checked here too: no node features yet, and a variant with memory.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ..errors import ConfigError
from ..nn import TGN
from ..sampling import SamplerConfig
from ..store import TemporalGraphStore
from ..train.protocol import StepInput
from ..train.tgn_access import SERVE, QuerySet, TGNAccess
from .compute import Embedder, Queries
from .memory import lend_state
from .pairs import ShardPairs
from .sampling import LocalSampler, RoutedSampler
from .tgn_state import TGNShardState


def shard_access(trainer) -> Callable:
    """The function ``TGNLinkModel(access=...)`` takes to run on ``trainer``'s shards. It makes the
    model's memory over the shards (``tgn_state.TGNShardState``) and hands it to ``trainer.states``."""

    def make(model) -> TGNAccess:
        mcfg = model.config.model
        if mcfg.node_feature_dim:
            raise ConfigError("sharded training does not yet gather node features: set node_feature_dim=0")
        if not mcfg.uses_memory:
            raise ConfigError("sharded training shards TGN memory: the tgat variant (no memory) needs none")
        if mcfg.pair_features and mcfg.pair_walks and mcfg.walk_neighbors:
            raise ConfigError(
                "sharded training does not yet read the neighbors' relative walk products: set "
                "model.walk_neighbors=0 under train.sharding"
            )
        if mcfg.pair_features and mcfg.pair_walks and mcfg.walk_clock != "events":
            raise ConfigError(
                "sharded training does not yet decay walks by stream time: set model.walk_clock=events "
                "under train.sharding"
            )
        if mcfg.pair_features and mcfg.pair_recency:
            raise ConfigError(
                "sharded training does not yet read recency ranks: set model.pair_recency=0 under "
                "train.sharding"
            )
        state = TGNShardState(trainer, model.model)
        trainer.states.append(state)
        pairs = None
        if mcfg.pair_features:
            exchange = trainer.exchange if trainer.exact else None
            pairs = ShardPairs(trainer.store, mcfg, trainer.index, exchange)
        embeddings = ShardEmbeddings(trainer, state.embedder, model.sampling)
        return TGNAccess(embeddings, ShardMemory(trainer, state, model.model), pairs)

    return make


class ShardEmbeddings:
    """Owner-computed embeddings (module docstring); each call is a collective."""

    def __init__(self, trainer, embedder: Embedder, sampling: SamplerConfig) -> None:
        self.tr, self.embedder, self.sampling = trainer, embedder, sampling

    def attach(self, store: TemporalGraphStore) -> None:
        tr = self.tr
        edge_dim = tr.config.model.edge_feature_dim
        if tr.exact:
            self.embedder.sampler = RoutedSampler(store, tr.index, tr.exchange, self.sampling, edge_dim)
        else:
            self.embedder.sampler = LocalSampler(store, self.sampling, edge_dim)

    def prepare(self, batch: StepInput, sets: list[QuerySet]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        tr = self.tr
        if not sets:
            return []
        cfg, me = tr.config, tr.dist.rank
        # every rank drew the negatives of the whole batch (a draw is keyed by its row). Random ones come
        # from the replicated pool, so every rank can work out every rank's queries; historical ones need
        # the sources' history, which only their owners hold (communication-free: all local anyway)
        replicated = cfg.eval_strategy == cfg.train_negatives == "random"
        ranks = range(tr.dist.world_size) if tr.exact and replicated else [me]
        plans = {r: [Queries.of(*q.layout(np.flatnonzero(batch.scorer == r))) for q in sets] for r in ranks}
        z = self.embedder.embed(plans, [q.grad for q in sets], 3 * batch.step)
        return [(zi, torch.from_numpy(q.rows).to(tr.device)) for zi, q in zip(z, plans[me], strict=True)]

    def forward(self, prepared: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return prepared  # computed by the owners in ``prepare``

    def finish(self) -> None:
        self.embedder.backward()

    def embed(self, nodes: np.ndarray, t: float, blank: int, step: int) -> torch.Tensor:
        """Rows of ``nodes`` (global ids, each embedded by its owner; -1: the zero row) at ``t``."""
        queries = Queries.of(nodes, np.full(len(nodes), t))
        z = self.embedder.embed_apart(queries, 3 * step + SERVE)
        return z[torch.from_numpy(queries.rows)]


class ShardMemory:
    """Owners commit their vertices' memory (module docstring)."""

    def __init__(self, trainer, state: TGNShardState, module: TGN) -> None:
        self.tr, self.state, self.module = trainer, state, module

    def nbytes(self) -> dict[str, int]:
        return self.state.nbytes()

    @torch.no_grad()
    def observe(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, feat: np.ndarray | None) -> None:
        """Owners commit the pending messages of the batch's owned endpoints, then queue the new ones."""
        tr, owned, embedder = self.tr, self.state.owned, self.state.embedder
        ends = np.unique(np.concatenate([src, dst]))
        ends = ends[tr.index.owned(ends)]
        ws, embedder.last_working_set = embedder.last_working_set, None
        if ws is not None:  # the batch was embedded: its owned endpoints that have a state are among the rows
            ends = ends[np.isin(ends, ws.gids)]  # (the rest are new: no row, no pending message yet)
        else:  # a collective, entered by every rank alike (the same condition everywhere), even with no rows
            ws = embedder.gather(ends, owned=True)
        if len(ends):
            ids = torch.from_numpy(ws.ids(ends)).to(tr.device)
            with lend_state(self.module.memory, ws.state) as mem:
                mem.flush(ids)
            memory, last = ws.state["memory"][ids], ws.state["last_update"][ids]
            owned.commit(ends, memory.cpu().numpy(), last.cpu().numpy())
        if not len(src):
            return
        n = len(src)
        node = np.stack([src, dst], 1).reshape(-1)  # (src side, dst side) per event: arrival order
        other = np.stack([dst, src], 1).reshape(-1)
        side = np.tile([True, False], n)
        keep = tr.index.owned(node)
        f = None if feat is None else np.repeat(feat, 2, 0)[keep]
        owned.append_messages(node[keep], other[keep], np.repeat(t, 2)[keep], f, side[keep])
