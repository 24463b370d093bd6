"""TGN (Rossi et al. 2020) and its JODIE- and TGAT-style ablations, assembled from the parts in this package.

Per batch, test-then-train (the model never sees the store; the caller gathers tensors)::

    inp = EmbeddingInput.from_subgraph(sampler.sample(nodes, t), cfg.num_neighbors)  # events before the batch
    z = model(inp)                                        # memory as of previous batches, pending applied
    loss = bce(model.predictor(z[src_rows], z[dst_rows], pair), labels)  # pair: PairEncoder's (None: off)
    loss.backward(); optimizer.step(); optimizer.zero_grad()
    with torch.no_grad():
        model.observe(src, dst, t, edge_feat)             # only now may the batch reach memory
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import torch
from torch import Tensor, nn

from ..configs import Config
from ..errors import ConfigError
from .attention import TemporalAttentionEmbedding
from .gather import gather_rows
from .inputs import EmbeddingInput, NeighborHop
from .memory import Aggregator, MessageFunction, NodeMemory
from .pairs import PairEncoder
from .predictor import LinkPredictor
from .time import TimeEncoder, TimeInit

Variant = Literal["tgn", "jodie", "tgat"]  # Literal fields: checked by ``Config`` however built
NeighborTime = Literal["query", "last_update"]
WalkClock = Literal["events", "time"]  # ``sampling.walks.CLOCKS``
_DEFAULT_LAYERS = {"tgn": 1, "tgat": 2, "jodie": 0}


@dataclass(frozen=True)
class TGNConfig(Config):
    """Model shape. ``variant``: "tgn" (memory + attention), "jodie" (memory + time projection, no
    neighbors), "tgat" (no memory, attention over node/edge features).

    ``neighbor_time``: the age attention sees for a neighbor edge. "last_update" (tgn's default, PyG's TGN
    example): the neighbor's last memory update minus the edge time, 0 exactly when the edge is the
    neighbor's latest interaction (needs memory). "query" (TGAT/TGN papers): query time minus edge time.
    ``time_init``: how the shared ``TimeEncoder`` starts: "uniform" (tgn's default, PyG's) or "geometric"
    (the papers'). tgn's defaults depart from the paper because they learn better: together, not alone,
    they lift test AP on CollegeMsg from 0.70 to 0.82 (benchmarks/RESULTS.md, "TGN quality" ablation);
    ``neighbor_time="query", time_init="geometric"`` is the paper's model. The tgat and jodie variants keep
    the papers' choices (not measured otherwise).
    ``merge`` is gone (#21): the ablation against PyG's linear skip made no difference (benchmarks/RESULTS.md,
    "Bitcoin OTC's MRR gap, by ablation"), so attention output and root state always meet in TGN's MLP
    merge. Configs written before still load (``configs.STEPS``): ``merge="mlp"`` (what the model does) is
    dropped, ``"linear_skip"`` refused.
    ``pair_features``: the link predictor also reads the pair's features from the store at query time
    (``sampling.PairFeatures``, encoded by ``PairEncoder`` into ``4 * pair_dim`` values, 3 without
    walks): u->v and v->u counts, time since the latest of each, decayed counts with time constants
    ``pair_decays`` (in the stream's time unit; the defaults, an hour, a day and a week, assume seconds),
    and DyGFormer's co-occurrence of both endpoints' latest ``pair_neighbors`` neighbors. Node embeddings
    (what the service serves) do not change. On by default: it beat the TGN alone and both EdgeBanks on
    every stream measured (benchmarks/RESULTS.md, "Pair features and converged training");
    ``pair_features=False`` is TGN as published.
    ``pair_endpoints``: the pair features also hold the time since each endpoint's latest event with anyone.
    A TGN embedding cannot see it (with ``neighbor_time="last_update"`` every age it reads is relative to a
    memory update, never to the query time), and a node quiet for months rarely starts talking now: on
    by default, it lifted test AP on CollegeMsg and on Enron (benchmarks/RESULTS.md, "Endpoint recency").
    ``pair_walks``: the pair features (when on) also hold TPNet's temporal walk encoding
    (``sampling.WalkFeatures``): the Gram matrix of both endpoints' random-projected counts of walks of up
    to ``walk_hops`` events, in ``walk_dim`` dimensions, one channel per decay rate in ``walk_decays`` (per
    event, so independent of the stream's time unit: the defaults weigh a walk down by e after 10,000,
    1,000 and 100 events since its first; 0 keeps plain counts). It sees common neighbors and 2- to 4-step
    paths over the whole history, which the latest ``pair_neighbors`` cannot: on by default, it lifted
    test AP on CollegeMsg above 0.95 on two seeds, and Enron's with it (benchmarks/RESULTS.md, "Temporal
    walk features").
    ``pair_decayed``: the pair features (when on) also hold time-decayed ones (``sampling.DecayPairs``):
    decayed counts per direction, each endpoint's recency, decayed common neighbors and each endpoint's
    share of its recent activity that went to the other, per ``pair_decays`` time constant, and the pair's
    recency in each endpoint's own pace; encoded by ``nn.DecayEncoder`` into one more ``pair_dim``.
    They say how much a pair interacts now, where the counts say whether it ever did (benchmarks/CHANGELOG.md,
    "Closing on TPNet").
    ``walk_neighbors``: with ``pair_walks``, each endpoint's latest ``walk_neighbors`` neighbors (at most
    ``pair_neighbors``; 0: off, the default) also carry their walk products with both endpoints, TPNet's
    relative encoding (``WalkFeatures.relative``), encoded per neighbor with its co-occurrence counts and
    pooled per endpoint into two more ``pair_dim`` (benchmarks/RESULTS.md, "Neighbor-relative walk
    features"). Not read across shards yet: a sharded run refuses it.
    ``walk_clock``: what the walk decays count: ``"events"`` (the default, above) or ``"time"``, TPNet's
    stream-time decay: ``walk_decays`` are then rates per stream time unit and a walk weighs ``exp(-rate *
    sum over its events of (query time - event time))`` (TPNet's default rate, 1e-7, assumes seconds).
    ``walk_mixer``: with ``walk_neighbors``, the neighbors' tokens go through TPNet's MLP-Mixer
    (``nn.relative``) before they are averaged. Both opt-in (benchmarks/RESULTS.md, "Stream-time walk
    decay"): the stream-time decay lost AP on CollegeMsg, and the mixer's small gain comes at
    ``walk_neighbors``' training speed or less; a sharded run refuses ``walk_clock="time"``.
    ``pair_recency``: the pair features (when on) also hold each endpoint's recency rank of the other among
    its distinct partners, up to this rank (0: off, the default; ``sampling.PairFeatures``' ``recency``):
    on TGB's tgbl-wiki most test edges go to one of the source's latest pages, and which one, the time
    since each says only in part (benchmarks/RESULTS.md, "tgbl-wiki: where the MRR is lost"). It gains
    only beside historical training negatives (``TrainConfig.train_negatives``), which contrast a source's
    latest partner with its others; alone, nothing teaches the model to read it. A sharded run refuses it.
    """

    memory_dim: int = 100
    time_dim: int = 100
    embedding_dim: int = 100
    edge_feature_dim: int = 0
    node_feature_dim: int = 0
    num_neighbors: int = 10  # sampled per hop; the dense fan-out k of ``NeighborHop``
    num_layers: int | None = None  # attention hops to sample and embed; None: tgn 1, tgat 2, jodie 0
    num_heads: int = 2
    dropout: float = 0.1
    message: MessageFunction = "identity"
    message_dim: int | None = None  # "mlp" message width; None: memory_dim
    aggregator: Aggregator = "last"
    variant: Variant = "tgn"
    time_scale: float = 1.0  # JODIE divides Δt by this (JODIE standardises Δt; pick a typical gap)
    neighbor_time: NeighborTime | None = None  # None: "last_update" for tgn, "query" for tgat and jodie
    time_init: TimeInit | None = None  # None: "uniform" for tgn, "geometric" for tgat and jodie
    pair_features: bool = True
    pair_neighbors: int = 20
    pair_decays: tuple[float, ...] = (3600.0, 86400.0, 604800.0)
    pair_dim: int = 32
    pair_endpoints: bool = True
    pair_walks: bool = True
    walk_hops: int = 2
    walk_dim: int = 64
    walk_decays: tuple[float, ...] = (1e-4, 1e-3, 1e-2)
    pair_decayed: bool = False
    walk_neighbors: int = 0
    walk_clock: WalkClock = "events"
    walk_mixer: bool = False
    pair_recency: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "pair_decays", tuple(self.pair_decays))  # (lists from JSON)
        object.__setattr__(self, "walk_decays", tuple(self.walk_decays))
        for name in ("pair_neighbors", "pair_dim", "walk_hops", "walk_dim"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ConfigError(f"{name} must be an int >= 1, got {getattr(self, name)!r}")
        if not isinstance(self.walk_neighbors, int) or not 0 <= self.walk_neighbors <= self.pair_neighbors:
            raise ConfigError(
                f"walk_neighbors must be an int in 0..pair_neighbors ({self.pair_neighbors}), "
                f"got {self.walk_neighbors!r}"
            )
        if (
            not isinstance(self.pair_recency, int)
            or isinstance(self.pair_recency, bool)
            or self.pair_recency < 0
        ):
            raise ConfigError(f"pair_recency must be an int >= 0 (0: off), got {self.pair_recency!r}")
        if self.walk_neighbors and not self.pair_walks:
            raise ConfigError("walk_neighbors reads the walk state: it needs pair_walks=True")
        if self.walk_mixer is not False and (self.walk_mixer is not True or not self.walk_neighbors):
            raise ConfigError("walk_mixer (a bool) mixes the neighbors' tokens: it needs walk_neighbors > 0")
        if not all(isinstance(x, int | float) and 0 < x < float("inf") for x in self.pair_decays):
            raise ConfigError(f"pair_decays must be finite time constants > 0, got {list(self.pair_decays)}")
        if not self.walk_decays or not all(
            isinstance(x, int | float) and 0 <= x < float("inf") for x in self.walk_decays
        ):
            raise ConfigError(
                f"walk_decays must be one or more finite rates >= 0, got {list(self.walk_decays)}"
            )
        if self.neighbor_time is None:
            object.__setattr__(self, "neighbor_time", "last_update" if self.variant == "tgn" else "query")
        if self.time_init is None:
            object.__setattr__(self, "time_init", "uniform" if self.variant == "tgn" else "geometric")
        if self.neighbor_time == "last_update" and self.variant == "tgat":
            raise ConfigError("neighbor_time='last_update' reads memory, which tgat has not: use 'query'")
        if self.num_layers is None:
            object.__setattr__(self, "num_layers", _DEFAULT_LAYERS[self.variant])
        if self.variant == "jodie" and self.num_layers:
            raise ConfigError("the jodie variant embeds from memory alone: num_layers must be 0")
        if self.variant == "jodie" and self.node_feature_dim:
            raise ConfigError("the jodie variant embeds from memory alone: node_feature_dim must be 0")
        if self.variant != "jodie" and self.num_layers < 1:
            raise ConfigError(f"the {self.variant} variant needs num_layers >= 1, got {self.num_layers}")
        for name in ("memory_dim", "time_dim", "embedding_dim", "num_neighbors", "num_heads"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.edge_feature_dim < 0 or self.node_feature_dim < 0:
            raise ConfigError("feature dims must be >= 0")
        if self.embedding_dim % self.num_heads:
            raise ConfigError(
                f"embedding_dim {self.embedding_dim} is not divisible by num_heads {self.num_heads}"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.time_scale <= 0:
            raise ConfigError(f"time_scale must be > 0, got {self.time_scale}")

    @property
    def uses_memory(self) -> bool:
        return self.variant != "tgat"


class TGN(nn.Module):
    """Temporal embeddings of query nodes plus a ``LinkPredictor`` head (``predictor``) of width ``out_dim``.

    ``forward`` embeds with state from *previous* batches only; ``observe`` feeds a predicted batch to memory.
    Everything (parameters, memory, pending messages) is in ``state_dict``.
    """

    def __init__(self, config: TGNConfig) -> None:
        super().__init__()
        self.config = config
        self.time_enc = TimeEncoder(config.time_dim, config.time_init)
        self.memory = (
            NodeMemory(
                config.memory_dim,
                config.edge_feature_dim,
                self.time_enc,
                message=config.message,
                message_dim=config.message_dim,
                aggregator=config.aggregator,
            )
            if config.uses_memory
            else None
        )
        if config.variant == "jodie":
            self.time_proj = nn.Linear(1, config.memory_dim)
            nn.init.normal_(self.time_proj.weight)  # JODIE's NormalLinear: N(0, 1/sqrt(fan_in)), fan_in = 1
            nn.init.normal_(self.time_proj.bias)
            self.out_dim = config.memory_dim
        else:
            node_dim = config.node_feature_dim + (config.memory_dim if config.uses_memory else 0)
            self.embedding = TemporalAttentionEmbedding(
                node_dim,
                config.edge_feature_dim,
                self.time_enc,
                config.embedding_dim,
                num_layers=config.num_layers,
                num_heads=config.num_heads,
                dropout=config.dropout,
            )
            self.out_dim = config.embedding_dim
        self.pair_encoder = None
        if config.pair_features:
            self.pair_encoder = PairEncoder.of(config)
        pair_dim = self.pair_encoder.out_dim if self.pair_encoder is not None else 0
        self.predictor = LinkPredictor(self.out_dim, pair_dim=pair_dim)

    def forward(self, inp: EmbeddingInput) -> Tensor:
        """Embeddings ``[len(inp.nodes), out_dim]`` of ``inp.nodes`` at times ``inp.t``.

        ``inp.hops`` must hold at least ``config.num_layers`` hops (only those are used) sampled from events
        strictly before the current batch; node features are read when ``config.node_feature_dim > 0``.
        """
        cfg = self.config
        if len(inp.hops) < cfg.num_layers:
            raise ConfigError(f"the model embeds {cfg.num_layers} hops, the input has {len(inp.hops)}")
        hops = inp.hops[: cfg.num_layers]
        if cfg.variant == "jodie":
            memory, last_update = self.memory.get(inp.nodes)
            dt = (inp.t.to(last_update) - last_update) / cfg.time_scale
            return memory * (1 + self.time_proj(dt.to(memory.dtype).unsqueeze(-1)))
        levels = [inp.nodes, *(hop.nbr.reshape(-1) for hop in hops)]
        parts: list[list[Tensor]] = [[] for _ in levels]
        if self.memory is not None:
            # One memory row (pending messages applied) per distinct node of the whole tree, then gathered.
            uniq, inverse = torch.unique(torch.cat(levels), return_inverse=True)
            memory, last_update = self.memory.get_unique(uniq)
            index = inverse.split([len(x) for x in levels])
            if cfg.neighbor_time == "last_update":
                hops = _ages_from_last_update(hops, inp.t, [last_update[rows] for rows in index[1:]])
            if not cfg.node_feature_dim:
                return self.embedding([memory] * len(levels), hops, list(index))
            for part, rows in zip(parts, index, strict=True):
                part.append(gather_rows(memory, rows))
        if cfg.node_feature_dim:
            feats = [inp.node_feat, *(hop.node_feat for hop in hops)]
            if any(f is None for f in feats):
                raise ConfigError("node_feature_dim > 0 but the input lacks node features for some level")
            for part, feat, nodes in zip(parts, feats, levels, strict=True):
                part.append(feat.reshape(len(nodes), cfg.node_feature_dim))
        states = [
            torch.cat(p, -1) if p else inp.t.new_zeros(len(x), 0, dtype=torch.float32)
            for p, x in zip(parts, levels, strict=True)
        ]
        return self.embedding(states, hops)

    def observe(self, src: Tensor, dst: Tensor, t: Tensor, edge_feat: Tensor | None = None) -> None:
        """Give a predicted batch's interactions to memory (no-op for tgat): ``NodeMemory.store_messages``."""
        if self.memory is not None:
            self.memory.store_messages(src, dst, t, edge_feat)

    def detach(self) -> None:
        """End a truncated-BPTT window: drop autograd history held by memory."""
        if self.memory is not None:
            self.memory.detach()

    def reset_state(self) -> None:
        """Forget the stream (e.g. between epochs over a replayed stream); keeps learned parameters."""
        if self.memory is not None:
            self.memory.reset_state()


def _ages_from_last_update(
    hops: list[NeighborHop], root_t: Tensor, nbr_last: list[Tensor]
) -> list[NeighborHop]:
    """``hops`` with ``dt`` = each neighbor's last update (``nbr_last[l]``, flat per level) minus its edge
    time: ``hop.t`` where the sampler gave it, else the row's query time minus ``dt`` (a neighbor is queried
    at its edge's time on the next level)."""
    out, t_row = [], root_t.to(torch.float64)
    for hop, last in zip(hops, nbr_last, strict=True):
        edge_t = hop.t if hop.t is not None else t_row.unsqueeze(1) - hop.dt.to(torch.float64)
        age = last.view_as(edge_t) - edge_t
        out.append(replace(hop, dt=age.to(hop.dt.dtype)))
        t_row = edge_t.reshape(-1)
    return out
