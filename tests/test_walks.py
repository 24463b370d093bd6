"""Temporal walk features (TPNet's random feature propagation) against a dense brute-force replay."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_sampling import build, event, ingest, timed

from streamgnn.errors import ConfigError
from streamgnn.sampling.walks import WalkFeatures

RATES = (0.0, 0.3)
HOPS = 2


def brute_products(P: np.ndarray, edges, u: int, v: int, tq: float) -> np.ndarray:
    """The walk matrices replayed densely: per time group, ``A_k += M A_{k-1}`` (``A_0 = I``, ``M`` the
    group's symmetric adjacency, every ``A_k`` decayed by ``exp(-rate * events)`` between groups); the
    features are the Gram matrix of ``(A_a P)[u]`` and ``(A_b P)[v]`` over hops ``a``, ``b``. Deleted
    edges count (a walk is interactions that happened)."""
    n = len(P)
    m = HOPS + 1
    out = np.zeros((len(RATES), 2 * m, 2 * m))
    if u < 0 or v < 0:
        return out
    evs = sorted((te, i, s, d) for i, (s, d, te, _) in enumerate(edges) if te < tq)  # ties: arrival order
    for c, rate in enumerate(RATES):
        A = [np.eye(n)] + [np.zeros((n, n)) for _ in range(HOPS)]
        clock = at = g = 0
        while g < len(evs):
            e = g
            while e < len(evs) and evs[e][0] == evs[g][0]:
                e += 1
            A = [A[0]] + [a * math.exp(-rate * (clock - at)) for a in A[1:]]
            at = clock
            M = np.zeros((n, n))
            for _, _, s, d in evs[g:e]:
                M[s, d] += 1
                M[d, s] += 1
            A = [A[0]] + [A[k] + M @ A[k - 1] for k in range(1, HOPS + 1)]
            clock += e - g
            g = e
        A = [A[0]] + [a * math.exp(-rate * (clock - at)) for a in A[1:]]
        X = np.array([a @ P for a in A])  # [hop, node, dim]
        both = np.concatenate([X[:, u], X[:, v]])  # u's hops, then v's
        out[c] = both @ both.T
    return out


queries = st.lists(st.tuples(st.integers(-1, 11), st.integers(-1, 11), st.integers(0, 33)), max_size=8)
# rows of candidates: one source at one time against a few destinations, as ranking asks
rows = st.lists(
    st.tuples(st.integers(-1, 11), st.lists(st.integers(-1, 11), min_size=1, max_size=4), st.integers(0, 33)),
    max_size=3,
).map(lambda rs: [(u, v, tq) for u, vs, tq in rs for v in vs])


# a stream of up to 25 events cut into batches, queries after each, and draws for the neighbors a query
# names: the input of the walk-neighbor and walk-clock brute-force checks
replayed_with_neighbors = given(
    st.lists(event, max_size=25),
    st.lists(st.integers(1, 24), max_size=3),
    st.lists(queries | rows, max_size=3),
    st.data(),
)


def asked_after_batches(events, splits, asked):
    """``events`` ingested batch by batch (cut at ``splits``) into a store; after each batch that
    ``asked`` has queries for (its i-th entry: the i-th batch's), yields the store, those queries as arrays
    (``src``, ``dst``, times ``2t - 1``: between and at the events' times) and the stored events (some of
    a stream may be refused) as ``brute_products`` reads them, by edge id."""
    cuts = [0, *sorted({s for s in splits if s < len(events)}), len(events)]
    store, ref = build([])  # ref: not read (deletions do not undo walks)
    for (a, b), qs in zip(zip(cuts[:-1], cuts[1:], strict=True), [*asked, *[[]] * len(cuts)], strict=False):
        ingest(store, ref, events[a:b], a)
        if not qs or not store.num_nodes:
            continue
        src, dst, t = (np.array(c) for c in zip(*qs, strict=True))
        table = store.edges()
        stored = list(
            zip(table.src.tolist(), table.dst.tolist(), table.t.tolist(), table.t.tolist(), strict=True)
        )
        yield store, (src, dst, 2.0 * t - 1.0), stored


@settings(max_examples=80, deadline=None)
@given(
    st.lists(event, max_size=30),
    st.lists(st.integers(1, 29), max_size=3),
    st.lists(queries | rows, max_size=4),
)
def test_matches_brute_force_however_queries_and_batches_interleave(raw, splits, asked):
    """After each batch some queries, at any times (before, inside and after the stream so far, going
    back and forth): each sees exactly the stored events before its time. Times repeat (events of one time
    stamp are one group), streams hold deletions and self-loops, later batches may hold older times."""
    events = timed(raw)
    rng = np.random.default_rng(len(events))
    events = [(k, s, d, t + 3.0 * rng.integers(0, 2)) for k, s, d, t in events]  # the next may arrive late
    walks = WalkFeatures(hops=HOPS, dim=8, decays=RATES)
    for store, (src, dst, t), stored in asked_after_batches(events, splits, asked):
        got = walks.products(store, src, dst, t)
        n = store.num_nodes
        P = walks.vectors(n)
        for j, (u, v, tq) in enumerate(zip(src.tolist(), dst.tolist(), t.tolist(), strict=True)):
            u, v = (x if x < n else -1 for x in (u, v))  # ids past the store's are unknown
            want = brute_products(P, stored, u, v, tq)
            np.testing.assert_allclose(got[j], want, rtol=1e-9, atol=1e-9, err_msg=str((u, v, tq)))


@settings(max_examples=50, deadline=None)
@given(
    st.lists(event, min_size=1, max_size=30),
    st.lists(st.integers(1, 29), max_size=4),
    queries,
    queries | rows,
)
def test_the_same_bits_however_the_stream_was_cut_and_when_it_was_asked(raw, splits, between, final):
    """One store ingested whole and asked once; another ingested in pieces and asked ``between`` each
    (which advances its state and leaves events pending): the final answers are bit-identical."""
    events = timed(raw)
    cuts = [0, *sorted({s for s in splits if s < len(events)}), len(events)]
    whole, _ = build(events)
    cut, ref = build([])
    asked = WalkFeatures(hops=HOPS, dim=8, decays=RATES)
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        ingest(cut, ref, events[a:b], a)
        if between:
            src, dst, t = (np.array(c) for c in zip(*between, strict=True))
            asked.products(cut, src, dst, t + b / 2)
    if final:
        src, dst, t = (np.array(c) for c in zip(*final, strict=True))
        once = WalkFeatures(hops=HOPS, dim=8, decays=RATES).products(whole, src, dst, t * 2.0)
        np.testing.assert_array_equal(asked.products(cut, src, dst, t * 2.0), once)


def test_a_walk_of_two_events_is_counted_only_in_time_order():
    """1 -> 2 at t=1 then 2 -> 3 at t=2 is a walk from 1 to 3; the same edges at one time stamp, or in
    the other order, are not: a walk's events have strictly increasing times."""
    from streamgnn import EventBatch
    from streamgnn.store import TemporalGraphStore

    walks = WalkFeatures(hops=2, dim=512, decays=(0.0,))
    got = []
    for times in ([1.0, 2.0], [1.0, 1.0], [2.0, 1.0]):
        store = TemporalGraphStore()
        store.ingest(EventBatch.from_columns(src=[1, 2], dst=[2, 3], t=times, eid=[0, 1]))
        u, w = store.node_index([1, 3])
        got.append(walks.products(store, np.array([u]), np.array([w]), np.array([5.0]))[0, 0, 0, 5])
    assert got[0] == pytest.approx(1.0, abs=0.2)  # about 1: random projections in 512 dimensions
    assert abs(got[1]) < 0.2 and abs(got[2]) < 0.2


def test_a_decay_channel_weighs_old_walks_down_by_the_events_since():
    """Time is counted in events: the same walk, followed by 10 or by 40 unrelated events, keeps
    ``exp(-rate * events since its first event)`` of its weight, whatever the time stamps' unit."""
    from streamgnn import EventBatch
    from streamgnn.store import TemporalGraphStore

    walks = WalkFeatures(hops=1, dim=64, decays=(0.0, 0.05))
    got = []
    for later, unit in ((10, 1.0), (40, 1.0), (10, 3600.0)):
        store = TemporalGraphStore()
        src = [1] + [10 + i for i in range(later)]
        dst = [2] + [100 + i for i in range(later)]
        t = unit * np.arange(1.0, later + 2)
        store.ingest(EventBatch.from_columns(src=src, dst=dst, t=t, eid=np.arange(later + 1)))
        u, v = store.node_index([1, 2])
        got.append(walks.products(store, np.array([u]), np.array([v]), np.array([t[-1] + unit]))[0])
    plain = got[0][0, 0, 3]
    assert [g[0, 0, 3] for g in got] == [plain] * 3  # no decay: the walk's own weight, always
    assert got[0][1, 0, 3] == pytest.approx(plain * np.exp(-0.05 * 11), rel=1e-12)
    assert got[1][1, 0, 3] == pytest.approx(plain * np.exp(-0.05 * 41), rel=1e-12)
    assert got[2][1, 0, 3] == got[0][1, 0, 3]  # hours or seconds: the same


def test_refuses_bad_settings():
    for bad in (dict(hops=0), dict(dim=0), dict(decays=()), dict(decays=(-1.0,)), dict(decays=(np.inf,))):
        with pytest.raises(ConfigError, match="walk"):
            WalkFeatures(**{"hops": 2, "dim": 8, "decays": (0.0,), **bad})
    store, _ = build([])
    with pytest.raises(ConfigError, match="destinations"):
        WalkFeatures(2, 8, (0.0,)).products(store, np.zeros(2, np.int64), np.zeros(1, np.int64), np.zeros(2))


def test_docstring_example_runs():
    import doctest

    from streamgnn.sampling import walks

    assert doctest.testmod(walks, optionflags=doctest.ELLIPSIS).failed == 0
