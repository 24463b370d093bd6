"""Labelled tasks (streamgnn.tasks): metrics, heads, the causal stream features, the baselines and the
link model's embeddings at label times, on small hand-made streams."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
import torch

from streamgnn.errors import ConfigError
from streamgnn.events import EventBatch
from streamgnn.nn import TGNConfig
from streamgnn.tasks import (
    REPUTATION,
    EdgeClassification,
    EdgeRegression,
    HeadConfig,
    Labels,
    LabelSplit,
    NodeClassification,
    NodeRegression,
    embed_at_labels,
    evaluate,
    fit_head,
    majority,
    persistence,
    pretrain,
    stream_features,
)
from streamgnn.tasks.metrics import auc_delong, macro_f1, mae, ndcg_at_k, rmse, roc_auc
from streamgnn.train import OnlineTrainer, TrainConfig

torch.set_num_threads(1)


def events_of(src, dst, t, weight=None) -> EventBatch:
    return EventBatch.from_columns(src=src, dst=dst, t=t, eid=np.arange(len(src)), weight=weight)


def test_metrics_on_hand_made_values():
    assert macro_f1([0, 0, 1, 1], [0, 1, 1, 1]) == pytest.approx((2 / 3 + 4 / 5) / 2)
    assert macro_f1([0, 0], [0, 0], classes=3) == pytest.approx(1 / 3)  # absent classes count as 0
    assert mae([1, 2], [2, 4]) == 1.5 and rmse([1, 2], [2, 4]) == pytest.approx(math.sqrt(2.5))
    perfect = ndcg_at_k([[3.0, 2.0, 1.0]], [[1.0, 1.0, 0.0]], k=2)
    worst = ndcg_at_k([[1.0, 2.0, 3.0]], [[1.0, 0.0, 0.0]], k=2)
    assert perfect == 1.0 and worst == 0.0
    assert math.isnan(ndcg_at_k([[1.0, 2.0]], [[0.0, 0.0]]))  # nothing relevant: no figure


def test_classification_refuses_labels_outside_its_classes():
    with pytest.raises(ConfigError, match="not a class in 0..2"):
        NodeClassification(classes=3).target(np.array([0, 3]))
    with pytest.raises(ConfigError, match="classes must be an int >= 2"):
        EdgeClassification(classes=1)
    with pytest.raises(ConfigError, match="NaN"):
        EdgeRegression().target(np.array([1.0, np.nan]))
    with pytest.raises(ConfigError, match="reads an edge's two ends"):
        EdgeClassification().inputs(np.zeros((2, 3)), None)


def _split(n: int) -> LabelSplit:
    labels = Labels(np.zeros(n, np.int64), np.arange(n, dtype=np.float64), np.zeros(n, np.int64))
    return LabelSplit.by_time(labels)


@pytest.mark.parametrize("classes", [2, 4])
def test_a_head_learns_classes_from_its_inputs(classes):
    rng = np.random.default_rng(0)
    n = 1200
    y = rng.integers(0, classes, n)
    x = rng.normal(0, 1, (n, 6)).astype(np.float32)
    x[:, 0] += 3 * y  # the class shows in one input, through noise
    result = fit_head(
        NodeClassification(classes=classes), x, y, _split(n), HeadConfig(epochs=20, batch_size=64)
    )
    if classes == 2:
        assert result.test["auc"] > 0.9  # chance 0.5
    else:
        assert result.test["macro_f1"] > 0.7 and result.test["accuracy"] > 0.7  # chance ~0.25
    # the linear stage (``protocol.LINEAR``: at most 30 epochs), then the feature MLP's (at most 20)
    assert list(result.stages) == ["linear", "features"] and 0 <= result.best_epoch <= 20
    assert result.epochs <= 30 + 20


def test_a_regression_head_beats_the_mean():
    rng = np.random.default_rng(1)
    n = 1000
    x = rng.normal(0, 1, (n, 2)).astype(np.float32)
    y = 2.0 * x[:, 0] + rng.normal(0, 0.1, n)
    split = _split(n)
    mean_only = rmse(np.full(len(split.test), y[split.train].mean()), y[split.test])
    for task in (EdgeRegression(), NodeRegression()):
        result = fit_head(task, x, y, split, HeadConfig(epochs=30, batch_size=64))
        assert result.test["rmse"] < 0.5 * mean_only and result.test["mae"] < result.test["rmse"] + 1e-9


def test_split_is_chronological_at_the_streams_time_quantiles():
    t = np.repeat(np.arange(10.0), 10)  # ties at every boundary
    labels = Labels(np.zeros(100, np.int64), t, np.zeros(100, np.int64))
    split = LabelSplit.by_time(labels, stream_t=np.arange(100.0) / 10)
    assert t[split.train].max() < t[split.val].min() and t[split.val].max() < t[split.test].min()
    np.testing.assert_array_equal(np.sort(np.r_[split.train, split.val, split.test]), np.arange(100))
    with pytest.raises(ConfigError, match="sorted by time"):
        Labels(np.zeros(2, np.int64), np.array([1.0, 0.0]), np.zeros(2, np.int64))


def test_stream_features_count_only_events_strictly_before_each_label():
    # 1 rates 2 (+5) at t=0, 3 rates 2 (-1) at t=1, then 1 rates 2 (+3) at t=2 and 4 rates 2 (+9) at t=2
    ev = events_of([1, 3, 1, 4], [2, 2, 2, 2], [0.0, 1.0, 2.0, 2.0], np.array([5, -1, 3, 9], np.float32))
    labels = Labels.of_events(ev, (ev.weight > 0).astype(np.int64), on_edges=True)
    f = stream_features(ev, labels, tau=10.0)
    rep = f.select(REPUTATION)
    np.testing.assert_allclose(rep[0], [0, 1, 0, 1])  # nothing before t=0
    np.testing.assert_allclose(rep[1], [0, 1, 5, 0])  # 3 gave nothing; 2 received +5
    np.testing.assert_allclose(rep[2], [5, 0, 2, 0])  # 1 gave +5; 2 received (+5 - 1) / 2
    np.testing.assert_allclose(rep[3], [0, 1, 2, 0])  # the other t=2 rating (+3) is not before t=2
    degree = f.select(("dst_degree", "src_degree", "pair_count"))
    np.testing.assert_allclose(degree[3], [math.log1p(2), 0, 0])
    np.testing.assert_allclose(degree[2], [math.log1p(2), math.log1p(1), math.log1p(1)])
    recency = f.select(("dst_recency", "dst_activity"))[2]
    np.testing.assert_allclose(recency, [math.log1p(1.0), math.log1p(math.exp(-0.2) + math.exp(-0.1))])


def test_a_label_never_leaks_into_its_features():
    """Whatever happens at or after a label's time (its own edge included) leaves its features as they
    were; a change strictly before it does show."""
    rng = np.random.default_rng(2)
    n = 400
    t = np.sort(rng.integers(0, 100, n)).astype(np.float64)  # many ties
    src, dst = rng.integers(0, 15, n), rng.integers(0, 15, n)
    w = rng.choice([-1.0, 1.0], n).astype(np.float32)
    ev = events_of(src, dst, t, w)
    labels = Labels.of_events(ev, (w > 0).astype(np.int64), on_edges=True)
    base = stream_features(ev, labels).x
    for cut in (37.0, 60.0):
        later = t >= cut
        w2, dst2 = w.copy(), dst.copy()
        w2[later], dst2[later] = -w2[later], (dst2[later] + 1) % 15
        changed = stream_features(events_of(src, dst2, t, w2), labels).x
        assert np.array_equal(changed[t <= cut], base[t <= cut])  # label rows at <= cut see < cut only
        assert not np.array_equal(changed[t > cut], base[t > cut])


def test_majority_and_persistence_baselines():
    # node 7: labels 0, 1 then 1; node 8: 0 at t=2 twice (same time: neither sees the other)
    labels = Labels(
        np.array([7, 8, 8, 7, 9, 7]), np.array([0.0, 2.0, 2.0, 3.0, 3.0, 5.0]), np.array([0, 0, 0, 1, 1, 1])
    )
    split = LabelSplit.by_time(labels)
    task = NodeClassification()
    prior = labels.y[split.train].mean()
    np.testing.assert_allclose(majority(task, labels, split), prior)
    np.testing.assert_allclose(persistence(task, labels, split), [prior, prior, prior, 0, prior, 1])
    multi = persistence(NodeClassification(classes=3), labels, split)
    assert multi.shape == (6, 3) and multi[5].tolist() == [0, 1, 0]


def _small_config(**kw) -> TrainConfig:
    model = TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3, pair_features=False)
    return TrainConfig(model=model, batch_size=20, **kw)


def _pretrained_on_random_labels(seed: int, on_edges: bool):
    """200 random events over 20 nodes at times 0..59, a label of class 0 on each (its edge's or its
    source's), and a small trainer pretrained on the events before time 40."""
    rng = np.random.default_rng(seed)
    n = 200
    t = np.sort(rng.integers(0, 60, n)).astype(np.float64)
    src, dst = rng.integers(0, 12, n), rng.integers(12, 20, n)
    ev = events_of(src, dst, t)
    labels = Labels.of_events(ev, np.zeros(n, np.int64), on_edges=on_edges)
    trainer = OnlineTrainer(_small_config())
    pretrain(trainer, ev, until=40.0, epochs=1)
    return t, src, dst, ev, labels, trainer


def test_embeddings_at_label_times_hold_nothing_of_the_label_or_later():
    t, src, dst, ev, labels, trainer = _pretrained_on_random_labels(seed=3, on_edges=True)
    n = len(t)
    z_src, z_dst = embed_at_labels(trainer, ev, labels)
    assert z_src.shape == (n, 8) and z_dst.shape == (n, 8) and np.isfinite(z_src).all()
    cut = 30.0
    later = t >= cut
    moved = events_of(src, np.where(later, (dst + 3) % 8 + 12, dst), t)  # rewire everything from cut on
    z_src2, z_dst2 = embed_at_labels(trainer, moved, labels)
    first = t <= cut
    np.testing.assert_array_equal(z_src2[first], z_src[first])
    np.testing.assert_array_equal(z_dst2[first], z_dst[first])
    assert not np.array_equal(z_src2[~first], z_src[~first])


def test_a_smaller_replay_batch_sees_more_of_the_stream_and_still_nothing_of_the_label_or_later():
    """Replayed in batches of 5 instead of the trainer's 20, a label's embedding holds events of its own
    20-batch that come before it (so it differs), yet still none at or after its time."""
    t, src, dst, ev, labels, trainer = _pretrained_on_random_labels(seed=5, on_edges=False)
    n = len(t)
    z20, _ = embed_at_labels(trainer, ev, labels)
    z20_again, _ = embed_at_labels(trainer, ev, labels, batch_size=20)
    np.testing.assert_array_equal(z20_again, z20)  # the trainer's size is the default
    z5, none = embed_at_labels(trainer, ev, labels, batch_size=5)
    assert none is None and z5.shape == (n, 8)
    assert not np.array_equal(z5, z20)
    cut = 30.0
    later = t >= cut
    moved = events_of(src, np.where(later, (dst + 3) % 8 + 12, dst), t)  # rewire everything from cut on
    z5_moved, _ = embed_at_labels(trainer, moved, labels, batch_size=5)
    first = t <= cut
    np.testing.assert_array_equal(z5_moved[first], z5[first])
    assert not np.array_equal(z5_moved[~first], z5[~first])
    with pytest.raises(ConfigError, match="batch_size"):
        embed_at_labels(trainer, ev, labels, batch_size=0)


def test_a_node_labels_other_end_is_embedded_as_an_edge_labels_dst_and_refused_where_there_is_none():
    """``other_end``: a node label read from an edge event embeds that event's destination beside its
    node, the same rows an edge label of the same events reads; refused by name where there is none."""
    t, src, dst, ev, labels, trainer = _pretrained_on_random_labels(seed=8, on_edges=False)
    assert labels.other_end.tolist() == dst.tolist() and not labels.on_edges
    z_node, z_other = embed_at_labels(trainer, ev, labels, other_end=True)
    edges = Labels.of_events(ev, labels.y, on_edges=True)
    z_src, z_dst = embed_at_labels(trainer, ev, edges)
    np.testing.assert_array_equal(z_node, z_src)
    np.testing.assert_array_equal(z_other, z_dst)
    assert labels.take(np.arange(5, 9)).other_end.tolist() == dst[5:9].tolist()
    with pytest.raises(ConfigError, match="edge label's other end"):
        embed_at_labels(trainer, ev, edges, other_end=True)
    sent = Labels(labels.node, labels.t, labels.y)  # node labels sent on their own: no event, no other end
    with pytest.raises(ConfigError, match="carry no other end"):
        embed_at_labels(trainer, ev, sent, other_end=True)
    with pytest.raises(ConfigError, match="other_end is a node label's"):
        Labels(labels.node, labels.t, labels.y, dst, other_end=dst)


def test_evaluate_reads_the_other_end_where_the_labels_carry_one_and_leaves_the_baselines(monkeypatch):
    """By default ours' head reads a node label's event's other end beside the node (``other_end=None``:
    wherever ``Labels.other_end`` is set); ``other_end=False`` leaves it out; the baselines never read it."""
    evaluate_module = importlib.import_module("streamgnn.tasks.evaluate")  # the package names the function

    rng = np.random.default_rng(9)
    n = 600
    src, dst = rng.integers(0, 30, n), rng.integers(30, 50, n)
    ev = events_of(src, dst, np.arange(n, dtype=np.float64))
    labels = Labels.of_events(ev, (dst % 2).astype(np.int64), on_edges=False)
    widths: list[int] = []

    def fit_head_spy(task, x, *args, **kwargs):
        widths.append(x.shape[1])
        return fit_head(task, x, *args, **kwargs)

    monkeypatch.setattr(evaluate_module, "fit_head", fit_head_spy)
    head = HeadConfig(epochs=2)
    plain = evaluate(NodeClassification(), ev, labels, _small_config(), head=head, other_end=False)
    paired = evaluate(NodeClassification(), ev, labels, _small_config(), head=head)
    features = 4  # the node's stream features (NODE)
    assert widths == [8 + features, 8, features, 16 + features, 16, features]
    assert paired.baselines == plain.baselines and paired.baselines_val == plain.baselines_val
    with pytest.raises(ConfigError, match="edge label's other end"):
        evaluate(EdgeClassification(), ev, Labels.of_events(ev, labels.y, on_edges=True), _small_config(),
                 head=head, other_end=True)  # fmt: skip


def test_delong_auc_and_covariance_match_their_pairwise_definition():
    """DeLong's structural components by brute force over every (positive, negative) pair, ties half,
    against the midrank form; a classifier's difference with itself has no variance."""
    rng = np.random.default_rng(6)
    y = np.r_[np.ones(9, bool), np.zeros(40, bool)]
    a = np.round(rng.normal(size=49) + y, 1)  # rounded: ties within and across the classes
    b = np.round(a + rng.normal(size=49), 1)
    auc, cov = auc_delong([a, b], y)
    assert auc == pytest.approx([roc_auc(a, y), roc_auc(b, y)])
    comps = []
    for s in (a, b):
        psi = (s[y][:, None] > s[~y][None, :]) + 0.5 * (s[y][:, None] == s[~y][None, :])
        comps.append((psi.mean(axis=1), psi.mean(axis=0)))
    v01, v10 = np.stack([c[0] for c in comps]), np.stack([c[1] for c in comps])
    expect = np.cov(v01) / 9 + np.cov(v10) / 40
    np.testing.assert_allclose(cov, expect, rtol=1e-10)
    _, same = auc_delong([a, a], y)
    assert same[0, 0] + same[1, 1] - 2 * same[0, 1] == pytest.approx(0.0, abs=1e-15)
    assert all(math.isnan(v) for v in auc_delong([a], np.zeros(49, bool))[0])


def test_evaluate_scores_ours_and_every_baseline_on_the_same_split():
    """Ratings whose sign is the ratee's (half the nodes are 'bad'): reputation sees it, and so must the
    figures; every baseline reports the same metrics as ours."""
    rng = np.random.default_rng(4)
    n = 1500
    src, dst = rng.integers(0, 30, n), rng.integers(30, 50, n)
    sign = np.where(dst % 2 == 0, 1.0, -1.0)
    flip = rng.random(n) < 0.1
    w = (np.where(flip, -sign, sign) * rng.integers(1, 10, n)).astype(np.float32)
    ev = events_of(src, dst, np.arange(n, dtype=np.float64), w)
    labels = Labels.of_events(ev, (w > 0).astype(np.int64), on_edges=True)
    result = evaluate(EdgeClassification(), ev, labels, _small_config(), head=HeadConfig(epochs=5))
    assert set(result.baselines) == {"majority", "persistence", "features", "reputation"}
    assert result.baselines["majority"]["auc"] == 0.5
    assert result.baselines["reputation"]["auc"] > 0.8  # chance 0.5; the flips cap it near 0.9
    assert 0.0 <= result.ours.test["auc"] <= 1.0 and 0.0 <= result.embeddings_only.test["auc"] <= 1.0
    assert result.sizes["test"] == pytest.approx(0.15 * n, rel=0.05)
    assert set(result.test_se) == {"ours", *result.baselines} and result.test_se["majority"] == 0.0
    assert 0.0 < result.diff_se["reputation"] < 0.5


def test_evaluate_picks_the_replay_batch_by_validation():
    rng = np.random.default_rng(7)
    n = 1200
    src, dst = rng.integers(0, 30, n), rng.integers(30, 50, n)
    ev = events_of(src, dst, np.arange(n, dtype=np.float64))
    labels = Labels.of_events(ev, (dst % 2).astype(np.int64), on_edges=False)
    result = evaluate(
        NodeClassification(), ev, labels, _small_config(), head=HeadConfig(epochs=3),
        replay_batches=(20, 5, 20),
    )  # fmt: skip
    assert list(result.replay) == [20, 5]  # each size once, in the order asked
    best = max(result.replay[s][0].val["auc"] for s in result.replay)
    assert result.ours.val["auc"] == best and result.ours is result.replay[result.replay_batch][0]
    assert result.embeddings_only is result.replay[result.replay_batch][1]


def test_label_records_admit_the_good_and_dead_letter_every_bad_one():
    from streamgnn.tasks.admit import decode_labels

    known_nodes = {1, 2, 3, "ann"}
    lines = [
        '{"node": 1, "t": 5.0, "y": 1}',  # good
        '{"node": 2, "t": 1.5, "y": 0}',  # good, earlier: comes back first
        '{"node": 3, "t": 2, "y": 2}',  # class 2 of a binary task
        '{"node": 9, "t": 3, "y": 1}',  # a node no event has
        '{"node": 1, "t": "soon", "y": 1}',  # time not a number
        '{"node": 1, "t": 0.5, "y": 1}',  # late (before `after`)
        '{"node": 1, "t": 6, "y": 1, "dst": 2}',  # a node label with a dst
        "{not json",
        '{"node": 1, "t": 7, "y": 1, "colour": "red"}',
        '{"node": "ann", "t": 8, "y": 0.5}',  # not a class
        '{"node": "ann", "t": 9, "y": 1}',  # good, a string id
        '{"node": 1, "t": 10}',
        '{"node": 99999999999999999999, "t": 11, "y": 1}',  # beyond int64
    ]
    labels, letters = decode_labels(
        "\n".join(lines), NodeClassification(), known=lambda ids: np.array([i in known_nodes for i in ids]),
        after=1.0,
    )  # fmt: skip
    assert labels.node.tolist() == [2, 1, "ann"] and labels.t.tolist() == [1.5, 5.0, 9.0]
    assert labels.y.tolist() == [0, 1, 1]
    bad_lines = {int(d.where.rsplit(" ", 1)[1]) for d in letters}
    assert bad_lines == {3, 4, 5, 6, 7, 8, 9, 10, 12, 13}  # every bad one, nothing else
    assert len(labels) + len(letters) == len(lines)  # nothing lost
    reasons = {int(d.where.rsplit(" ", 1)[1]): d.reason for d in letters}
    assert "not a class in 0..1" in reasons[3] and "unknown node 9" in reasons[4]
    assert "late label" in reasons[6] and "unknown field 'colour'" in reasons[9]
    assert all(d.payload == lines[d.index] for d in letters)  # each names its line, replayable

    edges, letters = decode_labels(
        '{"node": 1, "t": 1, "y": -2.5, "dst": 2}\n{"node": 1, "t": 2, "y": 1}', EdgeRegression()
    )
    assert edges.y.tolist() == [-2.5] and edges.dst.tolist() == [2]
    assert len(letters) == 1 and "needs 'dst'" in letters[0].reason
