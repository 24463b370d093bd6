"""Temporal neighbor sampling over the live store, pair features, negative sampling and fixed evaluation
negatives."""

from .negative import EvalNegatives, NegativeSampler
from .pairs import PairFeatures
from .sampler import SamplerConfig, TemporalSampler
from .types import SampledHop, SampledSubgraph

__all__ = [
    "EvalNegatives",
    "NegativeSampler",
    "PairFeatures",
    "SampledHop",
    "SampledSubgraph",
    "SamplerConfig",
    "TemporalSampler",
]
