"""Pair features (history, neighbor co-occurrence) against a brute-force replay of the raw events."""

from __future__ import annotations

import math
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_sampling import build, event, timed

from streamgnn.errors import ConfigError
from streamgnn.sampling import pairs as pairs_module
from streamgnn.sampling.pairs import PairFeatures

TAUS = (0.5, 4.0)


def brute_history(ref, u: int, v: int, tq: float) -> list[float]:
    n_uv = n_vu = 0
    last_uv = last_vu = -math.inf
    decayed = [0.0] * len(TAUS)
    for s, d, te, deleted in ref.edges:
        if not (te < tq and (deleted > tq or deleted == math.inf)) or u < 0 or v < 0:
            continue
        for forward, hit in ((True, s == u and d == v), (False, s == v and d == u)):
            if not hit:
                continue
            if forward:
                n_uv, last_uv = n_uv + 1, max(last_uv, te)
            else:
                n_vu, last_vu = n_vu + 1, max(last_vu, te)
            decayed = [x + math.exp(-(tq - te) / tau) for x, tau in zip(decayed, TAUS, strict=True)]
    return [n_uv, n_vu, tq - last_uv, tq - last_vu, *decayed]


def brute_endpoints(ref, u: int, v: int, tq: float) -> list[float]:
    """Time since each endpoint's latest visible event with anyone (inf: none)."""
    return [tq - max((c[0] for c in ref.candidates(w, tq)), default=-math.inf) for w in (u, v)]


def brute_cooccurrence(ref, u: int, v: int, tq: float, k: int) -> np.ndarray:
    seqs = [[] if w < 0 else [c[3] for c in ref.candidates(w, tq)][::-1][:k] for w in (u, v)]
    out = np.zeros((2, k, 2), np.float32)
    for side in range(2):
        for j, x in enumerate(seqs[side]):
            out[side, j] = (seqs[side].count(x), seqs[1 - side].count(x))
    return out


def built_with_queries(raw, splits, qs):
    """The store of ``raw`` cut at ``splits`` (those inside it), its reference, and the queries as arrays."""
    events = timed(raw)
    store, ref = build(events, [s for s in splits if s <= len(events)])
    src = np.array([u for u, _, _ in qs], np.int64)
    dst = np.array([v for _, v, _ in qs], np.int64)
    return store, ref, src, dst, np.array([tq / 2 for *_, tq in qs])


# rows of candidates: one source at one time against a few destinations, as scoring asks
rows = st.lists(
    st.tuples(st.integers(-1, 11), st.lists(st.integers(-1, 11), min_size=1, max_size=4), st.integers(0, 31)),
    min_size=1,
    max_size=5,
).map(lambda rs: [(u, v, tq) for u, vs, tq in rs for v in vs])
queries = st.lists(
    st.tuples(st.integers(-1, 11), st.integers(-1, 11), st.integers(0, 31)), min_size=1, max_size=12
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(event, max_size=40),
    st.lists(st.integers(0, 40), max_size=3),
    queries | rows,
    st.sampled_from([1, 2, 5]),
)
def test_matches_brute_force(raw, splits, qs, k):
    """Random streams with deletions, self-loops, duplicate times, unknown nodes; any batch cuts."""
    store, ref, src, dst, t = built_with_queries(raw, splits, qs)
    n = store.num_nodes
    pairs = PairFeatures(store, neighbors=k, decays=TAUS, endpoints=True)
    hist, cooc = pairs.history(src, dst, t), pairs.cooccurrence(src, dst, t)
    plain = PairFeatures(store, neighbors=k, decays=TAUS).history(src, dst, t)
    np.testing.assert_array_equal(plain, hist[:, :-2])  # the endpoint columns only add to the history
    for i, (u, v, tq) in enumerate(zip(src.tolist(), dst.tolist(), t.tolist(), strict=True)):
        u, v = (x if x < n else -1 for x in (u, v))  # ids past the store's are unknown
        want = brute_history(ref, u, v, tq) + brute_endpoints(ref, u, v, tq)
        np.testing.assert_allclose(hist[i], want, rtol=1e-12)
        np.testing.assert_array_equal(cooc[i], brute_cooccurrence(ref, u, v, tq, k))


def brute_recency(ref, u: int, v: int, tq: float, cap: int, scan: int) -> list[float]:
    """Each endpoint's recency rank of the other among its distinct partners (newest first), within the
    first ``cap`` distinct ones of its latest ``scan`` entries; inf where not, or the pair never met."""
    if u < 0 or v < 0 or brute_history(ref, u, v, tq)[:2] == [0, 0]:
        return [math.inf, math.inf]
    out = []
    for w, other in ((u, v), (v, u)):
        seq = [c[3] for c in ref.candidates(w, tq)][::-1][:scan]
        partners = list(dict.fromkeys(seq))[:cap]
        out.append(partners.index(other) + 1.0 if other in partners else math.inf)
    return out


@settings(max_examples=150, deadline=None)
@given(
    st.lists(event, max_size=40),
    st.lists(st.integers(0, 40), max_size=3),
    queries | rows,
    st.integers(1, 4),
    st.integers(1, 2),
)
def test_recency_ranks_match_brute_force(raw, splits, qs, cap, scan):
    """The recency columns (last two) on random streams, rows of candidates, any batch cuts, and a scan
    limit that binds (``RECENCY_SCAN`` times the cap); few nodes, so that most pairs met and repeat."""
    raw = [(kind, s % 4, d % 4, step) for kind, s, d, step in raw]
    qs = [(u % 5 if u >= 0 else u, v % 5 if v >= 0 else v, tq) for u, v, tq in qs]
    store, ref, src, dst, t = built_with_queries(raw, splits, qs)
    n = store.num_nodes
    with mock.patch.object(pairs_module, "RECENCY_SCAN", scan):
        hist = PairFeatures(store, neighbors=2, decays=TAUS, endpoints=True, recency=cap).history(src, dst, t)
    plain = PairFeatures(store, neighbors=2, decays=TAUS, endpoints=True).history(src, dst, t)
    np.testing.assert_array_equal(plain, hist[:, :-2])  # the recency columns only add to the history
    for i, (u, v, tq) in enumerate(zip(src.tolist(), dst.tolist(), t.tolist(), strict=True)):
        u, v = (x if x < n else -1 for x in (u, v))
        assert hist[i, -2:].tolist() == brute_recency(ref, u, v, tq, cap, scan * cap)


def test_recency_ranks_count_distinct_partners_within_the_scan():
    """1 links to 2, to 3 twice, then to 4: ranks 4 -> 1, 3 -> 2, 2 -> 3; with a scan of 3 events 2 is
    out of reach (inf), as is a pair that never met; each page's own rank of 1 is 1."""
    store, _ = build([(0, 1, 2, 1.0), (0, 1, 3, 2.0), (0, 1, 3, 3.0), (0, 1, 4, 4.0)])
    u, *vs = store.node_index([1, 4, 3, 2])
    q = (np.full(3, u), np.array(vs), np.full(3, 5.0))
    for scan, want in ((2, [1.0, 2.0, 3.0]), (1, [1.0, 2.0, math.inf])):
        with mock.patch.object(pairs_module, "RECENCY_SCAN", scan):
            ranks = PairFeatures(store, neighbors=2, decays=TAUS, recency=3).history(*q)[:, -2:]
        assert ranks[:, 0].tolist() == want and ranks[:, 1].tolist() == [1.0, 1.0, 1.0]
    with mock.patch.object(pairs_module, "RECENCY_SCAN", 1):
        never = PairFeatures(store, neighbors=2, decays=TAUS, recency=3).history(vs[:1], vs[1:2], [5.0])
    assert never[0, -2:].tolist() == [math.inf, math.inf]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(event, min_size=1, max_size=40), st.lists(st.integers(1, 39), min_size=1, max_size=5), queries
)
def test_batch_boundary_invariant(raw, splits, qs):
    """The same events in one batch or cut anywhere give bit-identical features."""
    events = timed(raw)
    whole, _ = build(events)
    cut, _ = build(events, [s for s in splits if s < len(events)])
    src = np.array([u for u, _, _ in qs], np.int64)
    dst = np.array([v for _, v, _ in qs], np.int64)
    t = np.array([tq / 2 if tq < 31 else math.inf for *_, tq in qs])
    a, b = PairFeatures(whole, 3, TAUS, endpoints=True), PairFeatures(cut, 3, TAUS, endpoints=True)
    np.testing.assert_array_equal(a.history(src, dst, t), b.history(src, dst, t))
    np.testing.assert_array_equal(a.cooccurrence(src, dst, t), b.cooccurrence(src, dst, t))


def test_refuses_bad_settings():
    store, _ = build([])
    with pytest.raises(ConfigError, match="neighbors"):
        PairFeatures(store, neighbors=0)
    with pytest.raises(ConfigError, match="decay"):
        PairFeatures(store, decays=(0.0,))
    with pytest.raises(ConfigError, match="destinations"):
        PairFeatures(store).history(np.zeros(2, np.int64), np.zeros(1, np.int64), np.zeros(2))


@pytest.mark.parametrize("module", ["streamgnn.sampling.pairs", "streamgnn.nn.pairs"])
def test_docstring_examples_run(module):
    import doctest
    import importlib

    assert doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS).failed == 0


def test_recency_settings_are_refused_by_name():
    from streamgnn.nn import TGNConfig
    from streamgnn.shard import ShardConfig, ShardedTrainer
    from streamgnn.train import TrainConfig

    for bad in (-1, True, 2.0):
        with pytest.raises(ConfigError, match="pair_recency"):
            TGNConfig(pair_recency=bad)
        with pytest.raises(ConfigError, match="recency"):
            PairFeatures(build([(0, 1, 2, 1.0)])[0], recency=bad)
    model = TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, pair_dim=4, walk_dim=8, pair_recency=4)
    with pytest.raises(ConfigError, match="pair_recency=0 under train.sharding"):
        ShardedTrainer(TrainConfig(model=model, sharding=ShardConfig(num_partitions=2)))
