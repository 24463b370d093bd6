"""Link-failure models: which links carry messages in each communication round, seeded and reproducible.

Every decision is a pure function of ``(seed, round, graph)`` (plus, for the bursty model, the rounds before),
computed from the whole graph. So every MPI rank computes the same mask without talking to anyone, the
centralized simulation computes it too, and a decentralized run under a failure model can be checked against
the centralized one bit for bit. A link is undirected: when ``{i, j}`` fails, neither direction gets through.

- ``Bernoulli(p)``: each link fails independently with probability ``p`` in each round. Training under
  ``Bernoulli(1 - keep)`` with a fresh round per shift is the random edge sampling of stochastic GNNs.
- ``GilbertElliott``: bursty losses; each link is a two-state Markov chain (good/bad) advanced every round.
- ``AdversarialDegree(fraction)``: an adversary cuts the given fraction of links with the highest endpoint
  degree sum (ties broken by a seeded hash), the same links every round on a static graph.

``keep(shift, round, lanes)`` returns ``[lanes, N, D]`` booleans aligned with ``shift.neighbors``; with
``lanes=None`` one decision per link serves every lane of a batch.

>>> import numpy as np
>>> from streamgnn.filters.shift import ShiftOperator
>>> S = ShiftOperator.from_adjacency(np.ones((4, 4)) - np.eye(4))
>>> keep = Bernoulli(0.3, seed=1).keep(S, round=0)
>>> tuple(keep.shape)
(1, 4, 3)
>>> bool((keep == Bernoulli(0.3, seed=1).keep(S, round=0)).all())
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError
from .shift import ShiftOperator

_MASK64 = (1 << 64) - 1


def mix_seed(*parts: int) -> int:
    """A well-spread 63-bit seed from integers (splitmix64 finalizer chained over the parts)."""
    z = 0x9E3779B97F4A7C15
    for p in parts:
        z = (z ^ (int(p) & _MASK64)) * 0xBF58476D1CE4E5B9 & _MASK64
        z = (z ^ (z >> 27)) * 0x94D049BB133111EB & _MASK64
        z ^= z >> 31
    return z >> 1


def _unit(owner: str, name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{owner}.{name} must be in [0, 1], got {value}")


def _uniform(seed: int, round_: int, stream: int, shape: tuple[int, ...]) -> Tensor:
    return torch.rand(shape, generator=torch.Generator().manual_seed(mix_seed(seed, round_, stream)))


@dataclass(frozen=True)
class _Links:
    """The undirected links of a graph: sorted unique codes and, per slot, the index into them (-1: none)."""

    codes: np.ndarray
    index: np.ndarray

    @classmethod
    def of(cls, shift: ShiftOperator) -> _Links:
        pc = shift.pair_codes
        codes = np.unique(pc[pc >= 0])
        return cls(codes, np.where(pc >= 0, np.searchsorted(codes, pc), -1))


def _lanes(shift: ShiftOperator, lanes: int | None) -> int:
    if lanes is None:
        return shift.lanes
    if shift.lanes not in (1, lanes):
        raise ConfigError(f"a graph with {shift.lanes} lanes cannot serve {lanes} lanes")
    return lanes


def _expand(per_link: Tensor, links: _Links, lanes: int) -> Tensor:
    """``[lanes, n_links]`` decisions to ``[lanes, N, D]`` slots (padding: False)."""
    idx = torch.from_numpy(np.maximum(links.index, 0))
    if idx.shape[0] == 1:
        idx = idx.expand(lanes, *idx.shape[1:])
    lane = torch.arange(lanes).view(-1, 1, 1)
    if per_link.shape[1] == 0:
        return torch.zeros(idx.shape, dtype=torch.bool)
    return per_link[lane, idx] & torch.from_numpy(links.index >= 0)


class FailureModel:
    """Base: ``keep(shift, round, lanes) -> [lanes, N, D]`` bool, deterministic in (seed, round, graph)."""

    def keep(self, shift: ShiftOperator, round: int, lanes: int | None = None) -> Tensor:
        if round < 0:
            raise ConfigError(f"communication rounds start at 0, got {round}")
        n = _lanes(shift, lanes)
        links = _Links.of(shift)
        return _expand(self._keep_links(shift, links, int(round), n), links, n)

    def _keep_links(self, shift: ShiftOperator, links: _Links, round_: int, lanes: int) -> Tensor:
        raise NotImplementedError

    def reset(self) -> None:
        """Forget any state carried between rounds (only the bursty model has some)."""


@dataclass(frozen=True)
class NoFailures(FailureModel):
    """Every link delivers."""

    def _keep_links(self, shift, links, round_, lanes):
        return torch.ones(lanes, len(links.codes), dtype=torch.bool)


@dataclass(frozen=True)
class Bernoulli(FailureModel):
    """Each link fails independently with probability ``p`` in every round."""

    p: float
    seed: int = 0

    def __post_init__(self) -> None:
        _unit("Bernoulli", "p", self.p)

    def _keep_links(self, shift, links, round_, lanes):
        return _uniform(self.seed, round_, 0, (lanes, len(links.codes))) >= self.p


@dataclass
class GilbertElliott(FailureModel):
    """Bursty losses: a link in the good state loses a message with ``loss_good``, in the bad state with
    ``loss_bad``; it turns bad with ``p_good_bad`` and recovers with ``p_bad_good`` per round. A link first
    seen at some round starts from the stationary distribution. Rounds must not go backwards (``reset()``)."""

    p_good_bad: float
    p_bad_good: float
    loss_good: float = 0.0
    loss_bad: float = 1.0
    seed: int = 0
    _codes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), init=False, repr=False)
    _bad: Tensor | None = field(default=None, init=False, repr=False)
    _round: int = field(default=-1, init=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("p_good_bad", "p_bad_good", "loss_good", "loss_bad"):
            _unit("GilbertElliott", name, getattr(self, name))
        if self.p_good_bad + self.p_bad_good == 0:
            raise ConfigError("GilbertElliott needs p_good_bad + p_bad_good > 0")

    @classmethod
    def from_rate(cls, p: float, burst: float = 4.0, seed: int = 0) -> GilbertElliott:
        """Mean loss rate ``p`` in bursts of ``burst`` rounds on average (good: lossless, bad: all lost)."""
        if not 0.0 <= p < 1.0 or burst < 1.0:
            raise ConfigError(f"GilbertElliott.from_rate needs 0 <= p < 1 and burst >= 1, got {p}, {burst}")
        p_bg = 1.0 / burst
        return cls(p_good_bad=p * p_bg / (1.0 - p), p_bad_good=p_bg, seed=seed)

    @property
    def stationary_bad(self) -> float:
        return self.p_good_bad / (self.p_good_bad + self.p_bad_good)

    def reset(self) -> None:
        self._codes, self._bad, self._round = np.zeros(0, np.int64), None, -1

    def _keep_links(self, shift, links, round_, lanes):
        if round_ < self._round or (self._bad is not None and self._bad.shape[0] != lanes):
            raise ConfigError(
                f"GilbertElliott cannot go from round {self._round} to round {round_} ({lanes} lanes); "
                "call reset() to start over"
            )
        if self._bad is None:
            self._bad = torch.zeros(lanes, 0, dtype=torch.bool)
        while self._round < round_:  # advance every known link one round at a time
            self._round += 1
            u = _uniform(self.seed, self._round, 1, tuple(self._bad.shape))
            self._bad = torch.where(self._bad, u >= self.p_bad_good, u < self.p_good_bad)
        new = np.setdiff1d(links.codes, self._codes)
        if len(new):
            u = _uniform(self.seed, round_, 2, (lanes, len(new)))
            codes = np.concatenate([self._codes, new])
            order = np.argsort(codes, kind="stable")
            self._codes = codes[order]
            self._bad = torch.cat([self._bad, u < self.stationary_bad], dim=1)[:, torch.from_numpy(order)]
        bad = self._bad[:, torch.from_numpy(np.searchsorted(self._codes, links.codes))]
        u = _uniform(self.seed, round_, 3, tuple(bad.shape))
        return u >= torch.where(bad, self.loss_bad, self.loss_good)


@dataclass(frozen=True)
class AdversarialDegree(FailureModel):
    """Cuts ``ceil(fraction * links)`` links with the highest ``deg(i) + deg(j)`` (ties: seeded hash) in
    each lane: an adversary that jams the best-connected links."""

    fraction: float
    seed: int = 0

    def __post_init__(self) -> None:
        _unit("AdversarialDegree", "fraction", self.fraction)

    def _keep_links(self, shift, links, round_, lanes):
        n = shift.num_nodes
        keep = np.ones((shift.lanes, len(links.codes)), bool)
        tie = np.array([mix_seed(self.seed, c) for c in links.codes], dtype=np.float64)
        for lane in range(shift.lanes):
            deg = shift.degree[lane]
            present = np.isin(links.codes, shift.pair_codes[lane])
            score = np.where(present, deg[links.codes // n] + deg[links.codes % n], -1)
            cut = math.ceil(self.fraction * int(present.sum()))
            order = np.lexsort((tie, -score))  # highest score first, then by hash
            keep[lane, order[:cut]] = False
        out = torch.from_numpy(keep)
        return out.expand(lanes, -1) if shift.lanes == 1 else out


FAILURE_KINDS = ("bernoulli", "bursty", "adversarial")


def make_failures(kind: str, p: float, seed: int = 0, burst: float = 4.0) -> FailureModel:
    """The failure model of a sweep point: ``kind`` in ``FAILURE_KINDS`` at mean failure rate ``p``."""
    if p == 0:
        return NoFailures()
    if kind == "bernoulli":
        return Bernoulli(p, seed)
    if kind == "bursty":
        return GilbertElliott.from_rate(p, burst, seed)
    if kind == "adversarial":
        return AdversarialDegree(p, seed)
    raise ConfigError(f"failure kind must be one of {FAILURE_KINDS}, got {kind!r}")
