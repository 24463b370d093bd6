"""Node affinity (streamgnn.tasks.affinity, TGB's node property prediction): NDCG@10 against hand-computed
values, the label derivation, TGB's persistence and moving average, that nothing of the period a label
describes reaches what predicts it, and the whole protocol on a stream where persistence is blind."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from streamgnn.errors import ConfigError
from streamgnn.events import EventBatch
from streamgnn.nn import TGNConfig
from streamgnn.tasks import HeadConfig, Labels, embed_at_labels, pretrain, stream_features
from streamgnn.tasks.affinity import (
    NodeAffinity,
    RevealedShares,
    affinity_labels,
    class_features,
    moving_average,
    persistence,
    popularity,
)
from streamgnn.tasks.affinity_eval import evaluate_affinity
from streamgnn.tasks.metrics import ndcg_at_k
from streamgnn.train import OnlineTrainer, TrainConfig

torch.set_num_threads(1)


def events_of(src, dst, t) -> EventBatch:
    return EventBatch.from_columns(src=src, dst=dst, t=np.asarray(t, np.float64), eid=np.arange(len(src)))


def test_ndcg10_against_hand_computed_values():
    # order c0 (0), c1 (0.5), c2 (0.5), c3 (0): DCG = 0.5/log2(3) + 0.5/log2(4); ideal 0.5 + 0.5/log2(3)
    got = ndcg_at_k([[0.5, 0.3, 0.2, 0.0]], [[0.0, 0.5, 0.5, 0.0]], k=10)
    assert got == pytest.approx((0.5 / math.log2(3) + 0.25) / (0.5 + 0.5 / math.log2(3)))
    # k=1: only the first place counts
    assert ndcg_at_k([[0.5, 0.3, 0.2, 0.0]], [[0.0, 0.5, 0.5, 0.0]], k=1) == 0.0
    # three tied candidates, one relevant: it is at each place with chance 1/3
    tied = ndcg_at_k([[0.0, 0.0, 0.0]], [[1.0, 0.0, 0.0]], k=10)
    assert tied == pytest.approx((1 + 1 / math.log2(3) + 0.5) / 3)
    # groups: the mean of each group's mean (TGB's per label time), not of the rows
    rows = ([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    worst = 1 / math.log2(3)
    assert ndcg_at_k(*rows, k=10) == pytest.approx((2 + worst) / 3)
    assert ndcg_at_k(*rows, k=10, groups=[5, 5, 6]) == pytest.approx((1 + worst) / 2)


def test_ties_score_as_the_mean_over_every_order_of_the_tied():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 3, (20, 6)).astype(np.float64)
    relevance = rng.random((20, 6)) * (rng.random((20, 6)) < 0.5)
    relevance[:, 0] += 0.1  # every row has something relevant
    for i in range(len(scores)):
        by_order = []
        for perm in itertools.permutations(range(6)):  # a strictly ordered score per tie-break
            broken = scores[i] + 1e-3 * np.argsort(perm)
            by_order.append(ndcg_at_k(broken[None], relevance[i][None], k=3))
        assert ndcg_at_k(scores[i][None], relevance[i][None], k=3) == pytest.approx(np.mean(by_order))


def test_affinity_labels_share_each_sources_next_period_by_class():
    # period [0, 10): nodes 5, 6 in class 0, node 7 in class 1; period [10, 20): node 5 moved to class 1
    members = [(np.array([5, 6, 7]), np.array([0, 0, 1])), (np.array([5, 6, 7]), np.array([1, 0, 1]))]
    ev = events_of([1, 1, 1, 2, 2, 1, 1], [5, 6, 7, 9, 5, 5, 6], [0, 1, 2, 3, 9.5, 12, 19])
    labels = affinity_labels(ev, np.array([0.0, 10.0, 20.0]), members, classes=2)
    np.testing.assert_array_equal(labels.node, [1, 2, 1])
    np.testing.assert_array_equal(labels.t, [0.0, 0.0, 10.0])
    # node 9 has no class: node 2's one counted event is to 5 (class 0 then)
    np.testing.assert_allclose(labels.y, [[2 / 3, 1 / 3], [1.0, 0.0], [0.5, 0.5]])
    task = NodeAffinity(classes=2)
    assert torch.allclose(task.target(labels.y), torch.tensor(labels.y, dtype=torch.float32))
    with pytest.raises(ConfigError, match="row 1 is not a distribution"):
        task.target(np.array([[0.5, 0.5], [0.5, 0.6]]))
    with pytest.raises(ConfigError, match="period 1 gives a node two classes"):
        affinity_labels(
            ev, np.array([0.0, 10.0, 20.0]), [members[0], (np.array([5, 5]), np.array([0, 1]))], 2
        )
    with pytest.raises(ConfigError, match="class outside 0..1"):
        affinity_labels(ev, np.array([0.0, 10.0, 20.0]), [members[0], (np.array([5]), np.array([2]))], 2)


def test_persistence_and_moving_average_read_only_revealed_labels():
    """Labels describe a period of 10: node 1's label at 0 is revealed at 10, not at 5."""
    y = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [1.0, 0.0], [0.0, 1.0]])
    labels = Labels(np.array([1, 1, 2, 1, 1]), np.array([0.0, 5.0, 10.0, 10.0, 20.0]), y)
    # at 10 node 1 has its label at 0 (revealed at 10), not the one at 5 (revealed at 15); at 20 the label
    # at 10 is revealed too, and it is the last
    np.testing.assert_allclose(persistence(labels, horizon=10.0), [[0, 0], [0, 0], [0, 0], [1, 0], [1, 0]])
    ma = moving_average(labels, horizon=10.0, window=2)
    # at 20: labels at 0, 5 and 10 revealed, in order: [1,0] -> [0.5,0.5] -> [0.75,0.25]
    np.testing.assert_allclose(ma[4], [0.75, 0.25])
    np.testing.assert_allclose(ma[3], [1.0, 0.0])
    # another relation's labels read at these rows' times: node 1 at 12 sees its label at 0 only
    at = Labels(np.array([1, 2]), np.array([12.0, 30.0]), np.zeros(2))
    np.testing.assert_allclose(persistence(labels, horizon=10.0, at=at), [[1, 0], [0.5, 0.5]])
    # everyone's mean at the latest label time revealed: none, none, that at 0, that at 0, that at 10
    pop = popularity(labels, horizon=10.0)
    np.testing.assert_allclose(pop, [[0, 0], [0, 0], [1, 0], [1, 0], [0.75, 0.25]])


def test_a_constructed_stream_gets_its_last_days_label_from_persistence():
    """Each node keeps its targets' class for two days, then moves: persistence is right on the second day
    of each pair, and its forecast for a day is exactly the node's label of the day before."""
    classes, days = 4, 6
    members = [(np.arange(10, 14), np.arange(4))] * days
    src, dst, t = [], [], []
    for day in range(days):
        for node in range(3):
            src += [node] * 3
            dst += [10 + (node + day // 2) % classes] * 3
            t += [day * 10.0 + 1 + node] * 3
    labels = affinity_labels(events_of(src, dst, t), 10.0 * np.arange(days + 1), members, classes)
    forecast = persistence(labels, horizon=10.0)
    later = labels.t >= 10.0
    np.testing.assert_array_equal(forecast[later], labels.y[np.flatnonzero(later) - 3])
    second = (labels.t // 10) % 2 == 1
    assert ndcg_at_k(forecast[second], labels.y[second]) == 1.0
    # on the first day of a pair the true class is one of the three tied at zero, anywhere in places 2-4
    moved = ndcg_at_k(forecast[later & ~second], labels.y[later & ~second])
    assert moved == pytest.approx((1 / math.log2(3) + 1 / 2 + 1 / math.log2(5)) / 3)


def _random_stream(rng, n=600, days=6, nodes=20):
    t = np.sort(rng.uniform(0, 10.0 * days, n))
    return rng.integers(0, nodes, n), rng.integers(0, nodes, n), t


def test_nothing_of_the_described_period_reaches_what_predicts_its_label():
    """Rewiring every event from a day's start on changes the labels at that day's start (they describe
    it), but none of the inputs of any label up to that time: class features, stream features, embeddings."""
    rng = np.random.default_rng(1)
    days, classes = 6, 3
    src, dst, t = _random_stream(rng, days=days)
    members = [(np.arange(20), rng.integers(0, classes, 20)) for _ in range(days)]
    bounds = 10.0 * np.arange(days + 1)
    trainer = OnlineTrainer(
        TrainConfig(model=TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3,
                                    pair_features=False), batch_size=20)
    )  # fmt: skip
    ev = events_of(src, dst, t)
    labels = affinity_labels(ev, bounds, members, classes)
    pretrain(trainer, ev, until=30.0, epochs=1)

    def inputs(events):
        z = embed_at_labels(trainer, events, labels)[0]
        per_class = class_features(affinity_labels(events, bounds, members, classes), horizon=10.0)
        return per_class, stream_features(events, labels).x, z

    base = inputs(ev)
    for cut in (20.0, 40.0):
        moved = events_of(src, np.where(t >= cut, (dst + 7) % 20, dst), t)
        moved_labels = affinity_labels(moved, bounds, members, classes)
        np.testing.assert_array_equal(moved_labels.node, labels.node)  # the same sources act: same rows
        at_cut = labels.t == cut
        assert not np.array_equal(moved_labels.y[at_cut], labels.y[at_cut])
        before = labels.t <= cut
        for old, new in zip(base, inputs(moved), strict=True):
            np.testing.assert_array_equal(new[before], old[before])


def test_the_protocol_beats_persistence_where_persistence_is_blind():
    """Every node acts on one day only, 80% of it towards its own class (a flag the head reads): its
    persistence forecast is all zeros, its head's is its own class; ours and both baselines reported."""
    rng = np.random.default_rng(2)
    days, classes, per_day = 10, 5, 30
    home = rng.integers(0, classes, days * per_day)
    targets = np.arange(1000, 1000 + 5 * classes)
    members = [(targets, np.arange(len(targets)) % classes)] * days
    src, dst, t = [], [], []
    for node in range(days * per_day):
        day = node // per_day
        for _ in range(10):
            cls = home[node] if rng.random() < 0.8 else rng.integers(0, classes)
            src.append(node)
            dst.append(1000 + cls + classes * rng.integers(0, 5))
            t.append(day * 10.0 + rng.uniform(0, 10))
    order = np.argsort(t, kind="stable")
    ev = events_of(np.array(src)[order], np.array(dst)[order], np.array(t)[order])
    labels = affinity_labels(ev, 10.0 * np.arange(days + 1), members, classes)
    own = np.zeros((len(labels), classes, 1), np.float32)
    own[np.arange(len(labels)), home[labels.node], 0] = 1.0
    config = TrainConfig(
        model=TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3, pair_features=False),
        batch_size=50,
    )
    result = evaluate_affinity(
        NodeAffinity(classes), ev, labels, config, horizon=10.0, extra=own, head=HeadConfig(epochs=5)
    )
    assert set(result.ndcg) == {"ours", "no_embeddings", "persistence", "moving_average"}
    assert result.sizes["test"] > 0 and all(0 <= v <= 1 for v in result.ndcg.values())
    assert result.ndcg["ours"] > result.ndcg["persistence"] + 0.2
    assert result.ndcg["persistence"] == result.ndcg["moving_average"]  # both all zeros: nobody recurs


def test_travian_alliances_keep_their_ids_across_days():
    """The bundled community files: each day a player has one alliance id, and most alliances of a day
    carry an id of the day before (matched by members); an id never names two groups on one day."""
    from streamgnn.datasets import load_alliances, load_communities

    days, alliances = load_alliances()
    communities = load_communities()
    assert days == sorted(communities) and len(days) == 30
    for day, (players, ids) in zip(days, alliances, strict=True):
        assert len(np.unique(players)) == len(players)
        assert len(np.unique(ids)) == len(communities[day])  # one id per group that day
    for (_, before), (_, after) in zip(alliances, alliances[1:], strict=False):
        kept = np.isin(np.unique(after), before)
        assert kept.mean() > 0.9


class OneAtATime(RevealedShares):
    """``RevealedShares.reveal`` as it was, one label at a time in Python: what the vectorised one must
    equal, bit for bit."""

    def reveal(self, nodes, y) -> None:
        y = np.asarray(y, np.float64)
        if not len(y):
            return
        room = len(self.row) + len(y)
        if room > len(self.last):
            grow = np.zeros((max(room, 2 * len(self.last)) - len(self.last), self.classes))
            self.last, self.average = np.vstack([self.last, grow]), np.vstack([self.average, grow])
        for node, share in zip(nodes, y, strict=True):
            key = str(node)
            at = self.row.get(key)
            if at is None:
                at = self.row[key] = len(self.row)
                self.last[at] = self.average[at] = share
            else:
                self.last[at] = share
                self.average[at] += (share - self.average[at]) / self.window
        self.popular = y.mean(axis=0)


shares_batches = st.lists(  # batches of (node, one share per class), nodes repeating within and across
    st.lists(st.tuples(st.integers(0, 6), st.lists(st.floats(0, 1), min_size=3, max_size=3)), max_size=12),
    min_size=1, max_size=5,
)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(shares_batches, st.integers(1, 9), st.sampled_from(["int64", "object", "str"]))
def test_revealed_shares_take_in_a_batch_exactly_as_one_label_at_a_time(batches, window, ids):
    """Any batches (a node's labels repeated in one batch, new and known nodes mixed; int64, Python int or
    string ids): every row, the row each node got, and the popularity equal the one-at-a-time loop's, bit
    for bit."""
    fast, slow = RevealedShares(3, window), OneAtATime(3, window)
    for batch in batches:
        nodes = np.array([n for n, _ in batch], np.int64)
        if ids != "int64":
            nodes = nodes.astype(object) if ids == "object" else np.array([f"n{n}" for n in nodes], object)
        y = np.array([s for _, s in batch], np.float64).reshape(len(batch), 3)
        fast.reveal(nodes, y)
        slow.reveal(nodes, y)
        assert fast.row == slow.row
        n = len(slow.row)
        np.testing.assert_array_equal(fast.last[:n], slow.last[:n])
        np.testing.assert_array_equal(fast.average[:n], slow.average[:n])
        np.testing.assert_array_equal(fast.popular, slow.popular)
        np.testing.assert_array_equal(fast.rows(list(slow.row)), slow.rows(list(slow.row)))
