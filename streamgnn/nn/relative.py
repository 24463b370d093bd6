"""Encoder of the neighbors' relative walk features (``sampling.WalkFeatures.relative``): TPNet's tokens.

TPNet (Lu et al., NeurIPS 2024) gives each sampled neighbor ``w`` of an endpoint the walk products of
``(w, u)`` and ``(w, v)`` and lets its encoder read them token by token: a neighbor that many walks join
to the *other* endpoint says more than the pair's own counts can. Here each neighbor's products (signed
``log1p``, as the pair's walk products) and its two co-occurrence counts go through one two-layer MLP,
and the tokens are averaged per endpoint (padding, an all-zero row, left out): two vectors. Queries are
encoded in chunks, so ranking every page of a stream against a batch keeps its memory bounded.

>>> enc = RelativeEncoder(width=5, dim=4)
>>> rel = torch.zeros(3, 2, 2, 5)
>>> rel[0, 0, 0] = 1.0  # one real neighbor of the first query's source
>>> enc(rel, torch.zeros(3, 2, 6, 2)).shape
torch.Size([3, 8])
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

CHUNK = 8192  # queries per pass: [chunk, 2, k, width] inputs at a time


class RelativeEncoder(nn.Module):
    """``(rel [n, 2, k, width], cooc [n, 2, >= k, 2])`` -> ``[n, 2 * dim]``: u's neighbors' mean token,
    then v's (zeros where an endpoint has none)."""

    def __init__(self, width: int, dim: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(width + 2, dim), nn.ReLU(), nn.Linear(dim, dim))

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
        return (tokens.sum(2) / valid.sum(2).clamp_min(1)).reshape(len(rel), -1)
