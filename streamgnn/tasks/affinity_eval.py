"""Node affinity on one stream, ours beside TGB's baselines: ``evaluate`` for ``affinity.NodeAffinity``.

The same protocol as every task (``evaluate``): labels split chronologically 70/15/15 at the stream's time
quantiles, the link model pretrained on the training period and frozen, each label's embedding taken
before the batch holding its time (``stream.embed_at_labels``), a staged head fitted a stage at a time on
the training labels, each stage's epoch picked by validation NDCG and kept only where it improves
(``protocol.fit_stages``). The head is ``affinity.AffinityHead``: per class, what the node's revealed labels
say about that class (``affinity.class_features``), then the node's embedding and stream features.
Beside it, on the same test rows: persistence and moving average (TGB's), and the head without the
embeddings (an ablation: what the link model adds). Every figure is NDCG@k averaged as TGB's evaluator
averages it: each label time's mean, then the mean over label times.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch

from ..events import EventBatch
from ..train import OnlineTrainer, TrainConfig
from .affinity import AffinityHead, NodeAffinity, class_features, moving_average, persistence
from .features import stream_features
from .labels import Labels, LabelSplit
from .protocol import HeadConfig, HeadResult, fit_stages
from .stream import embed_at_labels, pretrain


@dataclass(frozen=True)
class AffinityResult:
    """Test NDCG@k (TGB's average) of ours, of the same head without embeddings, and of each baseline;
    our head's result (validation figures, stages), the split's sizes and the link pretraining's loss."""

    ndcg: dict[str, float]
    ours: HeadResult
    sizes: dict[str, int]
    link_loss: list[float] = field(default_factory=list)


def evaluate_affinity(
    task: NodeAffinity,
    events: EventBatch,
    labels: Labels,
    config: TrainConfig,
    *,
    horizon: float,
    extra: np.ndarray | None = None,
    epochs: int = 1,
    head: HeadConfig | None = None,
    window: int = 7,
    tau: float = 86400.0,
) -> AffinityResult:
    """Ours and the baselines on ``labels`` (each describing ``[t, t + horizon)``) over the time-ordered
    ``events`` (module docstring); ``extra``: more per-class features ``[n, C, e]`` (``class_features``)."""
    split = LabelSplit.by_time(labels, events.t)
    head = head or HeadConfig(seed=config.seed)
    trainer = OnlineTrainer(dataclasses.replace(config, serve_every=0, checkpoint_every=0))
    losses = pretrain(trainer, events, split.val_time, epochs)
    z = embed_at_labels(trainer, events, labels)[0]
    per_class = class_features(labels, horizon, window, extra)
    node = stream_features(events, labels, tau=tau).x
    ours = _fit(task, per_class, np.concatenate([z, node], axis=1), labels, split, head)
    without = _fit(task, per_class, node, labels, split, head)
    scores = {
        "ours": ours.scores,
        "no_embeddings": without.scores,
        "persistence": persistence(labels, horizon),
        "moving_average": moving_average(labels, horizon, window),
    }
    test = split.test
    figure = f"ndcg{task.k}"  # (``NodeAffinity.metrics``: TGB's mean over label times, as the live job's)
    ndcg = {name: task.metrics(s[test], labels.y[test], labels.t[test])[figure] for name, s in scores.items()}
    sizes = {"train": len(split.train), "val": len(split.val), "test": len(split.test)}
    return AffinityResult(ndcg, ours, sizes, losses)


def _fit(
    task: NodeAffinity, per_class: np.ndarray, node: np.ndarray, labels: Labels, split: LabelSplit, config
) -> HeadResult:
    """``AffinityHead`` over the class features as they are (shares and flags, shared across classes) and
    the node columns standardised by the training rows."""
    node = np.asarray(node, np.float32)
    mean, std = node[split.train].mean(axis=0), node[split.train].std(axis=0)
    node = (node - mean) / np.where(std > 0, std, 1.0)
    n, classes, f = per_class.shape
    inputs = torch.from_numpy(np.concatenate([per_class.reshape(n, classes * f), node], axis=1))
    torch.manual_seed(config.seed)
    model = AffinityHead(classes, f, node.shape[1], config.hidden, config.dropout)
    return fit_stages(task, model, inputs, labels.y, split, config)
