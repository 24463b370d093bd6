"""Keeping up with a source (``FollowConfig``, ``train.driver.Budget``): every event updates the state;
learning and the online evaluation run on every event or on a budget that follows the source's lag."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from streamgnn.errors import ConfigError
from streamgnn.events import EventBatch
from streamgnn.nn import TGNConfig
from streamgnn.sources import IterableSource
from streamgnn.train import FollowConfig, OnlineTrainer, TrainConfig
from streamgnn.train.driver import Budget
from streamgnn.train.sampled import EvalSample, ap_estimate, mean_estimate

torch.set_num_threads(1)


def stream(n: int, users: int = 60, items: int = 30, seed: int = 0) -> EventBatch:
    rng = np.random.default_rng(seed)
    popularity = 1.0 / np.arange(1, items + 1) ** 1.5
    src = rng.integers(0, users, n)
    dst = rng.choice(items, n, p=popularity / popularity.sum()) + users
    t = np.cumsum(rng.exponential(1.0, n))
    return EventBatch.from_columns(src=src, dst=dst, t=t, eid=np.arange(n))


class Behind(IterableSource):
    """A stream held in memory that says how many of its events are still to come, as a live source that far
    behind does (``lag``; a replay's backlog is not a delay: the trainer reads no lag from a replay)."""

    replay = False

    def __init__(self, events: EventBatch, chunk: int, behind: bool = True) -> None:
        super().__init__([events[i : i + chunk] for i in range(0, len(events), chunk)])
        self.events, self.behind = events, behind

    def lag(self) -> int:
        return len(self.events) - self.positions()["memory"] if self.behind else 0


def config(**follow) -> TrainConfig:
    model = TGNConfig(memory_dim=16, time_dim=8, embedding_dim=16, num_neighbors=5, dropout=0.0)
    return TrainConfig(
        model=model, batch_size=100, eval_negatives=20, window_events=500,
        follow=FollowConfig(**{"mode": "budget", "min_eval_rows": 20, **follow}),
    )  # fmt: skip


def sizes_of(trainer: OnlineTrainer) -> list[int]:
    """The size of every step the trainer takes from now on (the real step, recorded)."""
    sizes, step = [], trainer.step

    def recorded(batch, **kw):
        sizes.append(len(batch))
        return step(batch, **kw)

    trainer.step = recorded
    return sizes


def last_times(events: EventBatch, nodes: np.ndarray) -> np.ndarray:
    """Each node's latest event time (as an endpoint)."""
    last = {}
    for s, d, t in zip(events.src.tolist(), events.dst.tolist(), events.t.tolist(), strict=True):
        last[s] = last[d] = t
    return np.array([last[int(n)] for n in nodes])


def test_behind_its_source_it_learns_a_share_but_updates_state_for_every_event():
    events = stream(6000)
    # a lag that must drain at once, no floor: no time to learn
    trainer = OnlineTrainer(config(drain_s=1e-3, min_learn_fraction=0.0))
    sizes = sizes_of(trainer)
    result = trainer.fit(Behind(events, 1000), progress=False)
    follow = result.follow
    assert result.events == follow.events == len(events)
    # the state path saw every event: the store, each node's memory, the served rows
    store = trainer.store
    assert store.num_edges == len(events) and result.learned == len(events)
    ext = np.unique(np.concatenate([events.src, events.dst]))
    memory, last = trainer.model.memory.get(torch.from_numpy(store.node_index(ext)))
    np.testing.assert_array_equal(last.numpy(), last_times(events, ext))
    assert len(trainer.table) == store.num_nodes
    # learning on a share: the first batch (before any cost was measured), then what the budget allows
    assert 0 < follow.learned_events < len(events) / 2
    assert follow.learned_fraction == follow.learned_events / len(events)
    # behind, batches grew past batch_size (up to the cap)
    assert max(sizes) > 100 and max(sizes) <= 1000  # up to max_batch_size
    # a sample of about eval_fraction (1%) of the events was scored, every figure with its size and interval
    # whole batches (of 100 to 1,000 events) once 20 are due, from a first credit of 20: about 1%
    assert (
        20 <= follow.evaluated_events <= 20 + 60 + 1000 and result.metrics.events == follow.evaluated_events
    )
    assert follow.evaluated_events < len(events) / 2
    for name in ("model", "edgebank", "edgebank_tw"):
        for fig in follow.figures[name].values():
            assert fig["n"] == follow.evaluated_events
            assert fig["low"] <= fig["value"] <= fig["high"]
    assert follow.max_lag == len(events) - 1000


def test_caught_up_it_learns_on_everything_in_small_batches():
    events = stream(3000)
    trainer = OnlineTrainer(config())
    sizes = sizes_of(trainer)
    result = trainer.fit(Behind(events, 1000, behind=False), progress=False)
    assert result.follow.learned_fraction == 1.0
    assert set(sizes) == {100}  # batch_size
    assert result.follow.max_lag == 0


def test_every_event_mode_is_test_then_train_on_every_event():
    events = stream(2000)
    cfg = config(mode="every_event")
    result = OnlineTrainer(cfg).fit(Behind(events, 1000), progress=False)
    assert result.follow.learned_fraction == 1.0
    assert result.follow.evaluated_events == result.metrics.events > 1800  # all but the first batch
    assert result.follow.figures["model"]["ap"]["n"] == result.follow.evaluated_events


def test_a_fixed_number_per_window():
    events = stream(3000)
    result = OnlineTrainer(config(eval_per_window=50)).fit(Behind(events, 1000), progress=False)
    assert abs(result.follow.evaluated_events - (20 + 3000 * 50 / 500)) <= 100  # whole batches of 100


def test_the_sample_is_uniform_and_its_intervals_cover():
    rng = np.random.default_rng(0)
    sample = EvalSample(capacity=1000, seed=1)
    for i in range(100):  # 100 steps of 100 events; the value rises with the step
        v = np.full(100, float(i))
        sample.add({"a": (v, v, v), "b": (-v, -v, -v)})
    kept = sample._rows["a"][:, 0]
    assert sample.seen == 10_000 and len(kept) == 1000
    assert abs(kept.mean() - 49.5) < 3  # every step equally represented, not the first or last ones
    np.testing.assert_array_equal(sample._rows["b"], -sample._rows["a"])  # the same events for every name
    # an interval covers the value it estimates (here: a known positive rate)
    x = (rng.random(5000) < 0.3).astype(float)
    est = mean_estimate(x)
    assert est.low < 0.3 < est.high and est.n == 5000
    pos, neg = rng.normal(1, 1, 2000), rng.normal(0, 1, 2000)
    ap = ap_estimate(pos, neg)
    assert ap.low < ap.value < ap.high and ap.high - ap.low < 0.1
    assert math.isnan(ap_estimate(pos[:1], neg[:1]).low)


@pytest.mark.parametrize(
    "bad",
    [
        dict(mode="sometimes"),
        dict(eval_fraction=0),
        dict(max_batch_size=0),
        dict(headroom=1.5),
        dict(min_learn_fraction=1.5),
        dict(min_learn_fraction=-0.1),
    ],
)
def test_bad_settings_are_refused(bad):
    with pytest.raises(ConfigError):
        FollowConfig(**bad)


def test_the_jobs_gauges_say_what_was_learned_and_sampled():
    import zlib

    from streamgnn.jobs import TrainJob

    events = stream(1500)
    job = TrainJob(config(), source=list(events.split(500)), log_every_s=0)
    result = job.run(progress=False)
    value = job.metrics.registry.get_sample_value
    assert value("streamgnn_learned_fraction") == result.follow.learned_fraction == 1.0  # no lag: all
    assert value("streamgnn_evaluated_events") == result.follow.evaluated_events > 0
    assert value("streamgnn_batch_size") == 100
    # the replicas' fingerprint, computed when scraped: the parameters as they are now
    params = torch.cat([p.detach().reshape(-1) for p in job.trainer.model.parameters()])
    assert value("streamgnn_replica_fingerprint") == zlib.crc32(params.numpy().tobytes())


def test_behind_it_learns_and_scores_in_parts_of_batch_size_and_updates_state_in_grown_batches():
    events = stream(6000)
    steps = []
    for drain_s in (1e-3, 1e9):  # no time to learn; time to learn everything
        trainer = OnlineTrainer(config(drain_s=drain_s, eval_fraction=0.2, min_learn_fraction=0.0))
        step = trainer.step

        def recorded(batch, step=step, drain_s=drain_s, **kw):
            steps.append((len(batch), kw["train"], kw["score"], drain_s))
            return step(batch, **kw)

        trainer.step = recorded
        result = trainer.fit(Behind(events, 1000), progress=False)
        assert result.events == len(events) and trainer.store.num_edges == len(events)
    learning = [s for s in steps if s[1] or s[2]]
    assert learning and all(size <= 100 for size, *_ in learning)  # batch_size, as a job that keeps up
    assert any(size > 100 for size, learn, score, _ in steps if not (learn or score))  # state: grown
    everything = [s for s in steps if s[3] == 1e9]
    assert all(learn for _, learn, _, _ in everything) and sum(s[0] for s in everything) == len(events)


def test_an_item_stepped_in_parts_is_served_once_after_its_last_part():
    events = stream(3000)
    trainer = OnlineTrainer(config(drain_s=1e9, max_batch_size=500))  # behind, time to learn everything
    step, steps, item = trainer.step, [], []

    def recorded(batch, **kw):
        result = step(batch, **kw)
        steps.append((len(batch), kw["serve"], trainer.serving.pending))
        item.append(batch)
        if kw["serve"]:  # the item's refresh serves the nodes of all its parts, as of its last event
            nodes = np.concatenate([np.concatenate([b.src, b.dst]) for b in item])
            assert trainer.table.updated_at(nodes).min() > max(b.t.max() for b in item)
            item.clear()
        return result

    trainer.step = recorded
    result = trainer.fit(Behind(events, 500), progress=False)
    assert result.events == len(events) and all(size <= 100 for size, _, _ in steps)  # learned in parts
    served = sum(serve for _, serve, _ in steps)
    assert 1 < served < len(steps)  # grown items, each served once
    assert all(pending != serve for _, serve, pending in steps)  # a part's nodes wait for the item's end
    assert trainer.serving.latency.events == len(events)  # every part's events were recorded as served


def test_a_share_is_learned_from_every_part_in_as_many_steps_as_the_item_has_parts(monkeypatch):
    """Behind, with half the events affordable: each grown item learns from half its events, in as many
    optimizer steps as it holds parts of batch_size (smaller ones), then steps the rest as state only."""
    monkeypatch.setattr(Budget, "_fraction", lambda self, n: 0.5)
    events = stream(4000)
    trainer = OnlineTrainer(config(eval_fraction=1e-9, min_eval_rows=1))  # (the first item evaluated only)
    steps = []
    step = trainer.step

    def recorded(batch, **kw):
        steps.append((len(batch), kw["train"]))
        return step(batch, **kw)

    trainer.step = recorded
    result = trainer.fit(Behind(events, 1000), progress=False)
    follow = result.follow
    assert abs(follow.learned_fraction - 0.5) < 1e-3 and trainer.store.num_edges == len(events)
    learned = [size for size, train in steps if train]
    assert sum(learned) == follow.learned_events
    # steps of at most half of batch_size: as many as the items hold parts of batch_size (the first item,
    # before anything was measured, is batch_size; later ones grow with the lag), then the rest state-only
    assert max(learned) <= 50 and len(learned) >= len(events) / 100 - 1
    assert max(size for size, train in steps if not train) > 100


def test_behind_with_no_time_to_learn_it_still_learns_its_floor_and_says_what_that_cost():
    """A lag that must drain at once affords no learning; the floor learns its share of every item anyway,
    and the report counts the events learned past the budget and the seconds they took (the lag it
    costs), beside a run without a floor on the same events."""
    events = stream(6000)
    runs = {}
    for floor in (0.0, 0.3):
        trainer = OnlineTrainer(config(drain_s=1e-3, min_learn_fraction=floor))
        runs[floor] = trainer.fit(Behind(events, 1000), progress=False).follow
        assert trainer.store.num_edges == len(events)  # the state path saw every event either way
    free, floored = runs[0.0], runs[0.3]
    assert free.floor_events == 0 and free.floor_s == 0 and "floor" not in free.text()
    # the first items learn whole (no learning step measured yet), every later one the floor's share
    assert floored.learned_events >= 0.3 * len(events) - 1
    assert floored.learned_events > free.learned_events
    assert floored.floor_events > 0.1 * len(events) and floored.floor_s > 0
    assert floored.min_learn_fraction == 0.3 and "the floor of 30% learned" in floored.text()
    assert floored.as_dict()["floor_s"] == floored.floor_s


def test_a_few_slow_events_do_not_lock_the_share_at_everything():
    """A state-only step of a few events is dear per event (a step's fixed costs); as an average of per-event
    figures it made the state path look dearer than learning, the share went to 1, and with no state-only
    part stepped again the estimate was never corrected: far behind, the job learned from every event for
    good. A step's cost is a line now (its few events' time goes to the fixed part), and a state line at or
    above learning's is not believed."""
    trainer = OnlineTrainer(config(min_learn_fraction=0.0, drain_s=1e9))
    budget = Budget(trainer, lag=lambda: 50_000)
    for size in (50, 100, 80):  # learning: 10 ms + 200 us per event
        budget._observe_cost((True, False), 0.01 + size * 200e-6, size)
    budget._observe_cost((False, False), 1000 * 20e-6, 1000)  # state: 20 us per event
    budget._observe_cost((False, False), 0.02, 2)  # then an item's last 2 events in a 20 ms step
    assert budget._line((True, False)) == pytest.approx((0.01, 200e-6))
    assert budget._line((False, False))[1] < 20e-6  # the 20 ms went to the step, not to each event
    budget._observe_lag(50_000)
    budget.rate = 5_000.0  # (measured over LAG_RATE_S in a run)
    assert 0.0 <= budget._fraction(1000) < 1.0
    # a state line above learning's (stalled steps) counts as a quarter of it, not as "learn everything"
    for size in (100, 200):
        budget._observe_cost((False, False), size * 1e-3, size)
    assert budget._fraction(1000) < 1.0
    # caught up it learns on everything
    budget._observe_lag(0)
    assert budget._fraction(1000) == 1.0


def test_the_share_planned_does_not_depend_on_the_share_its_costs_were_measured_at():
    """A learning step costs a fixed part plus a part per event (12.5 ms + 0.11 ms per event on the 2-core
    host). Measured at a fifth of each item (steps of 50), a cost per event was 1.7x what it was at three
    fifths (steps of 120), so a plan that had measured a low share afforded a lower one still. The line
    measured at either share plans the same share, the most whose item fits in the time allowed."""
    shares = []
    for sizes in ((50, 50, 50, 40), (120, 120, 120, 100)):
        budget = Budget(OnlineTrainer(config(min_learn_fraction=0.0, drain_s=1e9)), lag=lambda: 50_000)
        for size in sizes:
            budget._observe_cost((True, False), 0.0125 + size * 0.11e-3, size)
        for size in (800, 500):
            budget._observe_cost((False, False), 0.004 + size * 30e-6, size)
        budget._observe_lag(50_000)
        budget.rate = 5_000.0  # 160 us per event, of which 0.8 may be spent: 0.16 s for an item of 1,000
        share = budget._fraction(1000)
        allowed = 0.8 / (5_000 + 50_000 / 1e9) * 1000
        learned = round(share * 1000)
        assert budget._item_cost(1000, learned) <= allowed < budget._item_cost(1000, learned + 1)
        shares.append(share)
    assert 0.0 < shares[0] < 1.0 and shares[0] == pytest.approx(shares[1], abs=2e-3)


def test_behind_the_evaluated_events_spread_over_the_stream_in_small_items():
    """Far behind, items grow to max_batch_size: an evaluated one, scored whole, spent the credit of a
    thousand events at once, so a run of a few dozen items drew its sample from its first items. An item due
    for evaluation is cut to batch_size: the sample is spread over the stream at about the rate asked."""
    events = stream(10_000)
    trainer = OnlineTrainer(config(eval_fraction=0.1, min_learn_fraction=0.0, drain_s=1e-3))  # state only
    scored = []  # (first event, events) of each evaluated step (a part of batch_size)

    def on_step(part, result, arrival) -> None:
        if len(result.pos):
            scored.append((int(part.eid[0]), len(part)))

    result = trainer.fit(Behind(events, 2000), progress=False, on_step=on_step)
    follow = result.follow
    assert follow.max_lag >= 8 * 1000  # behind: items grew to the cap (1,000)
    # about 10% of the events, from every part of the stream (each fifth holds some; whole grown items
    # evaluated, the sample came from the first fifth and the last, where the lag drained)
    assert 0.05 * len(events) <= follow.evaluated_events <= 0.15 * len(events)
    assert {first * 5 // len(events) for first, _ in scored} == set(range(5))


def test_a_cost_line_from_steps_of_one_size_or_a_noisy_fit_stays_positive():
    """``cost_line``: the least-squares line of seconds over events; steps of one size put everything on
    events (no line to fit), and a fit with a negative part falls back to a positive one."""
    from streamgnn.train.driver import cost_line

    def sums(points) -> np.ndarray:
        return sum(np.array([1.0, n, s, n * n, n * s]) for n, s in points)

    assert cost_line(sums([(50, 0.018), (120, 0.0257)])) == pytest.approx((0.0125, 0.11e-3))
    assert cost_line(sums([(100, 0.02), (100, 0.02)])) == pytest.approx((0.0, 0.0002))
    assert cost_line(sums([(10, 0.05), (100, 0.01)])) == pytest.approx((0.03, 0.0))  # smaller took longer
    assert cost_line(sums([(10, 0.0001), (100, 0.02)])) == pytest.approx((0.0, 0.0201 / 110))  # fixed < 0
