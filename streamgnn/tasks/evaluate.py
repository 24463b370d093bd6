"""One task on one stream, ours beside its baselines: the whole evaluation protocol in one call.

Chronological 70/15/15 split of the labels at the stream's time quantiles; the link model pretrained on
the training period's events (``stream.pretrain``); its embeddings at each label's time
(``stream.embed_at_labels``) and the label's causal stream features (``features``) through the task's
staged head (``head.StagedHead``, ``protocol.fit_head``): a logistic regression on the stream features,
then an MLP over them, then one over everything, embeddings included, each stage fitted on what the
earlier ones leave and kept only where it improves validation. A memory-based embedding cannot see how
long ago a node last acted (``TGNConfig.pair_endpoints``), and what a node did recently is what a label at
this moment is most about; the stages make what the model adds an addition to the features' figures, not a
trade. The same head over the embeddings alone, and over the stream features alone, is reported beside
it: what each input adds. Beside them, on the same rows: the majority class, persistence, and logistic
regressions on causal stream features (all of them, ``features``; and for ratings the rater's and ratee's
past means alone, ``reputation``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from ..events import EventBatch
from ..train import OnlineTrainer, TrainConfig
from . import baselines as base
from .features import REPUTATION, stream_features
from .joint import JointHead
from .labels import Labels, LabelSplit
from .metrics import auc_delong
from .protocol import HeadConfig, HeadResult, fit_head
from .stream import embed_at_labels, pretrain
from .task import Classification, Task


@dataclass(frozen=True)
class TaskResult:
    """Our head's result (over the embeddings and the stream features), the same head's over the
    embeddings alone and over the stream features alone (what each input adds), each baseline's test
    (and validation) figures, the split's sizes, and the link pretraining's loss per epoch.
    ``replay``: ours and the embeddings-alone head at each replay batch size tried (``embed_at_labels``),
    ``replay_batch`` the one ``ours`` is (the best validation figure). ``test_se``: for binary labels, the
    standard error of each test AUC (``ours`` and each baseline's), and ``diff_se`` that of ours minus
    each baseline on the same rows (``metrics.auc_delong``)."""

    ours: HeadResult
    embeddings_only: HeadResult
    features_only: HeadResult
    baselines: dict[str, dict[str, float]]
    baselines_val: dict[str, dict[str, float]]
    sizes: dict[str, int]
    link_loss: list[float] = field(default_factory=list)
    replay: dict[int, tuple[HeadResult, HeadResult]] = field(default_factory=dict)
    replay_batch: int = 0
    test_se: dict[str, float] = field(default_factory=dict)
    diff_se: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "test": self.ours.test, "val": self.ours.val, "head_epochs": self.ours.epochs,
            "test_embeddings_only": self.embeddings_only.test,
            "test_features_only": self.features_only.test,
            "head_best_epoch": self.ours.best_epoch, "baselines": self.baselines,
            "baselines_val": self.baselines_val, "sizes": self.sizes, "link_loss": self.link_loss,
            "replay_batch": self.replay_batch, "test_se": self.test_se, "diff_se": self.diff_se,
        }  # fmt: skip


def evaluate(
    task: Task,
    events: EventBatch,
    labels: Labels,
    config: TrainConfig,
    *,
    epochs: int = 1,
    head: HeadConfig | None = None,
    tau: float = 86400.0,
    joint_weight: float = 0.0,
    replay_batches: tuple[int, ...] = (),
    other_end: bool | None = None,
) -> TaskResult:
    """Ours and the baselines on ``labels`` over the time-ordered stream ``events`` (module docstring);
    ``epochs`` of link pretraining, jointly with the task's loss on the training labels at
    ``joint_weight`` (``joint``; 0: link prediction alone); ``tau``: the stream features' decay time;
    ``replay_batches``: the replay batch sizes the labels are embedded at (default: the training's), ours
    the one whose head scores best on validation (never on test); ``other_end``: ours' head (and the
    embeddings-alone one) reads a node label's event's other end's embedding beside the node's
    (``Labels.other_end``; offline only), the stream features and so the baselines as they are; None (the
    default): wherever the labels carry one (on JODIE Wikipedia the edited page beside the editor: higher
    on validation with node classification's loss on every seed, benchmarks/RESULTS.md)."""
    if other_end is None:
        other_end = labels.other_end is not None
    split = LabelSplit.by_time(labels, events.t)
    head = head or HeadConfig(seed=config.seed)
    trainer = OnlineTrainer(dataclasses.replace(config, serve_every=0, checkpoint_every=0))
    joint = JointHead(task, trainer.link_model, joint_weight, config.seed) if joint_weight else None
    losses = pretrain(trainer, events, split.val_time, epochs, joint, labels)
    feats = stream_features(events, labels, tau=tau)
    width = feats.x.shape[1]
    replay = {}
    for size in dict.fromkeys(replay_batches or (config.batch_size,)):
        z_node, z_second = embed_at_labels(trainer, events, labels, batch_size=size, other_end=other_end)
        z = np.concatenate([z_node, z_second], axis=1) if other_end else task.inputs(z_node, z_second)
        ours = fit_head(task, np.concatenate([z, feats.x], axis=1), labels.y, split, head, features=width)
        replay[size] = (ours, fit_head(task, z, labels.y, split, head, features=0))
    chosen = max(replay, key=lambda size: task.selection(replay[size][0].val))  # the first on a tie
    ours, embeddings_only = replay[chosen]
    features_only = fit_head(task, feats.x, labels.y, split, head)

    scores = {
        "majority": base.majority(task, labels, split),
        "persistence": base.persistence(task, labels, split),
        "features": base.logistic_regression(task, feats.x, labels, split, head.seed).scores,
    }
    if REPUTATION[0] in feats.names:
        rep = base.logistic_regression(task, feats.select(REPUTATION), labels, split, head.seed)
        scores["reputation"] = rep.scores
    y = labels.y
    test = {name: task.metrics(s[split.test], y[split.test]) for name, s in scores.items()}
    val = {name: task.metrics(s[split.val], y[split.val]) for name, s in scores.items()}
    sizes = {"train": len(split.train), "val": len(split.val), "test": len(split.test)}
    test_se, diff_se = {}, {}
    if isinstance(task, Classification) and task.binary:
        for part, rows in (("train", split.train), ("val", split.val), ("test", split.test)):
            sizes[f"{part}_positive"] = int(np.sum(y[rows] == 1))
        test_se, diff_se = _standard_errors(ours.scores, scores, y, split.test)
    return TaskResult(
        ours, embeddings_only, features_only, test, val, sizes, losses, replay, chosen, test_se, diff_se
    )


def _standard_errors(
    ours: np.ndarray, baselines: dict[str, np.ndarray], y: np.ndarray, rows: np.ndarray
) -> tuple[dict[str, float], dict[str, float]]:
    """The test AUCs' standard errors (``ours`` and each baseline's) and those of ours minus each
    baseline on the same rows, by DeLong's covariance."""
    names = ["ours", *baselines]
    stacked = np.stack([ours[rows], *(s[rows] for s in baselines.values())])
    _, cov = auc_delong(stacked, y[rows] == 1)
    var = np.diag(cov)
    test_se = {name: float(np.sqrt(max(v, 0.0))) for name, v in zip(names, var, strict=True)}
    diff = {name: var[0] + var[i] - 2 * cov[0, i] for i, name in enumerate(names) if i}
    return test_se, {name: float(np.sqrt(max(v, 0.0))) for name, v in diff.items()}
