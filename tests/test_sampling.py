"""Temporal neighbor sampler against a brute-force reference built from the raw events."""

from __future__ import annotations

import math
import os
from collections import Counter

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamgnn.errors import ConfigError
from streamgnn.events import EventBatch
from streamgnn.sampling import SamplerConfig, TemporalSampler
from streamgnn.sampling import sampler as sampler_module
from streamgnn.store import StoreConfig, TemporalGraphStore

# ---------------------------------------------------------------------------------------------- reference


class Reference:
    """The stream replayed naively: a list of edges ``[src, dst, t, deleted_at]`` in arrival order."""

    def __init__(self) -> None:
        self.edges: list[list] = []

    def apply(self, kind: int, src: int, dst: int, t: float) -> None:
        if kind == 0:
            self.edges.append([src, dst, t, math.inf])
        elif kind == 1:
            for edge in self.edges:
                if edge[0] == src and edge[1] == dst and edge[2] <= t and edge[3] > t:
                    edge[3] = t

    def candidates(self, v: int, tq: float, direction: str = "both", window: float | None = None):
        """Visible incident entries ``(t, eid, 0 out / 1 in, nbr)`` in block order."""
        out = []
        for e, (s, d, te, deleted) in enumerate(self.edges):
            live = deleted > tq or deleted == math.inf  # at tq = inf: every edge never deleted
            if not (te < tq and live) or (window is not None and te < tq - window):
                continue
            if s == v and direction in ("both", "out"):
                out.append((te, e, 0, d))
            if d == v and direction in ("both", "in"):
                out.append((te, e, 1, s))
        return sorted(out)


def build(events, splits=()) -> tuple[TemporalGraphStore, Reference]:
    """Ingest ``(kind, src, dst, t)`` events in the batches cut at ``splits``; ids map ext -> internal."""
    store, ref = TemporalGraphStore(), Reference()
    ingest(store, ref, events, 0, splits)
    return store, ref


def ingest(store, ref, events, first_eid, splits=()):
    cuts = [0, *sorted(splits), len(events)]
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        chunk = events[a:b]
        if not chunk:
            continue
        kind, src, dst, t = (np.array(c) for c in zip(*chunk, strict=True))
        store.ingest(
            EventBatch.from_columns(
                src=src, dst=dst, t=t.astype(float), eid=np.arange(first_eid + a, first_eid + b), kind=kind
            )
        )
    internal = store.node_index(np.arange(20), strict=False) if store.num_nodes else np.full(20, -1)
    for kind, s, d, t in events:
        ref.apply(kind, int(internal[s]), int(internal[d]), float(t))


def entries(hop, i):
    a, b = hop.ptr[i], hop.ptr[i + 1]
    return list(zip(hop.t[a:b].tolist(), hop.eid[a:b].tolist(), hop.nbr[a:b].tolist(), strict=True))


def expected_recent(cands, k):
    picked = cands if k < 0 else cands[max(len(cands) - k, 0) :]
    return [(t, e, nbr) for t, e, _, nbr in picked]


def check_hop(hop, ref, roots, times, cfg: SamplerConfig, k: int) -> None:
    assert hop.num_roots == len(roots)
    assert np.array_equal(hop.root_index, np.repeat(np.arange(len(roots)), np.diff(hop.ptr)))
    assert np.allclose(hop.dt, hop.query_t[hop.root_index] - hop.t)
    assert np.array_equal(hop.query_t, times)
    for i, (v, tq) in enumerate(zip(roots.tolist(), times.tolist(), strict=True)):
        cands = ref.candidates(v, tq, cfg.direction, cfg.window)
        got = entries(hop, i)
        if cfg.strategy == "recent":
            assert got == expected_recent(cands, k), (v, tq)
        else:
            assert len(got) == (len(cands) if k < 0 else min(k, len(cands)))
            assert not Counter(got) - Counter((t, e, nbr) for t, e, _, nbr in cands)
            assert [(t, e) for t, e, _ in got] == sorted((t, e) for t, e, _ in got)


# ---------------------------------------------------------------------------------------------- streams

event = st.tuples(
    st.sampled_from([0, 0, 0, 1]),  # mostly adds, some deletes
    st.integers(0, 7),
    st.integers(0, 7),
    st.sampled_from([0, 0, 1, 2]),  # time steps: many duplicate timestamps
)


def timed(raw):
    t = np.cumsum([step for *_, step in raw]).tolist()
    return [(kind, s, d, float(ti)) for (kind, s, d, _), ti in zip(raw, t, strict=True)]


configs = st.builds(
    SamplerConfig,
    fanouts=st.lists(st.sampled_from([1, 2, 3, 5, -1]), min_size=1, max_size=2).map(tuple),
    strategy=st.sampled_from(["recent", "uniform"]),
    direction=st.sampled_from(["both", "out", "in"]),
    window=st.sampled_from([None, None, 0.0, 1.0, 3.0]),
    seed=st.integers(0, 3),
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(event, max_size=40),
    st.lists(st.integers(0, 40), max_size=3),
    configs,
    st.lists(st.tuples(st.integers(-1, 11), st.integers(0, 31)), min_size=1, max_size=12),
)
def test_matches_brute_force(raw, splits, cfg, queries):
    """Random streams with deletions, duplicate times, isolated and unknown roots; every hop checked."""
    events = timed(raw)
    store, ref = build(events, [s for s in splits if s <= len(events)])
    roots = np.array([v for v, _ in queries], np.int64)  # internal ids; >= num_nodes are unknown
    times = np.array([tq / 2 if tq <= 30 else math.inf for _, tq in queries])  # inf: the whole history
    sub = TemporalSampler(store, cfg).sample(roots, times)
    assert np.array_equal(sub.roots, roots) and len(sub.hops) == len(cfg.fanouts)
    q_nodes, q_t = roots, times
    for hop, k in zip(sub.hops, cfg.fanouts, strict=True):
        check_hop(hop, ref, q_nodes, q_t, cfg, k)
        q_nodes, q_t = hop.nbr, hop.t


def test_inserts_after_creation_are_visible_without_rebuild():
    """One sampler for the whole stream: after every batch it answers as brute force on the events so far."""
    rng = np.random.default_rng(1)
    store, ref = TemporalGraphStore(), Reference()
    recent = TemporalSampler(store, fanouts=(4, 2))
    uniform = TemporalSampler(store, fanouts=(3,), strategy="uniform", direction="out")
    t, first = 0.0, 0
    for _ in range(30):
        batch = []
        for _ in range(int(rng.integers(1, 15))):
            t += float(rng.choice([0.0, 0.0, 1.0]))
            batch.append(
                (int(rng.choice([0, 0, 0, 1])), int(rng.integers(0, 12)), int(rng.integers(0, 12)), t)
            )
        ingest(store, ref, batch, first)
        first += len(batch)
        roots = rng.integers(-1, store.num_nodes + 2, 20)
        times = rng.uniform(0, t + 1, 20)
        sub = recent.sample(roots, times)
        check_hop(sub.hops[0], ref, roots, times, recent.config, 4)
        check_hop(sub.hops[1], ref, sub.hops[0].nbr, sub.hops[0].t, recent.config, 2)
        check_hop(uniform.sample(roots, times).hops[0], ref, roots, times, uniform.config, 3)


def test_late_events_follow_the_stores_time_order():
    """Out-of-order arrivals land in time order; a late add is deleted by an earlier-arrived later delete."""
    events = [(0, 0, 1, 5.0), (0, 0, 2, 9.0), (0, 0, 3, 2.0), (1, 0, 2, 9.5), (0, 0, 4, 7.0), (0, 0, 2, 1.0)]
    store, _ = build(events, [2, 4])
    hop = TemporalSampler(store, fanouts=(4,)).sample([0, 0], [9.0, 10.0]).hops[0]
    assert store.external_ids(hop.nbr).tolist() == [2, 3, 1, 4, 3, 1, 4]
    assert hop.t.tolist() == [1.0, 2.0, 5.0, 7.0, 2.0, 5.0, 7.0]
    assert hop.ptr.tolist() == [0, 4, 7]


def test_queries_at_and_after_the_newest_event():
    """A query after every stored event (the streaming "now") takes the whole history; one at the newest
    time still excludes the events at that time, and a late arrival behind the newest counts at once."""
    store = TemporalGraphStore(StoreConfig(allowed_lateness=10.0))
    store.ingest(EventBatch.from_columns(src=[0, 0, 0], dst=[1, 2, 3], t=[1.0, 4.0, 4.0], eid=[0, 1, 2]))
    sampler = TemporalSampler(store, fanouts=(5,))
    just_after = float(np.nextafter(4.0, np.inf))
    hop = sampler.sample([0, 0, 0, 1], [4.0, just_after, 100.0, 100.0]).hops[0]
    assert hop.ptr.tolist() == [0, 1, 4, 7, 8]
    assert hop.t.tolist() == [1.0, 1.0, 4.0, 4.0, 1.0, 4.0, 4.0, 1.0]
    store.ingest(EventBatch.from_columns(src=[0], dst=[4], t=[2.0], eid=[3]))  # late, kept
    hop = sampler.sample([0, 0], [just_after, 3.0]).hops[0]
    assert store.external_ids(hop.nbr).tolist() == [1, 4, 2, 3, 1, 4]
    assert hop.t.tolist() == [1.0, 2.0, 4.0, 4.0, 1.0, 2.0]


def random_store(n_events=6000, n_nodes=300, seed=0, features=False) -> TemporalGraphStore:
    rng = np.random.default_rng(seed)
    kind = rng.choice([0, 0, 0, 0, 1], n_events)
    src, dst = rng.integers(0, n_nodes, n_events), rng.integers(0, n_nodes, n_events)
    feats = rng.random((n_events, 3), dtype=np.float32) if features else None
    store = TemporalGraphStore()
    store.ingest(
        EventBatch.from_columns(
            src=src, dst=dst, t=np.sort(rng.integers(0, 2000, n_events)), eid=np.arange(n_events), kind=kind,
            features=feats,
        )
    )  # fmt: skip
    return store


def flat(sub):
    return [np.concatenate([h.ptr, h.nbr, h.eid]) for h in sub.hops]


@pytest.mark.parametrize(
    "cfg",
    [
        SamplerConfig(fanouts=(5, 3), strategy="uniform", seed=7),
        SamplerConfig(fanouts=(5, 3), strategy="uniform", direction="out", seed=7),
        SamplerConfig(fanouts=(4, -1), window=300.0, direction="in", seed=7),
    ],
)
def test_draws_are_reproducible_across_threads_and_samplers(monkeypatch, cfg):
    """Same seed and call sequence give the same draws, on one thread or many; a new call draws anew."""
    store = random_store()
    rng = np.random.default_rng(5)
    roots, times = rng.integers(0, store.num_nodes, 3000), rng.uniform(0, 2100, 3000)
    monkeypatch.setattr(sampler_module, "PARALLEL_MIN_ROOTS", 0)  # even small hops run in parallel
    threads = numba.get_num_threads()
    runs = []
    try:
        for n in (1, min(2, numba.config.NUMBA_NUM_THREADS)):
            numba.set_num_threads(n)
            sampler = TemporalSampler(store, cfg)
            runs.append([flat(sampler.sample(roots, times)) for _ in range(2)])
    finally:
        numba.set_num_threads(threads)
    for a, b in zip(runs[0], runs[1], strict=True):
        assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    first, second = runs[0]
    if cfg.strategy == "recent":
        assert all(np.array_equal(x, y) for x, y in zip(first, second, strict=True))
        return
    assert not np.array_equal(first[0], second[0])  # the call counter moved the stream on
    keyed = TemporalSampler(store, cfg)
    assert all(
        np.array_equal(x, y) for x, y in zip(flat(keyed.sample(roots, times, key=1)), second, strict=True)
    )
    other = TemporalSampler(store, cfg, seed=8).sample(roots, times)
    assert not np.array_equal(flat(other)[0], first[0])


@pytest.mark.parametrize("strategy", ["uniform", "recent"])
def test_every_kernel_variant_draws_the_same(monkeypatch, strategy):
    """The featureless serial kernel, the one with features and the parallel one sample alike; seeds and
    keys count modulo 2**64 (the kernels take them as int64 two's complements)."""
    store = random_store(features=True)
    rng = np.random.default_rng(9)
    roots, times = rng.integers(-1, store.num_nodes + 2, 700), rng.uniform(0, 2100, 700)
    cfg = SamplerConfig(fanouts=(4, 3), strategy=strategy, seed=-3)
    runs = []
    for min_roots, features in ((10**9, False), (10**9, True), (0, False)):
        monkeypatch.setattr(sampler_module, "PARALLEL_MIN_ROOTS", min_roots)
        sampler = TemporalSampler(store, cfg, edge_features=features)
        subs = [sampler.sample(roots, times, key=k) for k in (-1, 2**63, 5)]
        assert all((h.edge_features is not None) == features for sub in subs for h in sub.hops)
        runs.append([flat(sub) for sub in subs])
    wrapped = TemporalSampler(store, cfg, seed=2**64 - 3)
    runs.append([flat(wrapped.sample(roots, times, key=k)) for k in (2**64 - 1, -(2**63), 5 + 2**64)])
    for run in runs[1:]:
        for a, b in zip(runs[0], run, strict=True):
            assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    if strategy == "uniform":
        assert not np.array_equal(runs[0][0][0], runs[0][2][0])


@pytest.mark.parametrize("direction", ["both", "out"])
def test_uniform_draws_are_uniform_over_visible_edges(direction):
    """A hub with 12 edges (half out, half in, two deleted): each visible one is drawn k/n of the time."""
    events = [(0, 0, j, float(j)) if j % 2 else (0, j, 0, float(j)) for j in range(1, 13)]
    events += [(1, 0, 3, 20.0), (1, 4, 0, 20.0)]
    store, ref = build(events)
    cands = ref.candidates(0, 30.0, direction)
    n, k, trials = len(cands), 3, 20000
    hop = (
        TemporalSampler(store, fanouts=(k,), strategy="uniform", direction=direction)
        .sample(np.zeros(trials, np.int64), 30.0)
        .hops[0]
    )
    assert np.all(np.diff(hop.ptr) == k)
    counts = Counter(hop.eid.tolist())
    assert set(counts) == {e for _, e, _, _ in cands}
    expected = trials * k / n
    assert all(abs(c - expected) < 5 * math.sqrt(expected) for c in counts.values()), counts
    subsets = Counter(map(tuple, hop.eid.reshape(trials, k).tolist()))  # each of the C(n, k) equally often
    per_subset = trials / math.comb(n, k)
    assert len(subsets) == math.comb(n, k)
    assert all(abs(c - per_subset) < 5 * math.sqrt(per_subset) for c in subsets.values())


def test_features_are_gathered_in_the_same_call():
    """Edge features of each sampled edge, node features of each neighbor as of the edge time."""
    feats = np.arange(8 * 2, dtype=np.float32).reshape(8, 2)
    batch = EventBatch.from_columns(
        src=[0, 1, 1, 0, 2, 0, 2, 1],
        dst=[1, 1, 2, 2, 2, 1, 2, 2],
        t=[1.0, 2.0, 3.0, 4.0, 4.0, 5.0, 6.0, 7.0],
        eid=np.arange(8),
        kind=[0, 2, 0, 0, 2, 0, 2, 2],  # node 1 updated at 2 and 7, node 2 at 4 and 6
        features=feats,
    )
    store = TemporalGraphStore()
    store.ingest(batch)
    sampler = TemporalSampler(store, fanouts=(3, 2), edge_features=True, node_features=True)
    sub = sampler.sample(store.node_index([0, 1, 2]), 8.0)
    for hop in sub.hops:
        assert np.array_equal(hop.edge_features, store.edge_feat[hop.eid])
        assert np.array_equal(hop.node_features, store.node_features_internal(hop.nbr, hop.t))
    # by hand: root 0's newest neighbors are 2 at t=4 (features of update at t=4: row 4) and 1 at t=5 (row 1)
    hop = sub.hops[0]
    assert store.external_ids(hop.nbr[: hop.ptr[1]]).tolist() == [1, 2, 1]
    assert hop.node_features[: hop.ptr[1]].tolist() == [[0.0, 0.0], feats[4].tolist(), feats[1].tolist()]
    assert hop.edge_features[: hop.ptr[1]].tolist() == [
        feats[0].tolist(),
        feats[3].tolist(),
        feats[5].tolist(),
    ]
    assert np.array_equal(sub.root_node_features, store.node_features_internal(sub.roots, 8.0))
    plain = TemporalSampler(store, fanouts=(3,)).sample([0], 8.0)
    assert plain.hops[0].edge_features is None and plain.root_node_features is None
    bare, _ = build([(0, 0, 1, 1.0)])
    none = TemporalSampler(bare, edge_features=True, node_features=True).sample([0], 2.0)
    assert none.hops[0].edge_features is None and none.hops[0].node_features is None


def test_edge_index_and_dense_layout():
    store, _ = build([(0, 0, 1, 1.0), (0, 0, 2, 2.0), (0, 3, 0, 3.0)])
    hop = TemporalSampler(store, fanouts=(2,)).sample(store.node_index([0, 3]), np.array([5.0, 5.0])).hops[0]
    assert hop.edge_index().tolist() == [[0, 1, 2], [0, 0, 1]]
    nbr, _, dt, mask = hop.to_dense(3)
    assert store.external_ids(nbr[mask]).tolist() == [2, 3, 0]
    assert dt.tolist() == [[0.0, 3.0, 2.0], [0.0, 0.0, 2.0]]


def test_scalar_time_and_empty_queries():
    store, _ = build([(0, 0, 1, 1.0)])
    sampler = TemporalSampler(store, fanouts=(2, 2))
    sub = sampler.sample([0, 1], 2.0)
    assert sub.root_t.tolist() == [2.0, 2.0] and sub.hops[0].nbr.tolist() == [1, 0]
    empty = sampler.sample(np.zeros(0, np.int64), np.zeros(0))
    assert [len(h) for h in empty.hops] == [0, 0] and empty.hops[1].num_roots == 0
    assert len(TemporalSampler(TemporalGraphStore()).sample([0, -1], 1.0).hops[0]) == 0


@pytest.mark.parametrize(
    "kw",
    [
        dict(fanouts=()),
        dict(fanouts=(0,)),
        dict(fanouts=(-2,)),
        dict(strategy="latest"),
        dict(direction="up"),
        dict(window=-1.0),
        dict(window=float("nan")),
        dict(window="1"),
        dict(fanouts=5),
        dict(fanouts=(1.7,)),
        dict(fanouts=(True,)),
        dict(fanouts=(2**63,)),
    ],
)
def test_bad_config_is_refused(kw):
    with pytest.raises(ConfigError):
        SamplerConfig(**kw)


def test_bad_queries_are_refused():
    sampler = TemporalSampler(TemporalGraphStore())
    with pytest.raises(ConfigError):
        sampler.sample(np.zeros((2, 2), np.int64), 1.0)
    with pytest.raises(ConfigError):
        sampler.sample([0, 1], [1.0, 2.0, 3.0])
    with pytest.raises(ConfigError):
        sampler.sample([0], [float("nan")])
    for roots in ([0.9], None, ["a"], [True]):  # a float id truncated to an int would name another node
        with pytest.raises(ConfigError, match="roots"):
            sampler.sample(roots, 1.0)
    for t in ("x", None, ["1.0"]):
        with pytest.raises(ConfigError, match="t must be a number"):
            sampler.sample([0], t)


def test_roots_may_be_a_scalar_integral_floats_or_python_ints():
    store, _ = build([(0, 0, 1, 1.0), (0, 0, 2, 2.0)])
    sampler = TemporalSampler(store, fanouts=(5,))
    want = sampler.sample([0], 5.0).hops[0].nbr.tolist()
    for roots in (0, np.int32(0), [0.0], np.array([0], dtype=object)):
        assert sampler.sample(roots, 5.0).hops[0].nbr.tolist() == want


def test_a_query_at_infinity_sees_every_edge_never_deleted():
    store, _ = build([(0, 0, 1, 1.0), (0, 0, 2, 2.0), (0, 5, 6, 3.0)])
    sampler = TemporalSampler(store, fanouts=(5,))
    assert sampler.sample([0], math.inf).hops[0].t.tolist() == [1.0, 2.0]
    ingest(store, Reference(), [(1, 5, 6, 4.0), (1, 0, 1, 5.0)], 3)  # deletions elsewhere and of 0-1
    for direction in ("both", "out"):
        hop = TemporalSampler(store, fanouts=(5,), direction=direction).sample([0], math.inf).hops[0]
        assert hop.t.tolist() == [2.0]


def test_a_large_sample_leaves_torchs_thread_count_alone():
    """The first parallel sample starts Numba's OpenMP threads, which set the process's OpenMP thread count:
    torch, reading the same setting, went from the 1 thread its user chose to Numba's count."""
    import subprocess
    import sys

    code = """
import numpy as np, torch
torch.set_num_threads(1)
assert torch.get_num_threads() == 1  # torch has run before the sample, as in a trainer
from streamgnn.events import EventBatch
from streamgnn.sampling import TemporalSampler
from streamgnn.store import TemporalGraphStore
store = TemporalGraphStore()
n = 5000
store.ingest(EventBatch.from_columns(src=np.arange(n), dst=np.arange(n) + 1, t=np.arange(n, dtype=float),
                                     eid=np.arange(n)))
TemporalSampler(store, fanouts=(5,)).sample(np.arange(n), np.full(n, 1e9))
print(torch.get_num_threads())
"""
    env = {**os.environ, "NUMBA_NUM_THREADS": "2", "OMP_WAIT_POLICY": "passive"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1"]
