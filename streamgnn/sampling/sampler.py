"""TemporalSampler: k-hop temporal neighbor sampling straight from the live store.

The sampler keeps no index of its own: each call reads the store through its contract
(``streamgnn.store.contract``: ``view()`` and ``feature_view()``), so an event ingested a moment ago is
visible at once, nothing is ever rebuilt, and any store that keeps the contract (a whole graph, or one
rank's shard of it) can be sampled. Only edges strictly before a root's query
time and not deleted at it are candidates, so a model never sees the event it is asked to predict.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass
from typing import Literal

import numba
import numpy as np
import torch

from ..configs import Config
from ..errors import ConfigError
from ..store import FeatureStore, FeatureView, GraphStore
from . import kernels as K
from .types import SampledHop, SampledSubgraph, int_ids

Strategy = Literal["recent", "uniform"]  # Literal fields: checked by ``Config`` however built
STRATEGIES = typing.get_args(Strategy)
DIRECTIONS = {"both": K.BOTH, "out": K.OUT, "in": K.IN}
_NO_FEATURES = np.zeros((0, 0), np.float32)
_NO_INTS = np.zeros(0, np.int64)
# the feature arguments of ``kernels.sample_hop`` when none are gathered (same dtypes: no recompile)
_NO_FEATS = (
    _NO_FEATURES, False, _NO_INTS, _NO_INTS, np.zeros((0, 2), np.int32), np.zeros(0), _NO_FEATURES, False,
)  # fmt: skip
# Below this many roots a hop runs on the calling thread: waking idle threads costs tens of microseconds
# per parallel region (OMP_WAIT_POLICY=passive), more than splitting a small hop saves.
PARALLEL_MIN_ROOTS = 2048


@dataclass(frozen=True)
class SamplerConfig(Config):
    """How to sample.

    ``fanouts[h]``: neighbors per root at hop ``h`` (-1: all candidates). ``strategy``: "recent" (the
    ``k`` latest) or "uniform" (``k`` distinct, uniformly at random). ``direction``: "both" (undirected
    use; a self-loop counts once as out- and once as in-edge), "out" (root is the source) or "in".
    ``window``: only edges with ``t - window <= edge time < t``. ``seed`` and the call counter fix every
    uniform draw. ``edge_features``/``node_features``: gather them (where the store has them).
    """

    fanouts: tuple[int, ...] = (10,)
    strategy: Strategy = "recent"
    direction: Literal["both", "out", "in"] = "both"
    window: float | None = None
    seed: int = 0
    edge_features: bool = False
    node_features: bool = False

    def __post_init__(self) -> None:
        try:
            fanouts = () if isinstance(self.fanouts, str) else tuple(self.fanouts)
        except TypeError:  # a bare int, None
            fanouts = ()
        if not fanouts or not all(_is_int(k) and (k == -1 or 1 <= k < 2**31) for k in fanouts):
            raise ConfigError(
                f"fanouts must be a non-empty sequence of ints >= 1 (or -1: all), got {self.fanouts!r}"
            )
        object.__setattr__(self, "fanouts", tuple(int(k) for k in fanouts))
        if self.window is not None and not (_is_real(self.window) and self.window >= 0):
            raise ConfigError(f"window must be a number >= 0 (or None for no window), got {self.window!r}")


class TemporalSampler:
    """Sample temporal neighborhoods of ``(root, time)`` queries; roots are internal node ids.

    Roots the store has not seen (id -1 or >= ``num_nodes``) get no neighbors. With the same seed, the
    same calls in the same order return the same samples, whatever the thread count.
    """

    def __init__(self, store: GraphStore, config: SamplerConfig | None = None, **overrides) -> None:
        if not isinstance(store, GraphStore):
            raise ConfigError(f"a sampler reads a GraphStore (num_nodes, view()), got {type(store).__name__}")
        self.store = store
        self.config = dataclasses.replace(config or SamplerConfig(), **overrides)
        self.calls = 0
        self._compiled: tuple[SamplerConfig, tuple] | None = None

    def sample(self, roots, t, *, key: int | None = None) -> SampledSubgraph:
        """Sample every hop of ``config.fanouts`` for ``roots`` at times ``t`` (scalar or per root).

        ``key`` names the random stream (default: the call counter, which then advances); pass a fixed
        key to make a call's uniform draws independent of the calls before it, e.g. in evaluation.
        """
        roots = int_ids("roots", roots)
        times = np.array(t)  # a copy: callers may pass read-only views
        if times.dtype.kind not in "iuf" and times.size:
            raise ConfigError(f"t must be a number or one number per root, got {times.dtype} values")
        times = times.astype(np.float64, copy=False)
        if times.ndim == 0:
            times = np.full(len(roots), times)
        elif times.shape != roots.shape:
            raise ConfigError(f"t must be a scalar or one time per root ({len(roots)}), got {times.shape}")
        cfg = self.config
        how = self._how(cfg) + (_int64(self.calls if key is None else key),)
        store = self.store
        graph = store.view().kernel_args  # the same view object until the next ingest: no per-call build
        feats = want_node = None
        if cfg.edge_features or cfg.node_features:
            fv = _feature_view(store)
            want_edge = cfg.edge_features and fv.edge_feat is not None
            want_node = cfg.node_features and fv.node_feat is not None
            feats = _feats(fv, want_edge, want_node) if want_edge or want_node else None
        hops: list[SampledHop] = []
        q_nodes, q_t = roots, times
        for h, k in enumerate(cfg.fanouts):
            ptr, root_index, nbr, eid, et, dt, edge_x, node_x, nan = _sample_hop(
                graph, q_nodes, q_t, k, how, h, feats
            )
            if nan:  # only query times can be NaN (edge times, the later hops' queries, never are)
                raise ConfigError("query times must not be NaN")
            hops.append(SampledHop(ptr, root_index, nbr, eid, et, dt, q_t, edge_x, node_x))
            q_nodes, q_t = nbr, et
        if key is None:
            self.calls += 1
        root_x = store.node_features_internal(roots, times) if want_node else None
        return SampledSubgraph(roots, times, hops, root_x)

    def _how(self, cfg: SamplerConfig) -> tuple:
        """The kernels' form of ``cfg`` (direction code, window, uniform, seed), kept while ``cfg`` stays."""
        if self._compiled is None or self._compiled[0] is not cfg:
            window = math.inf if cfg.window is None else float(cfg.window)
            how = (DIRECTIONS[cfg.direction], window, cfg.strategy == "uniform", _int64(cfg.seed))
            self._compiled = (cfg, how)
        return self._compiled[1]


def _is_int(x) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool | np.bool_)


def _is_real(x) -> bool:
    return isinstance(x, float | np.floating) or _is_int(x)


def _int64(x: int) -> int:
    """``x`` modulo 2**64 as a two's complement int64, the kernels' form of a 64-bit key."""
    x = int(x) & ((1 << 64) - 1)
    return x - (1 << 64) if x >> 63 else x


def _feature_view(store) -> FeatureView:
    if not isinstance(store, FeatureStore):
        name = type(store).__name__
        raise ConfigError(f"sampling features needs a FeatureStore (feature_view()), not {name}")
    return store.feature_view()


def _feats(fv: FeatureView, want_edge: bool, want_node: bool) -> tuple:
    """The feature arrays ``kernels.sample_hop`` takes (empty where not wanted)."""
    return (
        fv.edge_feat if want_edge else _NO_FEATURES, want_edge,
        fv.ustart, fv.udeg, fv.upool, fv.upd_t,
        fv.node_feat if want_node else _NO_FEATURES, want_node,
    )  # fmt: skip


def _sample_hop(graph, roots, ts, k, how, hop, feats):
    """``kernels.sample_hop``, in parallel when the hop has enough roots to pay for waking the threads, or
    ``sample_hop_plain`` (no features, ``feats`` None: fewer arrays in and out) when it runs serially."""
    threads = 1 if len(roots) < PARALLEL_MIN_ROOTS else _numba_threads()
    if threads == 1 and feats is None:
        return _split_plain(len(roots), *K.sample_hop_plain(*graph, roots, ts, k, *how, hop))
    f = feats if feats is not None else _NO_FEATS
    if threads == 1:
        out = K.sample_hop(*graph, roots, ts, k, *how, hop, *f)
    else:
        out = K.sample_hop_parallel(*graph, roots, ts, k, *how, hop, *f, 4 * threads)
    *arrays, edge_x, node_x, nan = out
    return (*arrays, edge_x if f[1] else None, node_x if f[7] else None, nan)


def _numba_threads() -> int:
    """Numba's thread count, leaving torch's as it was.

    The first call starts Numba's OpenMP threading layer, which sets the calling thread's OpenMP thread
    count to Numba's, and torch reads its own count from that same setting: the first large sample (a
    resume refreshing every node) silently switched a trainer from the 1 thread its user chose to 2, and
    with it the order of torch's float reductions, so the resumed run left the path of the run it resumed.
    """
    threads = torch.get_num_threads()
    try:
        return numba.get_num_threads()
    finally:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


def _split_plain(n, ints, floats, nan):
    """``sample_hop_plain``'s buffers as ``sample_hop``'s outputs (views), for ``n`` roots."""
    m = len(floats) >> 1
    a, b = n + 1 + m, n + 1 + 2 * m
    return ints[: n + 1], ints[n + 1 : a], ints[a:b], ints[b:], floats[:m], floats[m:], None, None, nan
