"""Time-decayed pair features (``sampling.DecayPairs``): against a brute-force replay of the raw events,
causal (no event at or after a query's time changes its features), batch-boundary invariant, and the
model's config switch (``TGNConfig.pair_decayed``) through the pair encoder."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_sampling import build, event, timed

from streamgnn.errors import ConfigError
from streamgnn.nn import TGNConfig
from streamgnn.nn.pairs import PairEncoder
from streamgnn.sampling.decay_pairs import DecayPairs
from streamgnn.sampling.pairs import PairFeatures

TAUS = (0.5, 4.0)
queries = st.lists(
    st.tuples(st.integers(-1, 11), st.integers(-1, 11), st.integers(0, 31)), min_size=1, max_size=12
)


def brute(ref, u: int, v: int, tq: float, k: int) -> list[float]:
    """The module docstring's columns, replayed from the raw edge list."""
    n_tau = len(TAUS)
    out = [0.0] * (7 * n_tau + 4)
    seqs = [[(c[0], c[3]) for c in ref.candidates(w, tq)][::-1][:k] if w >= 0 else [] for w in (u, v)]
    pair = []  # (time, 0: u -> v / 1: v -> u); a self-loop is both; an unknown node (-1) has no events
    for s, d, te, deleted in ref.edges if u >= 0 and v >= 0 else []:
        if te < tq and (deleted > tq or deleted == math.inf):
            pair += [(te, 0)] * (s == u and d == v) + [(te, 1)] * (s == v and d == u)
    last = max((te for te, _ in pair), default=-math.inf)
    for c, tau in enumerate(TAUS):
        base = 7 * c
        for te, col in pair:
            out[base + col] += math.exp(-(tq - te) / tau)

        def a(seq, w, tau=tau):
            return sum(math.exp(-(tq - te) / tau) for te, x in seq if x == w)

        for side in range(2):
            if seqs[side]:
                out[base + 2 + side] = math.exp(-(tq - seqs[side][0][0]) / tau)
        common = {x for _, x in seqs[0]} & {x for _, x in seqs[1]} - {u, v}
        out[base + 4] = sum(a(seqs[0], w) * a(seqs[1], w) for w in common)
        for side, other in ((0, v), (1, u)):
            total = sum(math.exp(-(tq - te) / tau) for te, _ in seqs[side])
            out[base + 5 + side] = a(seqs[side], other) / total if total > 0 else 0.0
    for side, other in ((0, v), (1, u)):
        seq = seqs[side]
        if seq and last > -math.inf:
            out[7 * n_tau + 2 * side] = math.exp(-(tq - last) / ((tq - seq[-1][0]) / len(seq)))
        hits = [j for j, (_, x) in enumerate(seq) if x == other]
        out[7 * n_tau + 2 * side + 1] = 1.0 / (1 + hits[0]) if hits else 0.0
    return out


def arrays(qs, half: float = 0.0):
    src = np.array([u for u, _, _ in qs], np.int64)
    dst = np.array([v for _, v, _ in qs], np.int64)
    return src, dst, np.array([tq / 2 + half for *_, tq in qs])


@settings(max_examples=120, deadline=None)
@given(
    st.lists(event, max_size=40), st.lists(st.integers(0, 40), max_size=3), queries, st.sampled_from([1, 3])
)
def test_matches_brute_force(raw, splits, qs, k):
    """Random streams with deletions, self-loops, duplicate times, unknown nodes; any batch cuts."""
    events = timed(raw)
    store, ref = build(events, [s for s in splits if s <= len(events)])
    src, dst, t = arrays(qs)
    got = DecayPairs(k, TAUS).read(store, src, dst, t)
    n = store.num_nodes
    for i, (u, v, tq) in enumerate(zip(src.tolist(), dst.tolist(), t.tolist(), strict=True)):
        u, v = (x if x < n else -1 for x in (u, v))  # ids past the store's are unknown
        np.testing.assert_allclose(got[i], brute(ref, u, v, tq, k), rtol=1e-9, atol=1e-12)


@settings(max_examples=80, deadline=None)
@given(st.lists(event, min_size=1, max_size=40), queries)
def test_causal_no_event_at_or_after_the_query_counts(raw, qs):
    """Each query ``(u, v, t)`` reads the same from the whole stream as from only the events before ``t``:
    events at ``t`` itself (the event being predicted, ties) and later ones change nothing. Adds only,
    so that every query time can tie with events (a delete at ``t`` hides its edge at ``t`` by design)."""
    events = timed([(0, s, d, step) for _, s, d, step in raw])
    whole, _ = build(events)
    src, dst, t = arrays(qs)
    feats = DecayPairs(3, TAUS)
    got = feats.read(whole, src, dst, t)
    for i in range(len(src)):
        before, _ = build([e for e in events if e[3] < t[i]])

        def there(x, before=before):  # the same node in the prefix's ids (-1: it has not seen it yet)
            if x < 0 or x >= whole.num_nodes:
                return -1
            return int(before.node_index(whole.external_ids(np.array([x])), strict=False)[0])

        local = [there(int(src[i])), there(int(dst[i]))]
        want = feats.read(before, np.array(local[:1]), np.array(local[1:]), t[i : i + 1])[0]
        np.testing.assert_array_equal(got[i], want)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(event, min_size=1, max_size=40), st.lists(st.integers(1, 39), min_size=1, max_size=5), queries
)
def test_batch_boundary_invariant(raw, splits, qs):
    """The same events in one batch or cut anywhere give bit-identical features."""
    events = timed(raw)
    whole, _ = build(events)
    cut, _ = build(events, [s for s in splits if s < len(events)])
    src, dst, t = arrays(qs)
    feats = DecayPairs(3, TAUS)
    np.testing.assert_array_equal(feats.read(whole, src, dst, t), feats.read(cut, src, dst, t))


def test_refuses_bad_settings():
    with pytest.raises(ConfigError, match="neighbors"):
        DecayPairs(neighbors=0)
    with pytest.raises(ConfigError, match="time constants"):
        DecayPairs(decays=(float("inf"),))
    with pytest.raises(ConfigError, match="time constants"):
        DecayPairs(decays=())


def test_the_config_switch_reaches_reader_and_encoder():
    """``pair_decayed`` adds one part to what the store reader returns and one ``pair_dim`` to the
    encoder's output, which reads it; an encoder handed the wrong parts says so."""
    store, _ = build(timed([(0, 1, 2, 1), (0, 2, 3, 1), (0, 1, 3, 1)]))
    for walks in (False, True):
        off = TGNConfig(pair_walks=walks, pair_dim=4, walk_dim=8)
        on = TGNConfig(pair_walks=walks, pair_dim=4, walk_dim=8, pair_decayed=True)
        raw = PairFeatures.of(store, on).read(np.array([0, 1]), np.array([1, 2]), np.array([5.0, 5.0]))
        assert len(raw) == len(PairFeatures.of(store, off).read(np.array([0]), np.array([1]), 5.0)) + 1
        assert raw[-1].shape == (2, DecayPairs.width(on))
        enc_on, enc_off = PairEncoder.of(on), PairEncoder.of(off)
        assert enc_on.out_dim == enc_off.out_dim + 4
        out = enc_on(*(torch.from_numpy(x) for x in raw))
        assert out.shape == (2, enc_on.out_dim) and torch.isfinite(out).all()
        with pytest.raises(ConfigError, match="parts after co-occurrence"):
            enc_on(*(torch.from_numpy(x) for x in raw[:-1]))


def test_docstring_examples_run():
    import doctest
    import importlib

    for module in ("streamgnn.sampling.decay_pairs", "streamgnn.nn.decay_pairs"):
        assert doctest.testmod(importlib.import_module(module)).failed == 0
