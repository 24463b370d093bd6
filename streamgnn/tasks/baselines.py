"""The baselines every task figure stands beside, on the same split and rows: the majority class (the
training labels' prior: a constant), persistence (the last label seen before, strictly, of the same node;
for an edge label, of the same destination: the ratee's last rating's label), and a logistic regression
on causal stream features (``features``; ``protocol.fit_head`` with a linear head). Classes weigh
the same in every fitted head's loss, the baselines' too (``HeadConfig.balanced``).

Each returns predictions shaped as its task's ``predict`` (P(positive), class probabilities or values),
so ``Task.metrics`` scores them like the model.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .labels import Labels, LabelSplit
from .protocol import LINEAR, HeadResult, fit_head
from .task import Classification, Task


def prior(task: Task, y_train: np.ndarray) -> np.ndarray:
    """What a node with no history gets: the base rate (binary), the majority class one-hot (classes),
    the mean (values)."""
    if isinstance(task, Classification) and not task.binary:
        counts = np.bincount(np.asarray(y_train, np.int64), minlength=task.classes)
        return np.eye(task.classes)[int(np.argmax(counts))]
    return np.asarray(np.mean(y_train) if len(y_train) else 0.0, np.float64)


def _as_scores(task: Task, y: np.ndarray) -> np.ndarray:
    if isinstance(task, Classification) and not task.binary:
        return np.eye(task.classes)[np.asarray(y, np.int64)]
    return np.asarray(y, np.float64)


def majority(task: Task, labels: Labels, split: LabelSplit) -> np.ndarray:
    """The training split's prior for every row."""
    p = prior(task, labels.y[split.train])
    return np.repeat(p[None], len(labels), axis=0) if p.ndim else np.full(len(labels), float(p))


def persistence(task: Task, labels: Labels, split: LabelSplit) -> np.ndarray:
    """Each row's key's (node, or an edge's destination) last label strictly before its time; the prior
    where it has none. Labels at the same time do not see each other."""
    key = (labels.dst if labels.on_edges else labels.node).tolist()
    scores = majority(task, labels, split)
    values = _as_scores(task, labels.y)
    last: dict = {}
    t = labels.t
    lo = 0
    while lo < len(labels):
        hi = int(np.searchsorted(t, t[lo], side="right"))
        for i in range(lo, hi):
            if key[i] in last:
                scores[i] = values[last[key[i]]]
        for i in range(lo, hi):
            last[key[i]] = i
        lo = hi
    return scores


def logistic_regression(
    task: Task, x: np.ndarray, labels: Labels, split: LabelSplit, seed: int = 0
) -> HeadResult:
    """A linear head of ``task`` on features ``x`` (its epoch picked on validation, like the model's):
    ``protocol.LINEAR``'s settings, those of the first stage of every head."""
    return fit_head(task, x, labels.y, split, dataclasses.replace(LINEAR, seed=seed))
