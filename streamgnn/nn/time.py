"""Functional time encoding (TGAT, Xu et al. 2020), shared by memory messages and temporal attention."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from ..errors import ConfigError

TimeInit = Literal["geometric", "uniform"]
TIME_INITS = ("geometric", "uniform")


class TimeEncoder(nn.Module):
    """``cos(w * dt + b)``, ``w`` and ``b`` trained.

    ``init="geometric"`` (TGAT/TGN papers): ``w`` starts at ``1 / 10**linspace(0, 9, dim)``, ``b`` at 0, so
    one encoder resolves seconds and years alike. ``init="uniform"`` (PyG's ``TimeEncoder``: ``nn.Linear``'s
    default, ``w``, ``b`` ~ U(-1, 1)): every frequency is fast against gaps of many time units, so the
    encoding tells a zero or tiny ``dt`` sharply from larger ones, and larger ones apart only by noise.

    >>> enc = TimeEncoder(3)
    >>> enc(torch.zeros(2)).tolist()  # cos(0) in every dimension
    [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    """

    def __init__(self, dim: int, init: TimeInit = "geometric") -> None:
        super().__init__()
        if dim < 1:
            raise ConfigError(f"time encoding dim must be >= 1, got {dim}")
        if init not in TIME_INITS:
            raise ConfigError(f"time encoder init must be one of {TIME_INITS}, got {init!r}")
        self.dim = dim
        self.init = init
        self.lin = nn.Linear(1, dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.init == "uniform":
            self.lin.reset_parameters()
            return
        with torch.no_grad():
            self.lin.weight.copy_((1.0 / 10 ** torch.linspace(0, 9, self.dim)).unsqueeze(1))
            self.lin.bias.zero_()

    def forward(self, dt: Tensor) -> Tensor:
        """``dt`` of any shape -> ``[*dt.shape, dim]``.

        Pass time *differences*: absolute stream times are float64 and lose seconds once cast to float32.
        """
        return torch.cos(self.lin(dt.to(self.lin.weight.dtype).unsqueeze(-1)))
