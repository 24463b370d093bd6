"""Pair encoder: the store's pair features of ``(u, v, t)`` queries as one vector for the link predictor.

Inputs are ``sampling.PairFeatures``' raw arrays. History (counts, time since the latest u->v and v->u
event, decayed counts, and with ``endpoints`` the time since each endpoint's latest event) is log-scaled,
since counts and gaps span orders of magnitude, with a flag for "never", and goes through a small MLP.
Co-occurrence follows DyGFormer (Yu et al. 2023): each count ``c`` of a neighbor (in its own sequence, in the
other endpoint's) is encoded as ``f(c)`` by a two-layer MLP and a neighbor's encoding is ``f(c_own) +
f(c_other)``; we mean-pool those over each endpoint's neighbors (the predictor here reads one vector, not a
sequence). Counts are integers ``0..k``, so ``f`` is evaluated once per value and the pooled encoding is a
histogram of counts times that table: no ``[pairs, k, dim]`` tensor is ever built, which keeps ranking 100
candidates per positive cheap. Walk products (``sampling.WalkFeatures``, with ``walks``), inner products
of random-projected walk counts that span orders of magnitude and may be negative, go in as
``sign(x) log(1 + |x|)`` through a third MLP, as TPNet scales them. Time-decayed pair features
(``sampling.DecayPairs``, with ``decayed``) go through ``DecayEncoder``, after the walk part. The
neighbors' relative walk products (with ``relative``) go through ``RelativeEncoder``, between the two.

>>> import numpy as np
>>> enc = PairEncoder(history_dim=5, neighbors=3, dim=4)
>>> hist = torch.tensor([[2.0, 0.0, 1.0, float("inf"), 0.5]], dtype=torch.float64)
>>> enc(hist, torch.zeros(1, 2, 3, 2)).shape
torch.Size([1, 12])
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..errors import ConfigError
from ..sampling.decay_pairs import DecayPairs
from ..sampling.pair_kernels import HISTORY_FIXED, N_UV, N_VU, SINCE_UV, SINCE_VU
from ..sampling.walks import relative_width
from .decay_pairs import DecayEncoder
from .relative import RelativeEncoder


class PairEncoder(nn.Module):
    """``(history [n, history_dim] float64, cooc [n, 2, neighbors, 2])`` -> ``[n, out_dim]``, ``out_dim =
    3 * dim`` (history, u's neighbors, v's neighbors). ``endpoints``: the history's last two columns are
    the time since each endpoint's latest event with anyone, encoded as the pair's gaps are. ``walks``:
    how many walk products a pair has (0: none); then ``out_dim = 4 * dim``. ``decayed``: how many
    decayed pair features a pair has (0: none), one more ``dim``. ``relative``: the width of a neighbor's
    relative walk products (0: none; needs ``walks``), two more ``dim``. ``forward`` reads the raw parts
    in ``PairFeatures.read``'s order: history, co-occurrence, then walk products, relative products and
    decayed features where on. ``mixer``: the relative encoder mixes its ``mixer`` tokens (0: not)."""

    def __init__(
        self,
        history_dim: int,
        neighbors: int,
        dim: int,
        endpoints: bool = False,
        walks: int = 0,
        decayed: int = 0,
        relative: int = 0,
        mixer: int = 0,
        recency: bool = False,
    ) -> None:
        super().__init__()
        if relative and not walks:
            raise ConfigError(
                "the neighbors' relative walk products come with the pair's: relative needs walks"
            )
        self.neighbors, self.endpoints, self.recency = neighbors, endpoints, recency
        n_in = 2 + 2 + 2 + (history_dim - HISTORY_FIXED)  # log counts, seen flags, log gaps, log decayed
        n_in += 2 * endpoints  # the endpoints' gaps (counted in history_dim) also have seen flags
        n_in += 2 * recency  # the recency ranks (counted in history_dim) also have "within the cap" flags
        self.history = nn.Sequential(nn.Linear(n_in, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.count = nn.Sequential(nn.Linear(1, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.walk = nn.Sequential(nn.Linear(walks, dim), nn.ReLU(), nn.Linear(dim, dim)) if walks else None
        self.decay = DecayEncoder(decayed, dim) if decayed else None
        self.relative = RelativeEncoder(relative, dim, mixer) if relative else None
        self.out_dim = (3 + bool(walks) + bool(decayed) + 2 * bool(relative)) * dim

    @classmethod
    def of(cls, config) -> PairEncoder:
        """The encoder a model config's ``pair_neighbors``, ``pair_decays``, ``pair_dim``,
        ``pair_endpoints`` and walk settings call for (the model builds it, and a scorer that loads its
        weights from a checkpoint)."""
        history_dim = HISTORY_FIXED + len(config.pair_decays) + 2 * config.pair_endpoints
        history_dim += 2 * bool(config.pair_recency)
        walks = len(config.walk_decays) * (2 * config.walk_hops + 2) ** 2 if config.pair_walks else 0
        decayed = DecayPairs.width(config) if config.pair_decayed else 0
        relative = 0
        if config.pair_walks and config.walk_neighbors:
            relative = relative_width(config.walk_hops, len(config.walk_decays))
        return cls(
            history_dim,
            config.pair_neighbors,
            config.pair_dim,
            config.pair_endpoints,
            walks,
            decayed,
            relative,
            config.walk_neighbors if config.walk_mixer else 0,
            bool(config.pair_recency),
        )

    def forward(self, history: Tensor, cooc: Tensor, *extra: Tensor) -> Tensor:
        dev = self.count[0].weight.device
        history = history.to(dev)
        gap_cols = [SINCE_UV, SINCE_VU]
        end = history.shape[1]
        ranks = []
        if self.recency:  # the last two columns: ranks 1.. (inf: beyond the cap or never met), as log(rank)
            end -= 2
            rank = history[:, end:]
            within = torch.isfinite(rank)
            ranks = [within.to(history.dtype), torch.where(within, torch.log(rank.clamp_min(1)), 0.0)]
        if self.endpoints:
            end -= 2
            gap_cols += [end, end + 1]
        since = history[:, gap_cols]
        seen = torch.isfinite(since)
        h = torch.cat(
            [
                torch.log1p(history[:, [N_UV, N_VU]]),
                seen.to(history.dtype),
                torch.where(seen, torch.log1p(since.clamp_min(0)), 0.0),
                torch.log1p(history[:, HISTORY_FIXED:end]),
                *ranks,
            ],
            dim=1,
        ).float()
        k = self.neighbors
        cooc = cooc.to(dev)
        counts = cooc.long().clamp_(0, k)  # [n, 2, k, 2]
        valid = counts[..., 0] > 0  # a real neighbor occurs at least once in its own sequence
        n = len(cooc)
        hist = torch.zeros(n, 2, k + 1, device=dev)
        weight = valid.float().unsqueeze(-1).expand(-1, -1, -1, 2).reshape(n, 2, 2 * k)
        hist.scatter_add_(2, counts.reshape(n, 2, 2 * k), weight)
        table = self.count(torch.arange(k + 1, device=dev, dtype=torch.float32).unsqueeze(1))  # [k+1, dim]
        pooled = (hist @ table) / valid.sum(2, keepdim=True).clamp_min(1)  # mean of f(own) + f(other)
        parts = [self.history(h), pooled.reshape(n, -1)]
        wanted = (self.walk is not None) + (self.relative is not None) + (self.decay is not None)
        if len(extra) != wanted:
            raise ConfigError(
                f"this pair encoder reads {wanted} parts after co-occurrence (walk products with pair_walks, "
                f"relative ones with walk_neighbors, decayed features with pair_decayed), got {len(extra)}"
            )
        if self.walk is not None:
            w = extra[0].to(dev).reshape(n, -1).float()  # (float32 first: a third of the float64 work)
            parts.append(self.walk(torch.log1p(w.abs()).copysign_(w)))
        if self.relative is not None:
            parts.append(self.relative(extra[1], cooc))
        if self.decay is not None:
            parts.append(self.decay(extra[-1]))
        return torch.cat(parts, dim=1)
