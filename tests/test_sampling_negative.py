"""Negative sampling (random, historical, inductive) and fixed evaluation negatives."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamgnn.errors import CheckpointError, ConfigError
from streamgnn.sampling import EvalNegatives, NegativeSampler


def history_of(src, dst) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for s, d in zip(src, dst, strict=True):
        out.setdefault(int(s), set()).add(int(d))
    return out


def positives_now(src, dst, groups) -> list[set[int]]:
    """For each event, destinations its source has among the positives of its group."""
    cell: dict[tuple, set[int]] = {}
    for s, d, g in zip(src, dst, groups, strict=True):
        cell.setdefault((g, int(s)), set()).add(int(d))
    return [cell[(g, int(s))] for s, g in zip(src, groups, strict=True)]


def check_rows(neg, pool, now) -> None:
    for row, excluded in zip(neg.tolist(), now, strict=True):
        real = [x for x in row if x >= 0]
        assert row[len(real) :] == [-1] * (len(row) - len(real))  # padding only at the end
        assert len(set(real)) == len(real) and set(real) <= set(pool) and not set(real) & excluded
        assert len(real) == min(len(row), len(set(pool) - excluded))


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 6), st.integers(0, 9)), max_size=30),  # history (src, dst)
    st.lists(st.tuples(st.integers(0, 8), st.integers(0, 11), st.integers(0, 2)), min_size=1, max_size=15),
    st.sampled_from(["random", "historical", "inductive"]),
    st.integers(1, 12),
    st.sampled_from([0.0, 0.5, 1.0]),
)
def test_negatives_respect_their_strategy(history, batch, strategy, num, frac):
    """Distinct, from the pool, never a positive of the same source now; the strategy's share first."""
    pool = np.arange(12)
    hsrc, hdst = (
        (np.array(c, np.int64).reshape(-1) for c in zip(*history, strict=True)) if history else ([], [])
    )
    sampler = NegativeSampler(pool, seed=3)
    sampler.observe(hsrc, hdst)
    src, dst, groups = (np.array(c) for c in zip(*batch, strict=True))
    neg = sampler.sample(src, dst, num=num, strategy=strategy, frac=frac, groups=groups)
    assert neg.shape == (len(src), num) and neg.dtype == np.int64
    now = positives_now(src, dst, groups.tolist())
    check_rows(neg, pool, now)
    seen = history_of(hsrc, hdst)
    first = math.floor(frac * num)  # at least this many (one more with the leftover fraction's probability)
    for i, row in enumerate(neg.tolist()):
        if strategy == "historical":
            cands = seen.get(int(src[i]), set()) - now[i]
        elif strategy == "inductive":
            cands = set(pool.tolist()) - set(np.asarray(hdst).tolist()) - now[i]
        else:
            continue
        m = min(first, len(cands))
        assert set(row[:m]) <= cands  # the strategy's share comes first ...
        if len(cands) <= first:
            assert cands <= set(row)  # ... and takes every candidate when there are few


def test_a_fraction_of_one_negative_mixes_over_positives():
    """``num=1, frac=0.3``: about 30% of positives get a historical negative, the rest a random one (a
    rounded ``frac * num`` would give none), reproducibly; an integral ``frac * num`` draws as before."""
    pool = np.arange(1000)
    sampler = NegativeSampler(pool, seed=5)
    sampler.observe(np.zeros(10, np.int64), np.arange(10))  # source 0 met destinations 0..9
    src, dst = np.zeros(20_000, np.int64), np.full(20_000, 999)
    neg = sampler.sample(src, dst, num=1, strategy="historical", frac=0.3, key=7)[:, 0]
    share = np.mean(neg < 10)  # historical, or a random draw that hit one of the 10 (1%)
    assert abs(share - (0.3 + 0.7 * 0.01)) < 0.015
    again = sampler.sample(src, dst, num=1, strategy="historical", frac=0.3, key=7)[:, 0]
    np.testing.assert_array_equal(neg, again)
    for frac in (0.0, 1.0):
        assert np.mean(sampler.sample(src, dst, num=1, strategy="historical", frac=frac, key=7) < 10) == (
            pytest.approx(frac + (1 - frac) * 0.01, abs=0.005)
        )


def test_random_negatives_are_uniform_and_reproducible():
    pool = np.arange(100, 120)
    src, dst = np.zeros(5000, np.int64), np.full(5000, 105)
    a = NegativeSampler(pool, seed=1)
    first = a.sample(src, dst, num=4)
    counts = Counter(first.reshape(-1).tolist())
    assert set(counts) == set(pool.tolist()) - {105}
    expected = 5000 * 4 / 19
    assert all(abs(c - expected) < 5 * math.sqrt(expected) for c in counts.values())
    b = NegativeSampler(pool, seed=1)
    assert np.array_equal(b.sample(src, dst, num=4), first)
    assert not np.array_equal(b.sample(src, dst, num=4), first)  # the next call draws anew
    assert np.array_equal(b.sample(src, dst, num=4, key=0), first)
    assert not np.array_equal(NegativeSampler(pool, seed=2).sample(src, dst, num=4), first)
    # an event's negatives do not depend on the other events in the call
    assert np.array_equal(NegativeSampler(pool, seed=1).sample(src[:7], dst[:7], num=4), first[:7])


def test_historical_negatives_are_seen_before_but_not_now():
    sampler = NegativeSampler(np.arange(50), seed=0)
    sampler.observe([1, 1, 1, 2], [10, 11, 12, 20])
    sampler.observe([1, 3], [13, 30])  # history grows batch by batch
    neg = sampler.sample([1, 1, 2, 4], [11, 12, 21, 5], num=2, strategy="historical")
    # source 1: history {10..13} minus positives now {11, 12}
    assert set(neg[0]) == {10, 13} and set(neg[1]) == {10, 13}
    assert neg[2, 0] == 20 and neg[2, 1] not in (20, 21)  # one historical, then random
    assert 5 not in neg[3] and len(set(neg[3])) == 2  # no history: random
    with pytest.raises(ConfigError):
        sampler.observe([-1], [3])
    with pytest.raises(ConfigError):
        sampler.observe([1 << 31], [3])


def test_inductive_negatives_were_never_seen():
    sampler = NegativeSampler(np.arange(10), seed=0)
    sampler.observe([0, 0, 1], [1, 2, 3])
    neg = sampler.sample(np.zeros(200, np.int64), np.full(200, 4), num=3, strategy="inductive")
    assert set(neg.reshape(-1).tolist()) == {0, 5, 6, 7, 8, 9}
    few = sampler.sample([0], [4], num=8, strategy="inductive", frac=1.0)
    assert set(few[0, :6]) == {0, 5, 6, 7, 8, 9} and set(few[0, 6:]) <= {1, 2, 3}


def test_small_pools_pad_with_minus_one():
    neg = NegativeSampler([7, 8, 9]).sample([0, 0], [8, 9], num=4)
    assert neg.tolist() == [[7, -1, -1, -1], [7, -1, -1, -1]]  # one batch: 8 and 9 are both positives of 0


def test_eval_negatives_are_fixed_saved_and_looked_up(tmp_path):
    rng = np.random.default_rng(0)
    n = 300
    src, dst = rng.integers(0, 20, n), rng.integers(20, 220, n)
    t = np.sort(rng.integers(0, 50, n)).astype(float)
    eid = np.arange(1000, 1000 + n)
    history = (rng.integers(0, 20, 500), rng.integers(20, 220, 500))
    kw = dict(dst_pool=np.arange(20, 220), history=history, num=100, seed=4)
    ev = EvalNegatives.generate(src, dst, t, eid, **kw)
    assert ev.neg.shape == (n, 100) and ev.num == 100
    assert np.array_equal(EvalNegatives.generate(src, dst, t, eid, **kw).neg, ev.neg)
    assert not np.array_equal(EvalNegatives.generate(src, dst, t, eid, **{**kw, "seed": 5}).neg, ev.neg)
    check_rows(ev.neg, np.arange(20, 220), positives_now(src, dst, t.tolist()))  # TGB: same-time positives
    seen = history_of(*history)
    for i in range(n):
        cands = seen.get(int(src[i]), set()) - {
            int(d) for s, d, ti in zip(src, dst, t, strict=True) if s == src[i] and ti == t[i]
        }
        assert set(ev.neg[i, : min(50, len(cands))]) <= cands
    path = ev.save(tmp_path / "negs")
    assert path.parent == tmp_path / "negs"  # a checkpoint container: verified when read back
    back = EvalNegatives.load(tmp_path / "negs")
    assert np.array_equal(back.eid, eid) and np.array_equal(back.neg, ev.neg)
    np.save(
        tmp_path / "old.npy", np.column_stack([eid, ev.neg]), allow_pickle=False
    )  # earlier versions' file
    old = EvalNegatives.load(tmp_path / "old.npy")
    assert np.array_equal(old.eid, eid) and np.array_equal(old.neg, ev.neg)
    (path / "neg.npy").write_bytes((path / "neg.npy").read_bytes()[:-1] + b"\x01")  # a flipped byte
    with pytest.raises(CheckpointError):
        EvalNegatives.load(tmp_path / "negs")
    assert np.array_equal(back.lookup([1299, 1000, 1005]), ev.neg[[299, 0, 5]])
    with pytest.raises(ConfigError):
        back.lookup([5])
    with pytest.raises(ConfigError):
        EvalNegatives.generate(src[:2], dst[:2], t[:2], [1, 1], **kw)
    np.save(tmp_path / "bad.npy", np.zeros((3, 4), np.float32))
    with pytest.raises(ConfigError):
        EvalNegatives.load(tmp_path / "bad.npy")


@pytest.mark.parametrize(
    "kw",
    [dict(num=0), dict(num=2.0), dict(frac=1.5), dict(strategy="hard"), dict(groups=[0]), dict(groups=5)],
)
def test_bad_arguments_are_refused(kw):
    with pytest.raises(ConfigError):
        NegativeSampler([1, 2, 3]).sample([0, 0], [1, 2], **kw)
    with pytest.raises(ConfigError):
        NegativeSampler([])


def test_bad_ids_are_refused():
    for pool in ([-1, 5], [1.5, 2.0], [1 << 31]):  # -1 would be a draw indistinguishable from padding
        with pytest.raises(ConfigError):
            NegativeSampler(pool)
    sampler = NegativeSampler([1, 2, 3])
    with pytest.raises(ConfigError):
        sampler.extend_pool([-4])
    with pytest.raises(ConfigError):
        sampler.sample([0.5], [1])
    with pytest.raises(ConfigError, match="one per event"):
        EvalNegatives.generate([1, 2, 3], [5, 6, 7], [1.0, 2.0, 3.0], [10], dst_pool=np.arange(4, 9), num=2)
    with pytest.raises(ConfigError):
        EvalNegatives(np.array([1, 2]), np.zeros((3, 4), np.int64))
    with pytest.raises(ConfigError, match="unique"):
        EvalNegatives(np.array([1, 1]), np.zeros((2, 4), np.int64))


def test_numpy_seeds_and_keys_draw_as_python_ints():
    pool, src, dst = np.arange(50), np.arange(5), np.arange(5) + 10
    want = NegativeSampler(pool, seed=3).sample(src, dst, num=4, key=7)
    got = NegativeSampler(pool, seed=np.int64(3)).sample(src, dst, num=4, key=np.uint64(7))
    assert np.array_equal(got, want)
    kw = dict(dst_pool=pool, num=4)
    a = EvalNegatives.generate(src, dst, np.zeros(5), src, seed=np.int32(2), **kw)
    assert np.array_equal(a.neg, EvalNegatives.generate(src, dst, np.zeros(5), src, seed=2, **kw).neg)


def test_observed_destinations_join_the_pool():
    """A historical negative is always a pool destination: history outside the pool joins it."""
    sampler = NegativeSampler([5, 6, 7])
    sampler.observe([0], [99])
    assert 99 in sampler.pool
    neg = sampler.sample([0], [5], num=2, strategy="historical")
    assert neg[0, 0] == 99 and neg[0, 1] in (6, 7)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(0, 50), max_size=12), st.lists(st.booleans(), min_size=12, max_size=12)
        ),
        min_size=1,
        max_size=8,
    )
)
def test_the_trainers_pool_is_every_destination_seen_and_the_history_only_the_kept_pairs(batches):
    """``StreamNegatives.observe`` merges each batch into the sorted pool (no re-sort of the whole pool per
    batch, which cost seconds per batch at a million destinations): the pool stays exactly the sorted set of
    every destination seen, kept pairs or not, and the history holds only the pairs ``history`` keeps."""
    from streamgnn.train.negatives import StreamNegatives

    negatives, seen, kept = StreamNegatives(seed=0), set(), set()
    for dst, keep in batches:
        dst = np.array(dst, np.int64)
        src = (dst * 7) % 13
        mask = np.array(keep[: len(dst)], bool)
        negatives.observe(src, dst, history=mask)
        seen |= set(dst.tolist())
        kept |= {(int(s), int(d)) for s, d in zip(src[mask], dst[mask], strict=True)}
    if not seen:
        assert not negatives.ready
        return
    pool = negatives.sampler.pool
    assert pool.tolist() == sorted(seen)
    pairs = negatives.sampler._pairs
    assert {(int(k >> 32), int(k & 0xFFFFFFFF)) for k in pairs} == kept
