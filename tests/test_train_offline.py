"""The TGN offline protocol: chronological split with withheld nodes, and transductive/inductive scores."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from streamgnn.errors import ConfigError
from streamgnn.events import EventBatch
from streamgnn.nn import TGNConfig
from streamgnn.train import ChronologicalSplit, TrainConfig, fit_offline

torch.set_num_threads(1)


def stream(n: int, users: int = 40, items: int = 20, seed: int = 0) -> EventBatch:
    rng = np.random.default_rng(seed)
    popularity = 1.0 / np.arange(1, items + 1) ** 2
    src = rng.integers(0, users, n)
    dst = rng.choice(items, n, p=popularity / popularity.sum()) + users
    t = np.floor(np.cumsum(rng.exponential(1.0, n)))  # whole seconds: ties at the split points
    return EventBatch.from_columns(src=src, dst=dst, t=t, eid=np.arange(n))


def test_split_is_chronological_and_withholds_new_nodes_from_training():
    events = stream(3000)
    split = ChronologicalSplit.make(events, new_node_fraction=0.1, seed=3)
    parts = [split.train, split.held_out, split.val, split.test]
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(len(events)))
    t = events.t
    assert t[np.r_[split.train, split.held_out]].max() < t[split.val].min()
    assert t[split.val].max() < t[split.test].min()  # ties never straddle a boundary
    assert len(split.test) == pytest.approx(0.15 * len(events), rel=0.05)
    trained = set(events.src[split.train]) | set(events.dst[split.train])
    withheld = (set(events.src[split.held_out]) | set(events.dst[split.held_out])) - trained
    assert len(withheld) == 6  # 10% of the 60 nodes
    pairs = zip(events.src.tolist(), events.dst.tolist(), strict=True)
    touches = np.array([s not in trained or d not in trained for s, d in pairs])
    for part, new in ((split.val, split.val_new), (split.test, split.test_new)):
        np.testing.assert_array_equal(new, part[touches[part]])
    assert len(split.test_new) > 0

    by_row = ChronologicalSplit.make(events, new_node_fraction=0.0, by_time=False)
    assert (len(by_row.train), len(by_row.val), len(by_row.held_out)) == (2100, 450, 0)


def test_fit_offline_learns_and_scores_transductive_and_inductive_parts():
    events = stream(2000)
    model = TGNConfig(memory_dim=16, time_dim=8, embedding_dim=16, num_neighbors=5, dropout=0.1)
    cfg = TrainConfig(model=model, batch_size=100, lr=3e-3, eval_negatives=10)
    result = fit_offline(events, cfg, epochs=2)
    assert len(result.train_events_per_s) == 2 and min(result.train_events_per_s) > 0
    assert result.train_loss[1] < result.train_loss[0]
    assert result.test.ap > 0.8 and result.test.mrr > 0.45  # chance: 0.5 and about 0.27
    assert result.test_inductive.events > 0 and 0.0 < result.test_inductive.ap <= 1.0
    assert result.val.events == len(ChronologicalSplit.make(events).val)


def test_given_test_negatives_are_the_ones_ranked():
    events = stream(800)
    split = ChronologicalSplit.make(events, new_node_fraction=0.0)
    model = TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3, dropout=0.0)
    cfg = TrainConfig(model=model, batch_size=100, eval_negatives=5)
    # Candidates identical to the true destination tie with it: AUC exactly 1/2, rank 1 + 3/2 among 3.
    same = np.repeat(events.dst[split.test][:, None], 3, axis=1)
    result = fit_offline(events, cfg, split=split, test_negatives=same, score_val=False)
    assert result.test.auc == pytest.approx(0.5)
    assert result.test.mrr == pytest.approx(1 / 2.5)
    # with a mask, only the real candidates are ranked against: one tie, rank 1 + 1/2
    valid = np.zeros(same.shape, bool)
    valid[:, 0] = True
    masked = fit_offline(events, cfg, split=split, test_negatives=(same, valid), score_val=False)
    assert masked.test.mrr == pytest.approx(1 / 1.5) and masked.test.auc == pytest.approx(0.5)
    with pytest.raises(ConfigError, match="rows"):
        fit_offline(events, cfg, split=split, test_negatives=same[1:], score_val=False)
    with pytest.raises(ConfigError, match="mask"):
        fit_offline(events, cfg, split=split, test_negatives=(same, valid[:, :2]), score_val=False)


def test_no_eval_negatives_means_no_mrr_offline_too():
    events = stream(600)
    model = TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3, dropout=0.0)
    result = fit_offline(events, TrainConfig(model=model, batch_size=100, eval_negatives=0))
    assert np.isnan(result.test.mrr) and np.isnan(result.val.mrr)
    assert 0.0 < result.test.ap <= 1.0
