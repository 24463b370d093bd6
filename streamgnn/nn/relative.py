"""Encoder of the neighbors' relative walk features (``sampling.WalkFeatures.relative``): TPNet's tokens.

TPNet (Lu et al., NeurIPS 2024) gives each sampled neighbor ``w`` of an endpoint the walk products of
``(w, u)`` and ``(w, v)`` and lets its encoder read them token by token: a neighbor that many walks join
to the *other* endpoint says more than the pair's own counts can. Here each neighbor's products (signed
``log1p``, as the pair's walk products) and its two co-occurrence counts go through one two-layer MLP,
and the tokens are averaged per endpoint (padding, an all-zero row, left out): two vectors. With
``mixer`` (``TGNConfig.walk_mixer``) the tokens first pass TPNet's two MLP-Mixer layers (``TokenMixer``), so
a token's encoding can depend on the other neighbors' (TPNet's encoder; ours averages what it gives).
Queries are encoded in chunks, so ranking every page of a stream against a batch keeps its memory bounded.

>>> enc = RelativeEncoder(width=5, dim=4)
>>> rel = torch.zeros(3, 2, 2, 5)
>>> rel[0, 0, 0] = 1.0  # one real neighbor of the first query's source
>>> enc(rel, torch.zeros(3, 2, 6, 2)).shape
torch.Size([3, 8])
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

CHUNK = 8192  # queries per pass: [chunk, 2, k, width] inputs at a time
MIXER_LAYERS = 2  # TPNet's default (its ``num_layers``)


class TokenMixer(nn.Module):
    """One MLP-Mixer layer over ``[n, tokens, dim]`` as TPNet builds it: a residual two-layer GELU MLP
    across the tokens (hidden ``tokens // 2``) per channel, then one across the channels (hidden ``4 dim``)
    per token, each after a LayerNorm; ``dropout`` after each MLP's hidden layer and output, as TPNet's."""

    def __init__(self, tokens: int, dim: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.dropout = dropout
        hidden = max(1, tokens // 2)
        self.token_norm = nn.LayerNorm(tokens)
        self.token_mlp = nn.Sequential(nn.Linear(tokens, hidden), nn.GELU(), nn.Linear(hidden, tokens))
        self.channel_norm = nn.LayerNorm(dim)
        self.channel_mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: Tensor) -> Tensor:
        x = x + self._mlp(self.token_mlp, self.token_norm(x.transpose(1, 2))).transpose(1, 2)
        return x + self._mlp(self.channel_mlp, self.channel_norm(x))

    def _mlp(self, mlp: nn.Sequential, x: Tensor) -> Tensor:
        """``mlp`` (Linear, GELU, Linear) with dropout after its hidden layer and its output; the dropout is
        functional, so the parameters' names stay those of the layer without it."""
        if not (self.dropout and self.training):
            return mlp(x)
        first, act, last = mlp
        hidden = F.dropout(act(first(x)), self.dropout, True)
        return F.dropout(last(hidden), self.dropout, True)


class RelativeEncoder(nn.Module):
    """``(rel [n, 2, k, width], cooc [n, 2, >= k, 2])`` -> ``[n, 2 * dim]``: u's neighbors' mean token,
    then v's (zeros where an endpoint has none). ``mixer``: the ``k`` tokens are mixed first (0: not)."""

    def __init__(self, width: int, dim: int, mixer: int = 0) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(width + 2, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.mixers = nn.ModuleList(TokenMixer(mixer, dim) for _ in range(MIXER_LAYERS if mixer else 0))

    def forward(self, rel: Tensor, cooc: Tensor) -> Tensor:
        dev = self.mlp[0].weight.device
        k = rel.shape[2]
        parts = [
            self._pooled(rel[a : a + CHUNK].to(dev), cooc[a : a + CHUNK, :, :k].to(dev))
            for a in range(0, len(rel), CHUNK)
        ]
        return torch.cat(parts) if parts else torch.zeros(0, 2 * self.mlp[-1].out_features, device=dev)

    def _pooled(self, rel: Tensor, cooc: Tensor) -> Tensor:
        valid = (rel != 0).any(-1, keepdim=True)  # a real neighbor's row never is all zeros
        x = torch.cat([torch.sign(rel) * torch.log1p(rel.abs()), torch.log1p(cooc.float().clamp_min(0))], -1)
        tokens = self.mlp(x.float()) * valid
        if len(self.mixers):
            n, _, k, dim = tokens.shape
            mixed = tokens.reshape(2 * n, k, dim)
            for mixer in self.mixers:
                mixed = mixer(mixed)
            tokens = mixed.reshape(n, 2, k, dim) * valid  # padding mixed in, then left out of the mean
        return (tokens.sum(2) / valid.sum(2).clamp_min(1)).reshape(len(rel), -1)
