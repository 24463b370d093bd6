"""Robust aggregation: how a node combines the messages that did (and did not) arrive in a round.

``Aggregation()`` is the plain shift ``y_i = S_ii x_i + sum_j S_ij x_j`` over the messages delivered (a lost
message counts as zero: the graph of that round is a random subgraph). Two remedies compose with it and with
every graph filter, because filters only ever call an aggregation on a ``Received``:

- ``normalize=True``: rescale the neighbor sum by ``sum_j |S_ij| / sum_{j delivered} |S_ij|``, so a node that
  hears from 70% of its neighbors still sees a sum of the usual size (zero when nothing arrived).
- ``max_age=s, decay=g``: a neighbor whose message is missing this step contributes its last delivered
  message (same layer and tap) if it is at most ``s`` steps old, weighted ``g ** age``. Needs an exchange
  with ``memory=True`` and steps that follow each other in time (a controller's time steps, a repeated
  inference on a persisting observation).

Sums run slot by slot in neighbor order, so each row's result is the same wherever it is computed (a lost
message's zero term may differ in sign between a simulation and a real run: values compare equal).

>>> import torch
>>> from streamgnn.filters.exchange import Received
>>> got = Received(values=(torch.tensor([[[1.0]]]), torch.tensor([[[0.0]]])),
...                fresh=torch.tensor([[[True, False]]]), weights=torch.tensor([[[0.5, 0.5]]]),
...                self_weights=torch.zeros(1, 1), valid=torch.tensor([[[True, True]]]))
>>> own = torch.zeros(1, 1, 1)
>>> Aggregation()(own, got).item(), Aggregation(normalize=True)(own, got).item()
(0.5, 1.0)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..configs import Config
from ..errors import ConfigError
from .exchange import Received, sum_slots


@dataclass(frozen=True)
class Aggregation(Config):
    """Plain by default; ``normalize`` by what was received; reuse messages up to ``max_age`` steps old."""

    normalize: bool = False
    max_age: int = 0
    decay: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.max_age, int) or self.max_age < 0:
            raise ConfigError(f"Aggregation.max_age must be a non-negative int, got {self.max_age!r}")
        if not 0.0 < self.decay <= 1.0:
            raise ConfigError(f"Aggregation.decay must be in (0, 1], got {self.decay}")

    @property
    def name(self) -> str:
        parts = [f"hold-last({self.max_age}, {self.decay:g})"] if self.max_age else []
        parts += ["normalized"] if self.normalize else []
        return "+".join(parts) or "plain"

    def __call__(self, own: Tensor, got: Received) -> Tensor:
        """``own [B, n, F]`` and what arrived -> ``(S x)`` rows ``[B, n, F]``."""
        fresh, w = got.fresh, got.weights
        zero = torch.zeros((), dtype=w.dtype)
        coef = torch.where(fresh, w, zero)
        values = list(got.values)
        if self.max_age and got.memory is not None:
            table = torch.tensor([self.decay**a for a in range(self.max_age + 1)], dtype=w.dtype)
            stale = ~fresh & got.valid & (got.age <= self.max_age)
            coef = torch.where(stale, w * table[got.age.clamp(max=self.max_age)], coef)
            mem = got.memory.unbind(-2)
            values = [
                torch.where(s.unsqueeze(-1), m, v)
                for s, m, v in zip(stale.unbind(-1), mem, values, strict=True)
            ]
        terms = [c.unsqueeze(-1) * v for c, v in zip(coef.unbind(-1), values, strict=True)]
        out = sum_slots(terms)
        if self.normalize:
            total = sum_slots(w.abs().unsqueeze(-1))
            heard = sum_slots(coef.abs().unsqueeze(-1))
            scale = torch.where(heard > 0, total / torch.where(heard > 0, heard, 1.0), zero)
            out = out * scale
        return got.self_weights.unsqueeze(-1) * own + out
