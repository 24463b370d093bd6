"""The figures a labelled task reports: AUC-ROC for binary labels (the TGN/DyGLib node classification
protocol), macro-F1 and accuracy for classes, NDCG@k for node affinity (TGB's), MAE and RMSE for values.

Each takes plain arrays and returns NaN where the figure is undefined (one class only, nothing to score),
so a small or early split reports "no figure", never a made-up one.
"""

from __future__ import annotations

import math

import numpy as np

from ..train.metrics import roc_auc

__all__ = ["accuracy", "auc_delong", "macro_f1", "mae", "ndcg_at_k", "rmse", "roc_auc"]


def _midranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks of ``x``'s values, ties sharing their mean rank."""
    order = np.argsort(x, kind="stable")
    ranked = x[order]
    starts = np.r_[0, np.flatnonzero(np.diff(ranked)) + 1]
    ends = np.r_[starts[1:], len(x)]
    out = np.empty(len(x))
    out[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return out


def auc_delong(scores, y) -> tuple[np.ndarray, np.ndarray]:
    """AUC-ROC of each row of ``scores`` (``[k, n]``, k classifiers on the same ``n`` rows) against binary
    ``y``, and their covariance ``[k, k]`` by DeLong et al. (1988), in Sun and Xu's (2014) midrank form.
    Why: with few positives (44 bans in a test part of 23,621 edits) an AUC moves by a few hundredths
    with the rows alone; the covariance gives each figure's standard error and that of a difference of
    two figures on the same rows (``var[a] + var[b] - 2 cov[a, b]``), which is smaller than either's
    where the two rank the rows alike. NaN where ``y`` holds one class only."""
    scores, y = np.atleast_2d(np.asarray(scores, np.float64)), np.asarray(y, bool)
    k, m = len(scores), int(y.sum())
    n = len(y) - m
    if m == 0 or n == 0:
        return np.full(k, math.nan), np.full((k, k), math.nan)
    pos, neg = scores[:, y], scores[:, ~y]
    v01, v10, auc = np.empty((k, m)), np.empty((k, n)), np.empty(k)
    for i in range(k):
        tx, ty = _midranks(pos[i]), _midranks(neg[i])
        tz = _midranks(np.concatenate([pos[i], neg[i]]))
        auc[i] = (tz[:m].sum() - m * (m + 1) / 2.0) / (m * n)
        v01[i] = (tz[:m] - tx) / n  # per positive: the share of negatives it outscores
        v10[i] = 1.0 - (tz[m:] - ty) / m  # per negative: the share of positives that outscore it
    cov = np.atleast_2d(np.cov(v01)) / m + np.atleast_2d(np.cov(v10)) / n
    return auc, cov


def accuracy(pred, y) -> float:
    """Share of rows whose predicted class is the true one."""
    pred, y = np.asarray(pred), np.asarray(y)
    return float(np.mean(pred == y)) if len(y) else math.nan


def macro_f1(pred, y, classes: int | None = None) -> float:
    """Mean over the classes present in ``y`` or ``pred`` (or ``0..classes-1``) of each class's F1: a rare
    class weighs as much as a common one, which is why class-imbalanced streams report it."""
    pred, y = np.asarray(pred, np.int64), np.asarray(y, np.int64)
    if not len(y):
        return math.nan
    labels = np.arange(classes) if classes is not None else np.union1d(pred, y)
    f1 = []
    for c in labels:
        tp = np.sum((pred == c) & (y == c))
        denominator = np.sum(pred == c) + np.sum(y == c)
        f1.append(2 * tp / denominator if denominator else 0.0)
    return float(np.mean(f1))


def ndcg_at_k(scores, relevance, k: int = 10, groups=None) -> float:
    """NDCG@k as TGB scores node affinity (``tgbn-*``): ``scores`` and ``relevance`` are ``[n, c]`` (a
    node's score and true affinity for each of ``c`` candidates, e.g. alliances). Candidates with equal
    scores share their positions: each gets the mean of their discounts, so a tie (a persistence forecast
    of zeros) is scored as its average order, never by its arbitrary one. The figure is the mean over rows
    or, given ``groups`` (one key per row: the label's time), the mean over groups of each group's mean,
    TGB's average over label timestamps. Rows with no relevant candidate are left out."""
    scores, relevance = np.asarray(scores, np.float64), np.asarray(relevance, np.float64)
    if scores.ndim != 2 or scores.shape != relevance.shape:
        raise ValueError(f"ndcg_at_k takes two [n, c] arrays, got {scores.shape} and {relevance.shape}")
    n, c = scores.shape
    k = min(k, c)
    discount = np.zeros(c)
    discount[:k] = 1.0 / np.log2(np.arange(2, k + 2))
    order = np.argsort(-scores, axis=1, kind="stable")
    ranked = np.take_along_axis(scores, order, axis=1)
    gain = np.take_along_axis(relevance, order, axis=1)
    dcg = np.zeros(n)
    for i in range(n):
        # runs of equal scores: each run's mean gain times the sum of its positions' discounts
        starts = np.flatnonzero(np.r_[True, ranked[i, 1:] != ranked[i, :-1]])
        sizes = np.diff(np.r_[starts, c])
        mean_gain = np.add.reduceat(gain[i], starts) / sizes
        dcg[i] = float(mean_gain @ np.add.reduceat(discount, starts))
    ideal = -np.sort(-relevance, axis=1) @ discount
    ok = ideal > 0
    if not ok.any():
        return math.nan
    each = dcg[ok] / ideal[ok]
    if groups is None:
        return float(np.mean(each))
    _, group = np.unique(np.asarray(groups)[ok], return_inverse=True)
    return float(np.mean(np.bincount(group, weights=each) / np.bincount(group)))


def mae(pred, y) -> float:
    pred, y = np.asarray(pred, np.float64), np.asarray(y, np.float64)
    return float(np.mean(np.abs(pred - y))) if len(y) else math.nan


def rmse(pred, y) -> float:
    pred, y = np.asarray(pred, np.float64), np.asarray(y, np.float64)
    return float(np.sqrt(np.mean((pred - y) ** 2))) if len(y) else math.nan
