"""TPNet (Lu et al., NeurIPS 2024): a link scored from each endpoint's latest neighbors and their walks.

No memory: for a query pair ``(u, v)`` at ``t``, each endpoint ``x`` reads its ``neighbors`` latest
interactions before ``t``. Token ``j`` (neighbor ``w``) is the time since the interaction (``log(1 + dt)``
through DyGLib's ``TimeEncoder``), the edge's features, and ``r(w|u)``, ``r(w|v)``: an MLP of
``log(1 + relu(G))`` where ``G`` is the Gram matrix of ``w``'s walk vectors (hops ``0..walk_hops``,
``sampling.WalkFeatures``) stacked on the anchor's, ``(2 (hops + 1))^2`` values: how many walks join
``w`` to each endpoint, to itself, and each endpoint to itself. The tokens are projected to ``width``, go
through TPNet's MLP-Mixer layers (``TokenMixer``) and are averaged: ``x``'s encoding, which depends on the
other endpoint (pair-conditioned, as DyGFormer's), so ranking ``q`` candidates costs ``q`` passes.
DyGLib's merge layer scores ``[enc_u, enc_v]``.

One departure, a choice: empty neighbor slots (a node with fewer than ``neighbors`` interactions) are
zeroed before the mixer and left out of the mean with ``mask_padding`` (the default). TPNet's code means
to zero them (``masked_fill``) but discards the result, so its padding tokens (neighbor id 0, time 0, the
pad node's random walk vector) take part; ``mask_padding=False`` keeps them, as its code runs.

>>> cfg = TPNetConfig(neighbors=3, time_dim=4, width=6, walk_hops=1, walk_dim=8)
>>> model = TPNet(cfg)
>>> n, k, g = 2, cfg.neighbors, cfg.gram_size
>>> real = torch.ones(n, 2, k, dtype=torch.bool)
>>> pairs = PairTokens(torch.zeros(n, 2, k), real, torch.zeros(n, 2, 2, k, g))
>>> model.score(pairs).shape, model.encode(pairs).shape
(torch.Size([2]), torch.Size([2, 2, 6]))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from ..errors import ConfigError
from .predictor import LinkPredictor
from .relative import TokenMixer
from .time import TimeEncoder


@dataclass(frozen=True)
class TPNetConfig:
    """Model shape; ``TrainConfig(model=TPNetConfig())`` trains it (``model.variant=tpnet``). Defaults are
    TPNet's UCI and US Legis. configs: 20 neighbors, time encoding 100, width 172 (DyGLib's padded feature
    width), 2 mixer layers, dropout 0.1, walks of hops 1..3 in 110 random dimensions (``10 int(log(2E))``
    on UCI) decayed by ``exp(-1e-7)`` per stream time unit (``walk_clock="time"``; "events": per event).
    ``edge_feature_dim``: the events' feature width (0: none). ``mask_padding``: see the module's text.
    ``walk_ties``: the walks also count the events at the query's own time that the store holds (earlier
    batches'), as TPNet's code does (its walk matrices take each batch whole); False: only the events
    strictly before it, as the neighbors. It matters where many events share a time (US Legis.: 12 times)."""

    neighbors: int = 20
    time_dim: int = 100
    width: int = 172
    mixer_layers: int = 2
    dropout: float = 0.1
    walk_hops: int = 3
    walk_dim: int = 110
    walk_decay: float = 1e-7
    walk_clock: Literal["time", "events"] = "time"
    edge_feature_dim: int = 0
    mask_padding: bool = True
    walk_ties: bool = False
    variant: Literal["tpnet"] = "tpnet"

    def __post_init__(self) -> None:
        if self.variant != "tpnet":
            raise ConfigError(f"TPNetConfig.variant must be 'tpnet', got {self.variant!r}")
        for name in ("neighbors", "time_dim", "width", "mixer_layers", "walk_hops", "walk_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"TPNetConfig.{name} must be an int >= 1, got {value!r}")
        e = self.edge_feature_dim
        if isinstance(e, bool) or not isinstance(e, int) or e < 0:
            raise ConfigError(f"TPNetConfig.edge_feature_dim must be an int >= 0, got {e!r}")
        if (
            isinstance(self.dropout, bool)
            or not isinstance(self.dropout, int | float)
            or not 0 <= self.dropout < 1
        ):
            raise ConfigError(f"TPNetConfig.dropout must be a number in [0, 1), got {self.dropout!r}")
        d = self.walk_decay
        if isinstance(d, bool) or not isinstance(d, int | float) or not 0 <= d < float("inf"):
            raise ConfigError(f"TPNetConfig.walk_decay must be a finite number >= 0, got {d!r}")
        if self.walk_clock not in ("time", "events"):
            raise ConfigError(f"TPNetConfig.walk_clock must be 'time' or 'events', got {self.walk_clock!r}")
        for name in ("mask_padding", "walk_ties"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"TPNetConfig.{name} must be a bool, got {getattr(self, name)!r}")

    @property
    def gram_size(self) -> int:
        """Values of one neighbor's Gram matrix with one anchor: ``(2 (walk_hops + 1))^2``."""
        return (2 * (self.walk_hops + 1)) ** 2


@dataclass(frozen=True)
class PairTokens:
    """``n`` query pairs' tokens, side 0 the source's neighbors, side 1 the destination's (most recent
    last): time since each interaction, which slots hold a neighbor, the Gram matrices of each neighbor
    with anchor 0 (the source) and anchor 1 (the destination), flat, and the edge features (None: none)."""

    dt: Tensor  # float32 [n, 2, k]
    mask: Tensor  # bool [n, 2, k]
    gram: Tensor  # float32 [n, 2 (side), 2 (anchor), k, gram_size]
    edge_feat: Tensor | None = None  # float32 [n, 2, k, d_e]

    def __len__(self) -> int:
        return len(self.dt)

    def take(self, rows: Tensor | slice) -> PairTokens:
        parts = (self.dt, self.mask, self.gram, self.edge_feat)
        return PairTokens(*(None if x is None else x[rows] for x in parts))

    def to(self, device: torch.device | str) -> PairTokens:
        parts = (self.dt, self.mask, self.gram, self.edge_feat)
        return PairTokens(*(None if x is None else x.to(device) for x in parts))


class TPNet(nn.Module):
    """The encoder and link predictor; the caller gathers ``PairTokens`` (the model never sees the store)."""

    def __init__(self, config: TPNetConfig) -> None:
        super().__init__()
        self.config = config
        g, w = config.gram_size, config.width
        self.time = TimeEncoder(config.time_dim, init="geometric")  # DyGLib's
        self.relative = nn.Sequential(nn.Linear(g, 4 * g), nn.ReLU(), nn.Linear(4 * g, g))
        tokens_in = config.time_dim + config.edge_feature_dim + 2 * g
        self.project = nn.Sequential(nn.Linear(tokens_in, 2 * w), nn.ReLU(), nn.Linear(2 * w, w))
        self.mixers = nn.ModuleList(
            TokenMixer(config.neighbors, w, config.dropout) for _ in range(config.mixer_layers)
        )
        self.predictor = LinkPredictor(w)  # DyGLib's MergeLayer: Linear(2w, w), ReLU, Linear(w, 1)
        self.out_dim = w

    def score(self, pairs: PairTokens) -> Tensor:
        """Logits ``[n]`` of the pairs (source first)."""
        enc = self.encode(pairs)
        return self.predictor(enc[:, 0], enc[:, 1])

    def encode(self, pairs: PairTokens) -> Tensor:
        """``[n, 2, width]``: the source's then the destination's encoding, each read against the pair."""
        n, _, k = pairs.dt.shape
        rel = self.relative(torch.log1p(pairs.gram.clamp_min(0)))  # [n, 2, 2, k, g]
        parts = [self.time(torch.log1p(pairs.dt.clamp_min(0))), rel.transpose(2, 3).reshape(n, 2, k, -1)]
        if self.config.edge_feature_dim:
            parts.insert(1, pairs.edge_feat)
        x = self.project(torch.cat(parts, -1)).reshape(2 * n, k, -1)
        real = pairs.mask.reshape(2 * n, k, 1).to(x.dtype)
        if self.config.mask_padding:
            x = x * real
        for mixer in self.mixers:
            x = mixer(x)
        # the mean over the real tokens (a node with none: zeros), or over every slot as TPNet's code
        x = (x * real).sum(1) / real.sum(1).clamp_min(1.0) if self.config.mask_padding else x.mean(1)
        return x.reshape(n, 2, -1)
