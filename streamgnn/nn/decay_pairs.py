"""Encoder of the time-decayed pair features (``sampling.DecayPairs``): one more part of the pair vector.

The features are decayed counts (0 up to a pair's event rate times the time constant) and values in
[0, 1] (recencies, shares, scale-free pace); ``log1p`` keeps the counts' orders of magnitude apart and
leaves the small values almost as they are, then a two-layer MLP, as the other pair parts.

>>> enc = DecayEncoder(columns=11, dim=4)
>>> enc(torch.zeros(3, 11, dtype=torch.float64)).shape
torch.Size([3, 4])
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class DecayEncoder(nn.Module):
    """``[n, columns]`` float64 decayed pair features -> ``[n, dim]``."""

    def __init__(self, columns: int, dim: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(columns, dim), nn.ReLU(), nn.Linear(dim, dim))

    def forward(self, x: Tensor) -> Tensor:
        dev = self.mlp[0].weight.device
        return self.mlp(torch.log1p(x.to(dev).clamp_min(0)).float())
