"""DyGLib's training negatives (``train_negative_pool="train_part"``): uniform over the training part's
destinations, known in advance, those the stream has not reached yet as blank nodes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from streamgnn.errors import ConfigError
from streamgnn.events import EventBatch
from streamgnn.nn import TGNConfig
from streamgnn.store import TemporalGraphStore
from streamgnn.train import ChronologicalSplit, TrainConfig, fit_offline
from streamgnn.train.negatives import TRAIN, StreamNegatives

torch.set_num_threads(1)


def negatives(seed: int = 0) -> tuple[StreamNegatives, TemporalGraphStore]:
    """A store that has seen destinations 10, 20, 30, 40, and a pool of the training part's 20, 40, 50,
    60: 10 and 30 are seen but not in the part, 50 and 60 in the part but not reached yet."""
    store = TemporalGraphStore()
    store.ingest(
        EventBatch.from_columns(src=[1, 2, 3, 4], dst=[10, 20, 30, 40], t=[0.0, 1.0, 2.0, 3.0], eid=range(4))
    )
    pool = StreamNegatives(seed=seed, pool="train_part")
    pool.rebuild(store)
    pool.use_train_part(np.array([60, 20, 50, 40, 20]))  # a destination twice counts once
    return pool, store


def draw(pool: StreamNegatives, store: TemporalGraphStore, step: int = 3) -> np.ndarray:
    src = store.node_index(np.array([1] * 4000))
    dst = store.node_index(np.array([10] * 4000))
    return pool.draw(src, dst, num=1, strategy="random", step=step, purpose=TRAIN)[:, 0]


def test_train_part_draws_only_the_training_part_s_destinations_uniformly():
    pool, store = negatives()
    drawn = draw(pool, store)
    known = store.external_ids(drawn[drawn >= 0])
    assert set(known.tolist()) == {20, 40}  # never the seen 10 or 30 (not in the part)
    shares = [np.mean(known == 20) * len(known) / len(drawn), np.mean(known == 40) * len(known) / len(drawn)]
    assert all(0.2 < s < 0.3 for s in shares)  # each of the 4 distinct ids a quarter (20 listed twice)
    assert 0.45 < np.mean(drawn < 0) < 0.55  # 50 and 60: not reached yet, blank nodes
    np.testing.assert_array_equal(drawn, draw(pool, store))  # keyed by (seed, step): the same again
    assert not np.array_equal(drawn, draw(pool, store, step=4))
    assert not np.array_equal(drawn, draw(*negatives(seed=1)))


def test_train_part_needs_the_part_and_random_draws_and_an_unknown_pool_is_refused():
    pool = StreamNegatives(seed=0, pool="train_part")
    pool.rebuild(TemporalGraphStore())
    with pytest.raises(ConfigError, match="online run"):  # only an offline fit has a training part
        pool.draw(np.array([0]), np.array([0]), num=1, strategy="random", step=0, purpose=TRAIN)
    with pytest.raises(ConfigError, match="train_negatives='random'"):
        TrainConfig(train_negative_pool="train_part", train_negatives="historical")
    with pytest.raises(ConfigError, match="train_negative_pool.*train_parts"):
        TrainConfig(train_negative_pool="train_parts")
    with pytest.raises(ConfigError, match="negative pool must be one of"):
        StreamNegatives(seed=0, pool="train_parts")


def test_fit_offline_gives_the_pool_its_split_s_training_destinations():
    rng = np.random.default_rng(0)
    n = 400
    dst = np.where(np.arange(n) < 280, rng.integers(100, 110, n), rng.integers(100, 130, n))  # later: more
    events = EventBatch.from_columns(
        src=rng.integers(0, 20, n), dst=dst, t=np.arange(n, dtype=float), eid=range(n)
    )
    split = ChronologicalSplit.make(events)
    model = TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3)
    config = TrainConfig(model=model, batch_size=100, eval_negatives=2, train_negative_pool="train_part")
    seen = []
    fit_offline(
        events, config, split=split, score_val=False, attach=lambda trainer: seen.append(trainer) or {}
    )
    part = seen[0].negatives.train_part
    np.testing.assert_array_equal(part, np.unique(events.dst[split.train]))
    assert len(part) < len(np.unique(events.dst))  # not every destination of the stream


def test_sees_batch_trains_from_a_store_holding_the_part_each_event_at_its_own_time():
    """``fit_offline(sees_batch=True)``: DyGLib's training view (every training step from a store that holds
    the whole training part, at each event's time); by default each step from the state before its batch."""
    rng = np.random.default_rng(1)
    n = 400
    events = EventBatch.from_columns(
        src=rng.integers(0, 20, n), dst=rng.integers(20, 40, n), t=np.arange(n, dtype=float), eid=range(n)
    )
    split = ChronologicalSplit.make(events)
    config = TrainConfig(
        model=TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3), batch_size=100
    )

    def training_steps(sees_batch: bool) -> list[tuple]:
        steps = []

        def watch(trainer) -> dict:
            step = trainer.step

            def recorded(batch, **flags):
                if flags.get("train"):
                    steps.append((trainer.store.num_edges, flags.get("ingest"), flags.get("query_time")))
                return step(batch, **flags)

            trainer.step = recorded
            return {}

        fit_offline(events, config, split=split, score_val=False, sees_batch=sees_batch, attach=watch)
        return steps

    held = len(split.train)
    assert training_steps(True) == [(held, False, "event")] * 3  # the part: three batches of 100
    assert [edges for edges, _, _ in training_steps(False)] == [0, 100, 200]


@pytest.mark.parametrize("sees_batch", [True, False])
def test_historical_training_negatives_are_pairs_of_earlier_batches_also_in_the_view(sees_batch):
    """The view's store holds the whole training part from an epoch's start; a historical training negative
    must still be a pair of an earlier batch (DyGLib's would be drawn from the training data seen so far),
    never a destination its source meets later in the part. Each source meets a fresh destination per
    batch, so a later one is told apart by its id."""
    sources, batches = 10, 5
    src = np.tile(np.arange(sources), batches)
    k = np.repeat(np.arange(batches), sources)
    events = EventBatch.from_columns(
        src=src, dst=100 + 10 * k + src, t=np.arange(len(src), dtype=float), eid=range(len(src))
    )
    split = ChronologicalSplit.make(events, val=0.1, test=0.1, new_node_fraction=0.0, by_time=False)
    model = TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3)
    config = TrainConfig(
        model=model,
        batch_size=sources,
        train_negatives="historical",
        train_negative_fraction=1.0,
        train_negative_pool="seen",  # (not seen_blank: each batch's destinations are new, all would blank)
    )
    drawn = []  # (batch index, source, negative), external ids

    def watch(trainer) -> dict:
        draw = trainer.negatives.draw

        def recorded(src, dst, *, purpose, **kw):
            out = draw(src, dst, purpose=purpose, **kw)
            if purpose == TRAIN:
                ext = trainer.store.external_ids
                drawn.extend(zip([kw["step"]] * len(src), ext(src), ext(out[:, 0]), strict=True))
            return out

        trainer.negatives.draw = recorded
        return {}

    fit_offline(events, config, split=split, score_val=False, sees_batch=sees_batch, attach=watch)
    assert len(split.train) == 40 and {1, 2, 3} <= {step for step, _, _ in drawn}
    for step, s, neg in drawn:  # after the first batch (no history: random) one of the source's before
        assert step == 0 or neg in {100 + 10 * j + s for j in range(step)}, (step, s, neg)
