"""The staged task head (streamgnn.tasks.head): offline it never trails the logistic regression on the stream
features on validation, online it keeps up with an online logistic regression, and both add what only the
embeddings carry. Synthetic labels: stream features with a linear signal, "embeddings" that are noise or
carry a signal no linear map of anything can read (an XOR)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from streamgnn.errors import ConfigError
from streamgnn.tasks import (
    EdgeClassification,
    HeadConfig,
    Labels,
    LabelSplit,
    NodeClassification,
    NodeRegression,
    TaskConfig,
    fit_head,
    logistic_regression,
)
from streamgnn.tasks.head import StagedHead
from streamgnn.tasks.metrics import roc_auc
from streamgnn.tasks.online import OnlineHead
from streamgnn.tasks.protocol import LINEAR, _Data, _fit_stage, fit_linear

torch.set_num_threads(1)
FEATURES = 4


def synthetic(n: int, seed: int, *, rate: float, xor: bool, emb: int = 40):
    """``[embeddings ; features]`` and binary labels at about ``rate``: the features carry a linear signal;
    with ``xor``, the sign agreement of two embedding columns carries a stronger one."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, emb))
    f = rng.normal(size=(n, FEATURES))
    logit = 1.5 * f[:, 0] - f[:, 1] + (3.0 * np.sign(z[:, 0] * z[:, 1]) if xor else 0.0)
    logit += np.quantile(-logit, 1 - rate)  # about ``rate`` of them positive
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    return np.concatenate([z, f], axis=1).astype(np.float32), y


def _labels(y: np.ndarray) -> tuple[Labels, LabelSplit]:
    n = len(y)
    labels = Labels(np.arange(n), np.arange(n, dtype=np.float64), y)
    return labels, LabelSplit.by_time(labels)


@pytest.mark.parametrize("seed", [0, 1])
def test_offline_the_head_starts_from_the_logistic_regression_and_never_trails_it_on_validation(seed):
    x, y = synthetic(3000, seed, rate=0.1, xor=False)  # the embeddings are noise
    labels, split = _labels(y)
    task = NodeClassification()
    lr = logistic_regression(task, x[:, -FEATURES:], labels, split, seed)
    # the baseline's loss (classes weighing the same; node classification's own is the plain one)
    ours = fit_head(task, x, y, split, HeadConfig(epochs=20, seed=seed, balanced=True), features=FEATURES)
    assert list(ours.stages) == ["linear", "features", "joint"]
    assert ours.stages["linear"] == lr.val["auc"]  # its first stage is the baseline's model, fitted alike
    assert ours.val["auc"] >= lr.val["auc"]  # a later stage is kept only where it improves validation
    assert ours.test["auc"] > lr.test["auc"] - 0.03  # 40 noise columns beside 4 informative cost ~nothing


def test_offline_the_joint_stage_adds_what_only_the_embeddings_carry():
    x, y = synthetic(3000, 2, rate=0.3, xor=True, emb=8)
    labels, split = _labels(y)
    task = NodeClassification()
    lr = logistic_regression(task, x[:, -FEATURES:], labels, split)
    ours = fit_head(task, x, y, split, HeadConfig(epochs=30), features=FEATURES)
    assert ours.stages["joint"] > ours.stages["features"]
    assert ours.test["auc"] > lr.test["auc"] + 0.08  # ~0.14 here


def _prequential(head: OnlineHead, x: np.ndarray, y: np.ndarray, batch: int = 100) -> float:
    """Each batch scored before it is learned; AUC over the second half of the stream."""
    t = np.arange(len(y), dtype=np.float64)
    scores = np.concatenate([
        head.observe(x[i : i + batch], y[i : i + batch], t[i : i + batch], learn=True)
        for i in range(0, len(y), batch)
    ])  # fmt: skip
    late = slice(len(y) // 2, None)
    return roc_auc(scores[late], y[late])


@pytest.mark.parametrize("xor", [False, True])
def test_online_the_head_keeps_up_with_an_online_logistic_regression(xor):
    x, y = synthetic(10000, 3, rate=0.05, xor=xor, emb=8 if xor else 40)  # a rare class
    config = TaskConfig(kind="node_classification", labels_file="x")
    linear = OnlineHead(TaskConfig(kind="node_classification", labels_file="x", hidden=()), FEATURES)
    auc_lr = _prequential(linear, x[:, -FEATURES:], y)
    head = OnlineHead(config, x.shape[1], features=FEATURES)
    auc = _prequential(head, x, y)
    assert auc_lr > 0.75  # the linear signal is learned online, the rare class replayed
    if xor:
        assert auc > auc_lr + 0.02 and head.head.stage == 3  # ~0.05; answered by the stage over everything
    else:
        assert auc > auc_lr - 0.03


def test_the_stages_start_at_zero_and_a_head_without_features_or_embeddings_has_fewer():
    task = EdgeClassification()
    head = StagedHead(task, 10, 4, (8,), 0.0)
    x = torch.randn(5, 10)
    parts = head.parts(x)
    assert head.stages == ["linear", "features", "joint"]
    torch.testing.assert_close(parts[1], parts[0])  # a branch adds nothing until it learns
    torch.testing.assert_close(parts[2], parts[0])
    assert StagedHead(task, 6, 0, (8,), 0.0).stages == ["linear", "joint"]
    assert StagedHead(task, 4, 4, (), 0.0).stages == ["linear"]  # hidden=(): a logistic regression
    assert torch.all(StagedHead(task, 6, 0, (8,), 0.0).parts(torch.randn(3, 6))[0] == 0)
    with pytest.raises(ConfigError, match="cannot have 7 stream features"):
        StagedHead(task, 6, 7, (8,), 0.0)


def test_balanced_weights_give_every_class_the_same_total():
    y = np.array([0] * 97 + [1] * 3)
    w = NodeClassification().balance(y)
    assert w[y == 0].sum() == pytest.approx(w[y == 1].sum()) and w.mean() == pytest.approx(1.0)
    w3 = NodeClassification(classes=3).balance(np.array([0, 0, 0, 2]))  # a class absent: no weight for it
    assert w3[:3].sum() == pytest.approx(w3[3]) and w3.mean() == pytest.approx(1.0)
    assert NodeRegression().balance(np.array([0.5, 2.0])) is None


def test_the_loss_is_the_tasks_protocol_and_a_head_config_overrides_it():
    """Offline, node classification's loss is the plain one (DyGLib's) and the rating signs' the balanced
    one (``Task.balanced``); ``HeadConfig.balanced`` overrides either; the baselines' regression stays
    balanced whatever the task says."""
    x, y = synthetic(1500, 5, rate=0.05, xor=False, emb=4)
    labels, split = _labels(y)
    scores = {}
    for task in (NodeClassification(), EdgeClassification()):
        for balanced in (None, True, False):
            config = HeadConfig(epochs=2, balanced=balanced)
            scores[task.balanced, balanced] = fit_head(task, x, y, split, config, features=FEATURES).scores
    np.testing.assert_array_equal(scores[False, None], scores[False, False])  # node: the plain loss
    np.testing.assert_array_equal(scores[True, None], scores[True, True])  # edge signs: balanced
    np.testing.assert_array_equal(scores[False, True], scores[True, True])  # an override is an override
    # the plain loss predicts the classes near their rate (~0.88 positive here), the balanced one nearer an
    # even share; so does the baselines' regression, whatever the task's loss
    off = {b: abs(scores[False, b].mean() - y[split.train].mean()) for b in (False, True)}
    lr = logistic_regression(NodeClassification(), x[:, -FEATURES:], labels, split)
    assert off[False] + 0.05 < min(off[True], abs(lr.scores.mean() - y[split.train].mean()))
    with pytest.raises(ConfigError, match="balanced"):
        HeadConfig(balanced="yes")


def test_a_stage_s_loss_is_the_config_it_is_trained_under():
    """The linear stage is trained with ``LINEAR``'s settings under the head's loss: the loss is read from
    the config a stage is given (one place), so the same stage under a plain and a balanced config learns
    the classes near their rate and nearer an even share respectively."""
    x, y = synthetic(1500, 5, rate=0.05, xor=False, emb=4)
    _, split = _labels(y)
    task = NodeClassification()
    inputs = torch.from_numpy((x - x.mean(axis=0)) / x.std(axis=0))
    mean = {}
    for balanced in (False, True):
        torch.manual_seed(0)
        head = StagedHead(task, x.shape[1], FEATURES, (), 0.0)
        head.stage = 1
        config = HeadConfig(**{**LINEAR.__dict__, "epochs": 2, "balanced": balanced})
        _fit_stage(head, 0, _Data(task, inputs, y, split), config, -np.inf, [])
        with torch.no_grad():
            mean[balanced] = task.predict(head(inputs)).mean()
    assert abs(mean[False] - y[split.train].mean()) + 0.05 < abs(mean[True] - y[split.train].mean())


def test_a_linear_head_over_every_input_is_kept_where_it_wins_validation_and_shrinks_with_its_penalty():
    x, y = synthetic(2000, 4, rate=0.1, xor=False)
    x[:, 0] += 0.7 * (2 * y - 1)  # one embedding column carries a linear signal of its own
    labels, split = _labels(y)
    task = NodeClassification()
    staged = fit_head(task, x, y, split, HeadConfig(epochs=5), features=FEATURES)
    both = fit_head(task, x, y, split, HeadConfig(epochs=5, penalties=(1e-3, 1e2)), features=FEATURES)
    linear = {p: both.stages[f"linear_all_{p:g}"] for p in (1e-3, 1e2)}
    assert both.val["auc"] == max(staged.val["auc"], *linear.values())  # the best of them on validation
    assert both.stages["joint"] == staged.stages["joint"]  # the staged head fitted as without penalties
    inputs = torch.from_numpy((x - x[split.train].mean(0)) / x[split.train].std(0))
    small, large = (fit_linear(task, inputs, y, split, p) for p in (1e-3, 1e2))
    assert np.std(large.scores) < np.std(small.scores) / 5  # a large penalty pulls every weight toward 0
    assert small.test["auc"] > 0.9  # the signal of the embedding column and the features, read at once
    with pytest.raises(ConfigError, match="penalties"):
        HeadConfig(penalties=(-1.0,))
