"""DyGLib's protocol: the negative sampler's semantics on hand-made streams, the trainer's pair scoring that
its edge negatives need, and a tiny end-to-end run of ``bench quality --protocol dyglib``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from streamgnn.benchmarks import dyglib, quality
from streamgnn.benchmarks.dyglib import NegativeEdgeSampler, random_negatives
from streamgnn.errors import ConfigError
from streamgnn.events import EventBatch
from streamgnn.nn import TGNConfig
from streamgnn.train import OnlineTrainer, TrainConfig

# a hand-made stream: (src, dst, t); sources 0..3, destinations 10..14
STREAM = np.array(
    [
        (0, 10, 0.0), (1, 11, 1.0), (2, 12, 2.0), (0, 13, 3.0),  # before the test part
        (3, 14, 4.0), (1, 12, 5.0),  # validation ends at t=5
        (2, 10, 6.0), (3, 11, 7.0), (0, 10, 8.0), (1, 14, 9.0),  # test
    ]
)  # fmt: skip
SRC, DST, T = STREAM[:, 0].astype(np.int64), STREAM[:, 1].astype(np.int64), STREAM[:, 2]


def pairs(src, dst) -> set:
    return set(zip(src.tolist(), dst.tolist(), strict=True))


def test_random_negatives_keep_the_source_and_draw_destinations_of_the_whole_stream():
    sampler = NegativeEdgeSampler(SRC, DST, T, "random")
    draws = [sampler.sample(SRC[6:8], DST[6:8], 6.0, 7.0) for _ in range(200)]
    for neg_src, _ in draws:
        assert neg_src.tolist() == SRC[6:8].tolist()
    seen = np.concatenate([d for _, d in draws])
    assert set(seen.tolist()) == set(DST.tolist())  # every destination, only destinations
    assert (seen == np.repeat(DST[6:8][None], 200, 0).ravel()).any()  # no collision check: may hit its own
    sampler.reset()  # reseeded: the same negatives again
    assert all((sampler.sample(SRC[6:8], DST[6:8], 6.0, 7.0)[1] == d).all() for _, d in draws[:5])


def test_historical_negatives_are_earlier_edges_not_in_the_batch_window():
    sampler = NegativeEdgeSampler(SRC, DST, T, "historical")
    # batch t in [6, 7]: history is the edges at t <= 6, less those at 6..7; 6 distinct edges remain
    history = pairs(SRC[:6], DST[:6])
    for _ in range(50):
        neg_src, neg_dst = sampler.sample(SRC[6:8], DST[6:8], 6.0, 7.0)
        got = pairs(neg_src, neg_dst)
        assert len(neg_src) == 2 and len(got) == 2  # without replacement
        assert got <= history
    # an edge at the batch's first time (even one outside the batch) is not history; with (0, 10) at t=0
    # and t=8, the batch 8..9 sees (0, 10) in its window and never gets it
    out = set()
    for _ in range(200):
        out |= pairs(*sampler.sample(SRC[8:10], DST[8:10], 8.0, 9.0))
    assert out == pairs(SRC[:8], DST[:8]) - {(0, 10)}


def test_historical_fills_with_random_pairs_that_are_no_positive_of_the_batch():
    sampler = NegativeEdgeSampler(SRC, DST, T, "historical")
    # the batch at t 1..2 has one earlier edge, (0, 10): it and 2 random pairs, none a positive of the batch
    for _ in range(100):
        neg_src, neg_dst = sampler.sample(SRC[1:4], DST[1:4], 1.0, 3.0)
        got = list(zip(neg_src.tolist(), neg_dst.tolist(), strict=True))
        assert len(got) == 3 and (0, 10) in got
        assert not set(got) & pairs(SRC[1:4], DST[1:4])
        assert set(neg_src.tolist()) <= set(SRC.tolist()) and set(neg_dst.tolist()) <= set(DST.tolist())


def test_inductive_negatives_are_edges_first_seen_after_validation():
    sampler = NegativeEdgeSampler(SRC, DST, T, "inductive", last_observed=5.0)
    # batch 8..9: before it, unseen up to t=5 and not at 8..9: (2, 10) and (3, 11) only
    for _ in range(20):
        neg = pairs(*sampler.sample(SRC[8:10], DST[8:10], 8.0, 9.0))
        assert neg == {(2, 10), (3, 11)}
    # batch 6..7 has no such edge yet: all random, none a positive of the batch
    neg_src, neg_dst = sampler.sample(SRC[6:8], DST[6:8], 6.0, 7.0)
    assert not pairs(neg_src, neg_dst) & pairs(SRC[6:8], DST[6:8])
    with pytest.raises(ConfigError, match="last_observed"):
        NegativeEdgeSampler(SRC, DST, T, "inductive")


def test_random_fill_is_uniform_over_pairs_and_skips_the_excluded_ones():
    sampler = NegativeEdgeSampler(SRC, DST, T, "historical")
    exclude = sampler._code_of(SRC[:3], DST[:3])
    codes = np.concatenate([sampler._random_pairs(19, exclude) for _ in range(400)])
    assert set(codes.tolist()) == set(range(20)) - set(exclude.tolist())  # every other pair of 4 x 5
    counts = np.bincount(codes, minlength=20)[np.setdiff1d(np.arange(20), exclude)]
    assert counts.min() > 0.7 * counts.mean()  # roughly uniform (400 draws each)


def test_bad_strategy_and_unsorted_stream_are_clear_errors():
    with pytest.raises(ConfigError, match="strategy"):
        NegativeEdgeSampler(SRC, DST, T, "popular")
    with pytest.raises(ConfigError, match="sorted"):
        NegativeEdgeSampler(SRC, DST, T[::-1], "random")


def test_random_negatives_follow_the_test_batches():
    events = EventBatch.from_columns(src=SRC, dst=DST, t=T, eid=np.arange(len(T)))
    rows = np.arange(4, 10)
    neg = random_negatives(events, rows, batch_size=4)
    sampler = NegativeEdgeSampler(SRC, DST, T, "random")  # batch by batch from one reset sampler
    expect = np.r_[sampler.sample(SRC[4:8], None, 0, 0)[1], sampler.sample(SRC[8:10], None, 0, 0)[1]]
    assert neg.shape == (6, 1) and (neg[:, 0] == expect).all()


def test_score_pairs_scores_as_a_step_does_and_changes_nothing():
    rng = np.random.default_rng(0)
    n = 600
    events = EventBatch.from_columns(
        src=rng.integers(0, 30, n), dst=rng.integers(30, 60, n), t=np.arange(n, dtype=float), eid=np.arange(n)
    )
    trainer = OnlineTrainer(TrainConfig(batch_size=100, model=TGNConfig(pair_features=True), seed=0))
    for batch in events.take(slice(0, 500)).split(100):
        trainer.step(batch)
    batch = events.take(slice(500, 600))
    first = trainer.score_pairs(batch.src, batch.dst, batch.t)
    again = trainer.score_pairs(batch.src, batch.dst, batch.t)
    np.testing.assert_array_equal(first, again)  # nothing moved
    res = trainer.step(batch, train=False, negatives=batch.dst[::-1, None])
    np.testing.assert_allclose(res.pos, first, rtol=1e-5, atol=1e-6)  # a positive's score
    swapped = trainer.score_pairs(batch.dst, batch.src, batch.t)
    assert not np.allclose(swapped, first)  # the source matters


def test_dyglib_s_view_sees_the_batch_s_earlier_events_strictly_before_each_time():
    """DyGLib embeds each event at its own time over the whole graph: from a store that holds the batch, an
    event at "event" query time scores as from a store holding exactly the events before its time."""
    rng = np.random.default_rng(0)
    n = 600
    events = EventBatch.from_columns(
        src=rng.integers(0, 30, n), dst=rng.integers(30, 60, n), t=np.arange(n) // 2 * 1.0, eid=np.arange(n)
    )  # (two events a time: a tie is not "before")
    batch = events.take(slice(500, 600))
    config = TrainConfig(batch_size=100, model=TGNConfig(pair_features=True), seed=0)

    def scores(rows: slice) -> np.ndarray:
        trainer = OnlineTrainer(config)  # the same weights, blank memory: only the store differs
        store = trainer.new_store()
        store.ingest(events.take(rows))
        trainer.reset_stream(store)
        return trainer.score_pairs(batch.src, batch.dst, batch.t, query_time="event")

    held = scores(slice(0, n))
    for i in (1, 40, 99):
        before = scores(slice(0, int(np.searchsorted(events.t, batch.t[i]))))
        np.testing.assert_allclose(before[i], held[i], rtol=1e-5, atol=1e-6)
    assert not np.allclose(
        scores(slice(0, 500))[40:], held[40:], rtol=1e-3
    )  # the batch's earlier events count
    with pytest.raises(ConfigError, match="query_time"):
        OnlineTrainer(config).score_pairs(batch.src, batch.dst, batch.t, query_time="batches")


def test_table_streams_are_selectable_and_scored_against_tpnet():
    args = quality._parser().parse_args(["--protocol", "dyglib", "--streams", "uslegis", "canparl"])
    assert args.streams == ["uslegis", "canparl"]
    assert quality._parser().parse_args([]).streams == list(quality.STREAMS)  # not run by default
    assert quality._parser().parse_args([]).sees_batch is True  # DyGLib's training view by default
    assert quality._parser().parse_args(["--no-sees-batch"]).sees_batch is False
    runs = [
        {"stream": s, "seed": seed, "events": n, "ap_dyglib": ap, "ap_dyglib_historical": ap - 0.1}
        for s, n, aps in (("uslegis", 60_396, (0.70, 0.74)), ("canparl", 74_478, (0.95, 0.97)))
        for seed, ap in enumerate(aps)
    ]
    result = dyglib.summarize(runs)
    assert result["ap_dyglib_uslegis"] == pytest.approx(0.72)
    assert result["tpnet_ap_dyglib_uslegis"] == 0.8058  # TPNet's Table 1, US Legis.
    assert "tpnet_ap_dyglib_canparl" not in result  # no published figure found: no gap counted
    assert result["worst_gap_to_tpnet"] == pytest.approx(0.8058 - 0.72)


def test_a_prefix_with_too_few_times_for_the_split_is_refused():
    # US Legis.'s first 4,000 edges share the first Congress's time: no part after it to test on
    with pytest.raises(ConfigError, match="uslegis: DyGLib's time split .* leaves a part empty"):
        quality.main(["--quick", "--json", "--protocol", "dyglib", "--streams", "uslegis"])


def test_quick_dyglib_run_prints_its_keys(capsys):
    argv = [
        "--quick",
        "--json",
        "--events",
        "1500",
        "--streams",
        "collegemsg",
        "enron",
        "--protocol",
        "dyglib",
    ]
    assert quality.main([*argv, "--negatives", "random", "historical", "inductive"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert "ap_dyglib_collegemsg" not in result  # one name: the published tables' (UCI is CollegeMsg)
    for s in ("uci", "enron"):
        for key in (
            "ap_dyglib",
            "ap_dyglib_batch",
            "auc_dyglib",
            "ap_dyglib_historical",
            "ap_dyglib_inductive",
            "ap_dyglib_edgebank",
        ):
            assert 0 <= result[f"{key}_{s}"] <= 1, key
        assert result[f"tpnet_ap_dyglib_{s}"] > 0.9
    gaps = [
        result[f"tpnet_{k}_{s}"] - result[f"{k}_{s}"]
        for s in ("uci", "enron")
        for k in ("ap_dyglib", "ap_dyglib_historical")
    ]
    assert result["worst_gap_to_tpnet"] == pytest.approx(max(gaps))
    assert result["protocol"] == "dyglib" and result["smoke"] is True


def test_ties_between_batches_are_parted_and_a_batch_keeps_its_own():
    """Where a time spans batches, each later batch's share sits a little later (under the next time), so a
    query reads every earlier batch as DyGLib's memory and TPNet's walks do; a batch's events stay tied."""
    rng = np.random.default_rng(1)
    t = np.sort(rng.integers(0, 6, 1000)).astype(np.float64)
    keys = np.arange(1000) // 64
    out = dyglib.break_ties(t, keys)
    nxt = np.unique(t)[np.minimum(np.searchsorted(np.unique(t), t, "right"), 5)]
    assert np.all(np.diff(out) >= 0) and np.all((out >= t) & ((out < nxt) | (t == 5)))  # under the next
    for key in np.unique(keys):  # a batch's events at one time stay at one time
        rows = keys == key
        for u in np.unique(t[rows]):
            assert len(np.unique(out[rows & (t == u)])) == 1
    later = (t[:-1] == t[1:]) & (keys[:-1] != keys[1:])
    assert later.any() and np.all(out[1:][later] > out[:-1][later])  # another batch: strictly later
    assert np.array_equal(dyglib.break_ties(np.arange(5.0), np.arange(5)), np.arange(5.0))


def test_a_batch_reads_the_earlier_batches_of_its_own_time_and_not_itself():
    """US Legis.-like: 300 events at one time in three batches of 100, scored in DyGLib's view: the third
    batch scores as from a store holding exactly the two batches before it, not as from the events before
    the time (what the store read before the ties were parted), nor with its own batch in."""
    rng = np.random.default_rng(0)
    n = 400
    t = np.r_[np.arange(100.0), np.full(300, 100.0)]
    events = EventBatch.from_columns(
        src=rng.integers(0, 20, n), dst=rng.integers(20, 40, n), t=t, eid=np.arange(n)
    )
    rows = np.arange(100, 400)
    parts = dyglib.ChronologicalSplit(
        train=np.arange(100), held_out=np.zeros(0, np.int64), val=np.zeros(0, np.int64), test=rows,
        val_new=np.zeros(0, np.int64), test_new=np.zeros(0, np.int64),
    )  # fmt: skip
    timed = EventBatch.from_columns(
        src=events.src,
        dst=events.dst,
        t=dyglib.break_ties(t, dyglib.batch_keys(n, parts, 100)),
        eid=events.eid,
    )
    batch = timed.take(slice(300, 400))
    config = TrainConfig(batch_size=100, model=TGNConfig(pair_features=True), seed=0)

    def scores(held: EventBatch) -> np.ndarray:
        trainer = OnlineTrainer(config)  # the same weights, blank memory: only the store differs
        store = trainer.new_store()
        store.ingest(held)
        trainer.reset_stream(store)
        return trainer.score_pairs(batch.src, batch.dst, batch.t, query_time="event")

    view = scores(timed)
    np.testing.assert_allclose(view, scores(timed.take(slice(0, 300))), rtol=1e-5, atol=1e-6)
    assert not np.allclose(view, scores(timed.take(slice(0, 100))), rtol=1e-3)
