"""Temporal neighbor sampling over the live store, negative sampling and fixed evaluation negatives."""

from .negative import EvalNegatives, NegativeSampler
from .sampler import SamplerConfig, TemporalSampler
from .types import SampledHop, SampledSubgraph

__all__ = [
    "EvalNegatives",
    "NegativeSampler",
    "SampledHop",
    "SampledSubgraph",
    "SamplerConfig",
    "TemporalSampler",
]
