"""AP, AUC and MRR against brute-force reference definitions, and running windows over a stream."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from streamgnn.train.metrics import (
    RunningMetrics,
    average_precision,
    batch_mean_metrics,
    link_metrics,
    reciprocal_ranks,
    roc_auc,
)


def reference_ap(scores: list[float], labels: list[bool]) -> float:
    """sum over distinct thresholds (high to low) of (recall gain) * precision at that threshold."""
    n_pos = sum(labels)
    ap, prev_recall = 0.0, 0.0
    for thr in sorted(set(scores), reverse=True):
        picked = [lab for s, lab in zip(scores, labels, strict=True) if s >= thr]
        tp = sum(picked)
        recall = tp / n_pos
        ap += (recall - prev_recall) * tp / len(picked)
        prev_recall = recall
    return ap


def reference_auc(scores: list[float], labels: list[bool]) -> float:
    pos = [s for s, lab in zip(scores, labels, strict=True) if lab]
    neg = [s for s, lab in zip(scores, labels, strict=True) if not lab]
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


# Small integer scores make ties common, which is where implementations usually disagree.
scored = st.lists(st.tuples(st.integers(0, 6), st.booleans()), min_size=2, max_size=40).filter(
    lambda rows: 0 < sum(lab for _, lab in rows) < len(rows)
)


@settings(max_examples=200, deadline=None)
@given(scored)
def test_ap_and_auc_match_the_threshold_and_pairwise_definitions(rows):
    scores = [float(s) for s, _ in rows]
    labels = [lab for _, lab in rows]
    assert average_precision(scores, labels) == pytest.approx(reference_ap(scores, labels), abs=1e-12)
    assert roc_auc(scores, labels) == pytest.approx(reference_auc(scores, labels), abs=1e-12)


def test_known_values():
    # Thresholds 3, 2, 1, 0: precision 1 at recall 1/2, then 2/3 at recall 1 -> AP = 1/2 + 1/2 * 2/3.
    assert average_precision([3, 1, 2, 0], [1, 1, 0, 0]) == pytest.approx(5 / 6)
    assert roc_auc([3, 1, 2, 0], [1, 1, 0, 0]) == pytest.approx(3 / 4)
    assert average_precision([1, 1], [1, 0]) == pytest.approx(0.5)  # a tie is one threshold
    assert roc_auc([1, 1], [1, 0]) == pytest.approx(0.5)
    assert math.isnan(average_precision([1, 2], [0, 0]))
    assert math.isnan(roc_auc([1, 2], [1, 1]))


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 6).flatmap(
        lambda q: st.lists(
            st.tuples(
                st.integers(0, 4),
                st.lists(st.tuples(st.integers(0, 4), st.booleans()), min_size=q, max_size=q),
            ),
            min_size=1,
            max_size=10,
        )
    )
)
def test_reciprocal_ranks_count_strictly_better_negatives_and_half_of_ties(rows):
    pos = np.array([p for p, _ in rows], float)
    neg = np.array([[s for s, _ in negs] for _, negs in rows], float)
    valid = np.array([[ok for _, ok in negs] for _, negs in rows], bool)
    got = reciprocal_ranks(pos, neg, valid)
    for i, (p, negs) in enumerate(rows):
        live = [s for s, ok in negs if ok]
        if not live:
            assert math.isnan(got[i])
        else:
            rank = 1 + sum(s > p for s in live) + 0.5 * sum(s == p for s in live)
            assert got[i] == pytest.approx(1 / rank)


def test_link_metrics_skip_missing_negatives_and_batch_means_follow_tgn():
    pos, neg = np.array([3.0, 2.0]), np.array([1.0, np.nan])
    m = link_metrics(pos, neg, np.array([1.0, np.nan]))
    assert (m.ap, m.auc, m.mrr, m.events) == (1.0, 1.0, 1.0, 2)
    # Batch means average per-batch AP (TGN); a pooled AP over the same scores differs.
    b1 = (np.array([2.0]), np.array([1.0]), np.array([1.0]))
    b2 = (np.array([0.0]), np.array([3.0]), np.array([0.5]))
    mean = batch_mean_metrics([b1, b2])
    assert mean.ap == pytest.approx((1.0 + 0.5) / 2)
    assert mean.auc == pytest.approx(0.5)
    assert mean.mrr == pytest.approx(0.75)
    pooled = link_metrics(*(np.concatenate(x) for x in zip(b1, b2, strict=True)))
    assert pooled.ap != pytest.approx(mean.ap)


def test_running_windows_close_at_batch_ends_and_survive_a_state_round_trip():
    rng = np.random.default_rng(0)
    batches = [
        (rng.normal(1, 1, 30), rng.normal(0, 1, 30), rng.random(30), np.arange(30.0) + 30 * i)
        for i in range(7)
    ]
    full = RunningMetrics(window_events=70)
    for pos, neg, rr, t in batches:
        full.add(pos, neg, rr, t, loss=0.5, seconds=0.1)
    assert [w.end_events for w in full.windows] == [
        90,
        180,
    ]  # 3 batches of 30 reach 70; windows never split one
    ref = batch_mean_metrics([b[:3] for b in batches[:3]])  # the offline protocol's definition
    assert full.windows[0].ap == pytest.approx(ref.ap) and full.windows[0].auc == pytest.approx(ref.auc)
    pooled = link_metrics(*(np.concatenate(x) for x in zip(*[b[:3] for b in batches[:3]], strict=True)))
    assert full.windows[0].ap != pytest.approx(pooled.ap)
    assert full.windows[0].t_start == 0.0 and full.windows[0].t_end == 89.0

    half = RunningMetrics(window_events=70)
    for pos, neg, rr, t in batches[:4]:
        half.add(pos, neg, rr, t, loss=0.5, seconds=0.1)
    state = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in half.state_dict().items()}
    resumed = RunningMetrics(window_events=1)
    resumed.load_state_dict(state)
    for pos, neg, rr, t in batches[4:]:
        resumed.add(pos, neg, rr, t, loss=0.5, seconds=0.1)
    assert resumed.windows == full.windows
    assert resumed.close() == full.close()


def test_capped_windows_keep_the_latest_and_the_summary_of_all():
    rng = np.random.default_rng(1)
    batches = [(rng.normal(1, 1, 20 + i), rng.normal(0, 1, 20 + i), rng.random(20 + i)) for i in range(40)]
    full, capped = RunningMetrics(window_events=50), RunningMetrics(window_events=50, max_windows=3)
    for i, b in enumerate(batches):
        t = np.arange(len(b[0]), dtype=float) + 100 * i
        full.add(*b, t, loss=0.1 * i, seconds=0.1)
        capped.add(*b, t, loss=0.1 * i, seconds=0.1)
    assert full.closed == len(full.windows) > 10
    assert capped.closed == full.closed and list(capped.windows) == list(full.windows)[-3:]
    ws = list(full.windows)  # the summary is the event-weighted mean over every window, dropped ones too
    expect = np.average([w.ap for w in ws], weights=[w.events for w in ws])
    assert capped.summary().ap == pytest.approx(expect, rel=1e-12)
    assert capped.summary() == full.summary()
    assert capped.summary().events == sum(w.events for w in ws)

    resumed = RunningMetrics(window_events=50, max_windows=3)
    resumed.load_state_dict(capped.state_dict())
    assert resumed.summary() == capped.summary() and resumed.closed == capped.closed
    # a checkpoint written before totals were kept (every window in it) gives the same summary
    old = {k: v for k, v in full.state_dict().items() if k not in ("closed", "totals")}
    legacy = RunningMetrics(window_events=50, max_windows=3)
    legacy.load_state_dict(old)
    assert legacy.summary() == full.summary() and list(legacy.windows) == ws[-3:]
    assert legacy.closed == full.closed
