"""Functional time encoding (TGAT, Xu et al. 2020), shared by memory messages and temporal attention."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..errors import ConfigError


class TimeEncoder(nn.Module):
    """``cos(w * dt + b)``: geometrically spaced frequencies let one encoder resolve seconds and years alike.

    ``w`` starts at ``1 / 10**linspace(0, 9, dim)`` and ``b`` at 0, as in TGAT/TGN; both are trained.
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        if dim < 1:
            raise ConfigError(f"time encoding dim must be >= 1, got {dim}")
        self.dim = dim
        self.lin = nn.Linear(1, dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.lin.weight.copy_((1.0 / 10 ** torch.linspace(0, 9, self.dim)).unsqueeze(1))
            self.lin.bias.zero_()

    def forward(self, dt: Tensor) -> Tensor:
        """``dt`` of any shape -> ``[*dt.shape, dim]``.

        Pass time *differences*: absolute stream times are float64 and lose seconds once cast to float32.
        """
        return torch.cos(self.lin(dt.to(self.lin.weight.dtype).unsqueeze(-1)))
