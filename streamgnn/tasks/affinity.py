"""Node affinity, TGB's node property prediction (``tgbn-trade``, ``-genre``, ``-reddit``): for each node and
each period, the label is how the node's interactions in the NEXT period are shared among ``C`` classes (the
nations a nation trades with next year, the genres a user listens to next week; on Travian, the alliances a
player attacks, messages and trades with tomorrow), a distribution over the classes. It is predicted at the
period's start from what came before, and scored by NDCG@10 of the predicted distribution against it
(``metrics.ndcg_at_k``: ties averaged, the mean over label times of each time's mean, as TGB's evaluator).

A label at ``t`` describes ``[t, t + horizon)``, so its value is known only at ``t + horizon``: what predicts
a label reads events strictly before its time and labels revealed by then (``revealed``), never the period
it describes. TGB's baselines read only those: ``persistence`` (the node's last revealed label; zeros where
none) and ``moving_average`` (TGB's: each revealed label moves the forecast by ``1 / window``).

Why not the class a node belongs to (a player's own alliance) as the label: it hardly moves (a Travian
player changes alliance on about 1% of days), so persistence scores it near 1 and there is nothing to learn.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..errors import ConfigError
from ..events import EventBatch
from .head import mlp
from .labels import Labels
from .metrics import ndcg_at_k
from .task import Task


@dataclass(frozen=True)
class NodeAffinity(Task):
    """A distribution over ``classes`` per node label (rows of ``Labels.y``, ``[n, classes]``): a softmax
    head trained by cross-entropy to the distribution, scored by NDCG@``k``."""

    classes: int = 2
    k: int = 10

    on_edges = False
    averaging = "NDCG: each label time's mean, then their mean (TGB's)"

    def __post_init__(self) -> None:
        if not isinstance(self.classes, int) or self.classes < 2:
            raise ConfigError(f"NodeAffinity.classes must be an int >= 2, got {self.classes!r}")
        if not isinstance(self.k, int) or self.k < 1:
            raise ConfigError(f"NodeAffinity.k must be an int >= 1, got {self.k!r}")

    @property
    def out_dim(self) -> int:
        return self.classes

    @property
    def label_shape(self) -> tuple[int, ...]:
        return (self.classes,)

    def target(self, y: np.ndarray) -> torch.Tensor:
        y = np.asarray(y, np.float64)
        if y.ndim != 2 or y.shape[1] != self.classes:
            raise ConfigError(f"NodeAffinity: labels of shape {y.shape}, need [n, {self.classes}]")
        sums = y.sum(axis=1)
        bad = ~np.isfinite(sums) | (y < 0).any(axis=1) | (np.abs(sums - 1) > 1e-6)
        if bad.any():
            row = int(np.argmax(bad))
            raise ConfigError(f"NodeAffinity: label row {row} is not a distribution (sum {sums[row]!r})")
        return torch.as_tensor(y, dtype=torch.float32)

    def losses(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return -(y * torch.log_softmax(out, dim=1)).sum(dim=1)

    def predict(self, out: torch.Tensor) -> np.ndarray:
        return torch.softmax(out, dim=1).double().numpy()

    @property
    def fixed_inputs(self) -> int:
        """The head's leading inputs an online head leaves unstandardised: the class features
        (``RevealedShares``, shares in [0, 1] its class map shares across classes)."""
        return self.classes * PER_CLASS

    def head(self, in_dim: int, features: int, hidden: tuple[int, ...], dropout: float) -> nn.Module:
        """The online head (``tasks.online``): ``AffinityHead`` over ``[RevealedShares.rows ; embedding
        and stream features]`` (``in_dim`` in all)."""
        return AffinityHead(self.classes, PER_CLASS, in_dim - self.fixed_inputs, hidden, dropout)

    def metrics(self, scores: np.ndarray, y: np.ndarray, t: np.ndarray | None = None) -> dict[str, float]:
        """NDCG@k, averaged as TGB's evaluator averages it given the labels' times ``t`` (each time's mean,
        then the mean over times: a day with few labels weighs as much as a busy one), else per label."""
        return {f"ndcg{self.k}": ndcg_at_k(scores, y, self.k, groups=t)}

    def selection(self, metrics: dict[str, float]) -> float:
        value = metrics[f"ndcg{self.k}"]
        return -math.inf if math.isnan(value) else value


def affinity_labels(
    events: EventBatch, bounds: np.ndarray, members: list[tuple[np.ndarray, np.ndarray]], classes: int
) -> Labels:
    """The labels of a stream cut into periods ``[bounds[p], bounds[p + 1])``: for each period and each
    node that is the source of an event in it whose destination has a class then (``members[p]``: node
    ids and their classes, ``0..classes-1``), one label at ``bounds[p]`` whose ``y`` is the share of those
    events per destination class. Events whose destination has no class that period count in no label."""
    bounds = np.asarray(bounds, np.float64)
    if bounds.ndim != 1 or len(bounds) != len(members) + 1 or np.any(np.diff(bounds) <= 0):
        raise ConfigError(f"affinity_labels: need {len(members) + 1} increasing bounds, got {bounds.shape}")
    nodes, times, rows = [], [], []
    for p, (ids, cls) in enumerate(members):
        if len(cls) != len(ids):
            raise ConfigError(f"affinity_labels: period {p} has {len(ids)} nodes but {len(cls)} classes")
        if len(cls) and (np.min(cls) < 0 or np.max(cls) >= classes):
            raise ConfigError(f"affinity_labels: period {p} has a class outside 0..{classes - 1}")
        if len(np.unique(ids)) != len(ids):
            raise ConfigError(f"affinity_labels: period {p} gives a node two classes")
        inside = np.flatnonzero((events.t >= bounds[p]) & (events.t < bounds[p + 1]))
        order = np.argsort(ids, kind="stable")
        at = np.minimum(np.searchsorted(ids[order], events.dst[inside]), max(len(ids) - 1, 0))
        known = np.zeros(len(inside), bool) if not len(ids) else ids[order][at] == events.dst[inside]
        src, cls_of = events.src[inside][known], cls[order][at][known]
        who, which = np.unique(src, return_inverse=True)
        counts = np.zeros((len(who), classes))
        np.add.at(counts, (which, cls_of), 1.0)
        nodes.append(who)
        times.append(np.full(len(who), bounds[p]))
        rows.append(counts / counts.sum(axis=1, keepdims=True))
    return Labels(np.concatenate(nodes), np.concatenate(times), np.concatenate(rows))


def _sweep(labels: Labels, horizon: float, update: Callable, at: Labels | None) -> np.ndarray:
    """For each row of ``at`` (default: the labels themselves), the state ``update(state, y)`` folds its
    node's labels revealed by its time (``t' + horizon <= t``) into, in order; zeros where it has none."""
    if not horizon > 0:
        raise ConfigError(f"horizon must be > 0, got {horizon}")
    at = labels if at is None else at
    y = np.asarray(labels.y, np.float64)
    if y.ndim != 2:
        raise ConfigError(f"a forecast of node affinity takes [n, C] labels, got shape {y.shape}")
    out = np.zeros((len(at), y.shape[1]))
    reveal = labels.t + horizon
    order = np.argsort(reveal, kind="stable").tolist()
    node, query_node, query_t = labels.node.tolist(), at.node.tolist(), at.t.tolist()
    state: dict = {}
    j = 0
    for i in range(len(at)):
        while j < len(order) and reveal[order[j]] <= query_t[i]:
            r = order[j]
            state[node[r]] = update(state.get(node[r]), y[r])
            j += 1
        if query_node[i] in state:
            out[i] = state[query_node[i]]
    return out


def persistence(labels: Labels, horizon: float, at: Labels | None = None) -> np.ndarray:
    """TGB's persistence forecast: the node's last revealed label (zeros where it has none); for the rows
    of ``at`` where given (another task's labels: what this relation's last period says at their times)."""
    return _sweep(labels, horizon, lambda _, y: y, at)


def moving_average(labels: Labels, horizon: float, window: int = 7, at: Labels | None = None) -> np.ndarray:
    """TGB's moving average (``MovingAverage``, window 7): the node's first revealed label, then each
    next one moves it by ``1 / window`` (zeros where it has none); at the rows of ``at`` where given."""
    if not isinstance(window, int) or window < 1:
        raise ConfigError(f"window must be an int >= 1, got {window!r}")
    return _sweep(labels, horizon, lambda m, y: y if m is None else m + (y - m) / window, at)


def popularity(labels: Labels, horizon: float) -> np.ndarray:
    """Each label's view of the classes' share of everyone's interactions: the mean of the labels of the
    latest label time revealed by its own (zeros before any)."""
    y = np.asarray(labels.y, np.float64)
    times, start = np.unique(labels.t, return_index=True)
    means = np.add.reduceat(y, start, axis=0) / np.diff(np.r_[start, len(labels)])[:, None]
    latest = np.searchsorted(times + horizon, labels.t, side="right") - 1
    return np.where((latest >= 0)[:, None], means[np.maximum(latest, 0)], 0.0)


def class_features(
    labels: Labels, horizon: float, window: int = 7, extra: np.ndarray | None = None
) -> np.ndarray:
    """``[n, C, f]``: per label and class, what the revealed labels say (persistence, moving average,
    popularity) and the caller's ``extra`` ``[n, C, e]`` (e.g. the node's own class as of its last known
    period), the inputs a head shares across classes (``affinity_head``)."""
    parts = [
        persistence(labels, horizon),
        moving_average(labels, horizon, window),
        popularity(labels, horizon),
    ]
    stacked = np.stack(parts, axis=2).astype(np.float32)
    if extra is None:
        return stacked
    if extra.shape[:2] != stacked.shape[:2]:
        raise ConfigError(f"class_features: extra of shape {extra.shape}, need {stacked.shape[:2]} first")
    return np.concatenate([stacked, np.asarray(extra, np.float32)], axis=2)


CHUNK = 1024  # rows a head scores at once: its class MLP holds rows x classes x hidden values
PER_CLASS = 3  # the live job's features per class (``RevealedShares``)


class RevealedShares:
    """The live job's per-class features of node affinity (as ``class_features`` offline, a label at a
    time): for each node, its last revealed label (persistence) and TGB's moving average of its revealed
    labels (``window``), beside the mean of the labels revealed last (popularity). Labels come in as they
    are revealed (``reveal``, ``jobs.labelled``: once the events pass ``t + horizon``), so ``rows`` at a
    label's scoring reads only labels known then. Nodes are keyed by ``str(id)``: the service finds them
    whether it reads ids as ints or strings."""

    def __init__(self, classes: int, window: int = 7) -> None:
        self.classes, self.window = int(classes), int(window)
        self.row: dict[str, int] = {}
        self.last = np.zeros((0, self.classes))
        self.average = np.zeros((0, self.classes))
        self.popular = np.zeros(self.classes)

    def reveal(self, nodes: np.ndarray, y: np.ndarray) -> None:
        """Take in revealed labels ``y`` ``[n, classes]`` of ``nodes``, in order: a node's first label sets
        both its rows, each later one replaces its last and moves its average by ``1 / window``. A batch
        is taken in by rounds, its nodes' first labels, then their second ones, ..., so each row sees its
        node's labels in order, by the same floating-point steps as one label at a time."""
        y = np.asarray(y, np.float64)
        if not len(y):
            return
        ids = np.asarray(nodes)
        if ids.dtype.kind not in "iu":  # (ints sort faster as ints, and two ints never share a text)
            ids = ids.astype(str)
        ids, first, which = np.unique(ids, return_index=True, return_inverse=True)
        keys = np.array([str(i) for i in ids.tolist()], dtype=object)
        at = np.array([self.row.get(key, -1) for key in keys], np.int64)
        new = np.flatnonzero(at < 0)
        new = new[np.argsort(first[new], kind="stable")]  # new nodes get rows in order of first appearance
        at[new] = len(self.row) + np.arange(len(new))
        self.row.update(zip(keys[new].tolist(), at[new].tolist(), strict=True))
        if len(self.row) > len(self.last):  # (grown by doubling: a new node is not a copy of every row)
            grow = np.zeros((max(len(self.row), 2 * len(self.last)) - len(self.last), self.classes))
            self.last, self.average = np.vstack([self.last, grow]), np.vstack([self.average, grow])
        fresh = np.zeros(len(y), bool)
        fresh[first[new]] = True  # a new node's first label: it starts the average
        by_node = np.argsort(which, kind="stable")
        counts = np.bincount(which)
        turn = np.empty(len(y), np.int64)  # each label's place among its node's labels in the batch
        turn[by_node] = np.arange(len(y)) - np.repeat(np.cumsum(counts) - counts, counts)
        rows = at[which]
        for r in range(int(counts.max())):
            now = np.flatnonzero(turn == r)
            start, move = now[fresh[now]], now[~fresh[now]]
            self.last[rows[now]] = y[now]
            self.average[rows[start]] = y[start]
            self.average[rows[move]] += (y[move] - self.average[rows[move]]) / self.window
        self.popular = y.mean(axis=0)

    def rows(self, nodes) -> np.ndarray:
        """``[n, classes * PER_CLASS]`` float32: per class, the node's persistence, moving average and the
        popularity (a node with no revealed label: zeros, and the popularity)."""
        at = np.array([self.row.get(str(n), -1) for n in nodes], np.int64)
        out = np.zeros((len(at), self.classes, PER_CLASS), np.float32)
        known = at >= 0
        out[known, :, 0] = self.last[at[known]]
        out[known, :, 1] = self.average[at[known]]
        out[:, :, 2] = self.popular
        return out.reshape(len(at), self.classes * PER_CLASS)  # (-1 fails on no rows)

    def state(self) -> dict:
        return {
            "classes": self.classes, "window": self.window, "nodes": list(self.row),
            "last": torch.from_numpy(self.last[: len(self.row)].copy()),
            "average": torch.from_numpy(self.average[: len(self.row)].copy()),
            "popular": torch.from_numpy(self.popular.copy()),
        }  # fmt: skip

    @classmethod
    def from_state(cls, state: dict) -> RevealedShares:
        out = cls(int(state["classes"]), int(state["window"]))
        out.row = {key: i for i, key in enumerate(state["nodes"])}
        out.last, out.average = state["last"].numpy().copy(), state["average"].numpy().copy()
        out.popular = state["popular"].numpy().copy()
        return out


class AffinityHead(nn.Module):
    """A node affinity head in stages (as ``head.StagedHead``): ``linear`` scores every class by one linear
    map of its own features (shared by all classes: a class id means nothing across periods, what the
    node did with it does; it starts at zero, uniform), ``features`` adds an MLP over them, ``joint`` an
    MLP from the node's embedding and stream features to every class (TGB's TGN decoder). Each added
    branch starts at zero. Its input rows are ``[class features flattened (C * f) ; embedding and node
    features (d)]``."""

    def __init__(self, classes: int, per_class: int, node_dim: int, hidden: tuple[int, ...], dropout: float):
        super().__init__()
        self.classes, self.per_class, self.node_dim = classes, per_class, node_dim
        self.features = classes * per_class
        self.linear = nn.Linear(per_class, 1)
        nn.init.zeros_(self.linear.weight)  # uniform at the start: a random sign could rank classes backwards
        self.branches = nn.ModuleDict({"features": mlp(per_class, hidden, 1, dropout)})
        self.stages = ["linear", "features"]
        if node_dim:
            self.branches["joint"] = mlp(node_dim, hidden, classes, dropout)
            self.stages.append("joint")
        self.stage = len(self.stages)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.is_grad_enabled() and len(x) > CHUNK:  # scoring: bounded memory, whatever the rows
            return torch.cat([self(x[lo : lo + CHUNK]) for lo in range(0, len(x), CHUNK)])
        return self.parts(x, upto=self.stage)[-1]

    def parts(self, x: torch.Tensor, *, detach: bool = False, upto: int | None = None) -> list[torch.Tensor]:
        """The first ``upto`` (all) stages' outputs, as ``StagedHead.parts``: each adds its branch to the
        one before, whose gradient ``detach`` stops (the online head, ``tasks.online``)."""
        per = x[:, : self.features].reshape(len(x), self.classes, self.per_class)
        out = [self.linear(per)[..., 0]]
        for name in self.stages[1 : len(self.stages) if upto is None else upto]:
            prev = out[-1].detach() if detach else out[-1]
            if name == "features":
                out.append(prev + self.branches["features"](per)[..., 0])
            else:
                out.append(prev + self.branches["joint"](x[:, self.features :]))
        return out

    def module(self, stage: int) -> nn.Module:
        name = self.stages[stage]
        return self.linear if name == "linear" else self.branches[name]
