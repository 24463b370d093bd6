"""The figures a labelled task reports: AUC-ROC for binary labels (the TGN/DyGLib node classification
protocol), macro-F1 and accuracy for classes, NDCG@k for node affinity (TGB's), MAE and RMSE for values.

Each takes plain arrays and returns NaN where the figure is undefined (one class only, nothing to score),
so a small or early split reports "no figure", never a made-up one.
"""

from __future__ import annotations

import math

import numpy as np

from ..train.metrics import roc_auc

__all__ = ["accuracy", "macro_f1", "mae", "ndcg_at_k", "rmse", "roc_auc"]


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


def ndcg_at_k(scores, relevance, k: int = 10) -> float:
    """Mean over rows of NDCG@k: ``scores`` and ``relevance`` are ``[n, c]`` (a node's score and true
    affinity for each of ``c`` candidates, e.g. alliances); rows with no relevant candidate are left out."""
    scores, relevance = np.asarray(scores, np.float64), np.asarray(relevance, np.float64)
    if scores.ndim != 2 or scores.shape != relevance.shape:
        raise ValueError(f"ndcg_at_k takes two [n, c] arrays, got {scores.shape} and {relevance.shape}")
    k = min(k, scores.shape[1])
    discount = 1.0 / np.log2(np.arange(2, k + 2))
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    dcg = (np.take_along_axis(relevance, top, axis=1) * discount).sum(axis=1)
    ideal = (-np.sort(-relevance, axis=1)[:, :k] * discount).sum(axis=1)
    ok = ideal > 0
    return float(np.mean(dcg[ok] / ideal[ok])) if ok.any() else math.nan


def mae(pred, y) -> float:
    pred, y = np.asarray(pred, np.float64), np.asarray(y, np.float64)
    return float(np.mean(np.abs(pred - y))) if len(y) else math.nan


def rmse(pred, y) -> float:
    pred, y = np.asarray(pred, np.float64), np.asarray(y, np.float64)
    return float(np.sqrt(np.mean((pred - y) ** 2))) if len(y) else math.nan
