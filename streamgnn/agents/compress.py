"""Message compression for parameter mixing: top-k sparsification and low-bit quantization.

Codecs work on rows (one message per link) and have a fixed encoded size per message, so a receiver knows
every bundle's length in advance. Both are deterministic; error feedback lives in the caller's per-link
reference copies (what is not sent now stays in ``theta - reference`` and goes out later).

- ``TopK(fraction)``: the ``ceil(fraction * P)`` entries of largest magnitude, as int32 indices and float32
  values (8 bytes each).
- ``Quantize(bits)``: each entry rounded to one of ``2 ** bits - 1`` levels of the row's max magnitude,
  packed ``8 // bits`` to a byte, plus the float32 scale.

>>> import torch
>>> rows = torch.tensor([[0.5, -2.0, 0.1, 1.0]])
>>> TopK(0.5).decode(TopK(0.5).encode(rows), 4).tolist()
[[0.0, -2.0, 0.0, 1.0]]
>>> Quantize(8).decode(Quantize(8).encode(rows), 4).sub(rows).abs().max().item() < 0.01
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError


class Codec:
    """``encode([m, P] float32) -> [m, nbytes(P)] uint8``; ``decode`` inverts it (lossy)."""

    name = "none"

    def nbytes(self, size: int) -> int:
        return 4 * size

    def encode(self, rows: Tensor) -> np.ndarray:
        # explicit widths: a round in which every link of this rank failed sends zero rows
        return (
            rows.detach()
            .float()
            .contiguous()
            .numpy()
            .view(np.uint8)
            .reshape(len(rows), 4 * rows.shape[1])
            .copy()
        )

    def decode(self, data: np.ndarray, size: int) -> Tensor:
        return torch.from_numpy(np.ascontiguousarray(data).view(np.float32).reshape(len(data), size).copy())


@dataclass(frozen=True)
class TopK(Codec):
    fraction: float = 0.1

    def __post_init__(self) -> None:
        if not 0 < self.fraction <= 1:
            raise ConfigError(f"TopK.fraction must be in (0, 1], got {self.fraction}")

    @property
    def name(self) -> str:
        return f"top-{self.fraction:g}"

    def k(self, size: int) -> int:
        return max(1, math.ceil(self.fraction * size))

    def nbytes(self, size: int) -> int:
        return 8 * self.k(size)

    def encode(self, rows: Tensor) -> np.ndarray:
        k = self.k(rows.shape[1])
        idx = rows.abs().topk(k, dim=1, sorted=False).indices.sort(dim=1).values
        vals = rows.gather(1, idx).float()
        out = np.empty((len(rows), 8 * k), np.uint8)
        out[:, : 4 * k] = idx.int().numpy().view(np.uint8).reshape(len(rows), 4 * k)
        out[:, 4 * k :] = vals.numpy().view(np.uint8).reshape(len(rows), 4 * k)
        return out

    def decode(self, data: np.ndarray, size: int) -> Tensor:
        k = self.k(size)
        data = np.ascontiguousarray(data)
        idx = torch.from_numpy(data[:, : 4 * k].copy().view(np.int32).astype(np.int64))
        vals = torch.from_numpy(data[:, 4 * k :].copy().view(np.float32))
        return torch.zeros(len(data), size).scatter_(1, idx, vals)


@dataclass(frozen=True)
class Quantize(Codec):
    bits: int = 4

    def __post_init__(self) -> None:
        if self.bits not in (2, 4, 8):
            raise ConfigError(f"Quantize.bits must be 2, 4 or 8, got {self.bits}")

    @property
    def name(self) -> str:
        return f"{self.bits}-bit"

    def nbytes(self, size: int) -> int:
        return 4 + math.ceil(size * self.bits / 8)

    def encode(self, rows: Tensor) -> np.ndarray:
        levels = 2 ** (self.bits - 1) - 1
        scale = rows.abs().amax(dim=1, keepdim=True).float()
        q = torch.round(rows / torch.where(scale > 0, scale, 1.0) * levels).to(torch.int64) + levels
        per = 8 // self.bits
        size = rows.shape[1]
        q = torch.nn.functional.pad(q, (0, -size % per)).view(len(rows), -(-size // per), per)
        shifts = torch.arange(per) * self.bits
        packed = (q << shifts).sum(-1).to(torch.uint8).numpy()
        return np.concatenate([scale.numpy().view(np.uint8).reshape(len(rows), 4), packed], axis=1)

    def decode(self, data: np.ndarray, size: int) -> Tensor:
        levels = 2 ** (self.bits - 1) - 1
        per = 8 // self.bits
        data = np.ascontiguousarray(data)
        scale = torch.from_numpy(data[:, :4].copy().view(np.float32))
        packed = torch.from_numpy(data[:, 4:].astype(np.int64))
        q = (packed.unsqueeze(-1) >> (torch.arange(per) * self.bits)) & ((1 << self.bits) - 1)
        q = q.reshape(len(data), packed.shape[1] * per)[:, :size] - levels
        return q.float() / levels * scale


def make_codec(spec: str) -> Codec:
    """``none``, ``topk:FRACTION`` (e.g. ``topk:0.1``) or ``quant:BITS`` (e.g. ``quant:4``)."""
    kind, _, arg = spec.partition(":")
    try:
        if kind == "none" and not arg:
            return Codec()
        if kind == "topk":
            return TopK(float(arg or 0.1))
        if kind == "quant":
            return Quantize(int(arg or 4))
    except ValueError:
        pass
    raise ConfigError(f"compression must be none, topk:FRACTION or quant:BITS, got {spec!r}")
