"""The learning-quality benchmark: a tiny run of its real path prints the promised keys, means and gaps."""

from __future__ import annotations

import json

import numpy as np
import pytest

from streamgnn.benchmarks import quality
from streamgnn.benchmarks.pyg_tgn import eval_negatives, negative_counts, split_points
from streamgnn.errors import ConfigError
from streamgnn.events import EventBatch


def test_quick_run_on_two_stream_prefixes_prints_the_promised_keys(capsys):
    streams = ["collegemsg", "bitcoin_alpha"]
    argv = ["--quick", "--json", "--events", "1200", "--seeds", "0", "1", "--streams", *streams]
    assert quality.main(argv) == 0
    result = json.loads(capsys.readouterr().out)  # the whole of stdout is one object
    for s in streams:
        for key in ("ap", "ap_pyg", "mrr", "mrr_pyg", "ap_edgebank", "ap_edgebank_tw", "mrr_edgebank"):
            assert 0 <= result[f"{key}_{s}"] <= 1, key
        assert result[f"events_{s}"] == 1200
        runs = [r for r in result["runs"] if r["stream"] == s]
        assert [r["seed"] for r in runs] == [0, 1]
        assert result[f"ap_{s}"] == np.mean([r["ap"] for r in runs])  # the mean of the seeds' values
        assert runs[0]["ap_edgebank"] == runs[1]["ap_edgebank"]  # no seed in EdgeBank, same negatives
    gaps = [result[f"ap_pyg_{s}"] - result[f"ap_{s}"] for s in streams]
    assert result["worst_ap_gap"] == max(gaps)
    assert result["worst_mrr_gap"] == max(result[f"mrr_pyg_{s}"] - result[f"mrr_{s}"] for s in streams)
    assert isinstance(result["flags"], list)
    bank_gaps = [
        result[f"{m}{kind}_{b}_{s}"] - result[f"{m}{kind}_{s}"]
        for s in streams
        for m in ("ap", "mrr")
        for kind in ("", "_historical")
        for b in ("edgebank", "edgebank_tw")
    ]
    assert result["worst_gap_to_edgebank"] == max(bank_gaps)
    for s in streams:
        assert result[f"epochs_{s}"] == result[f"epochs_pyg_{s}"] == 1  # --quick: one fixed epoch
        for key in ("ap_historical", "ap_historical_pyg", "mrr_historical", "mrr_historical_edgebank"):
            assert 0 <= result[f"{key}_{s}"] <= 1, key
        # historical negatives are pairs that happened before: EdgeBank cannot score them below positives
        assert result[f"ap_historical_edgebank_{s}"] <= result[f"ap_edgebank_{s}"]
    # the issue's other targets: the demo's online scores beside both EdgeBanks', and the speed ratio
    assert result["demo_events"] == result["speed_events"] == 1200
    demo = ("demo_ap", "demo_mrr", "demo_ap_edgebank", "demo_mrr_edgebank", "demo_ap_edgebank_tw")
    assert all(0 <= result[key] <= 1 for key in demo)
    assert result["demo_gap_to_edgebank"] == max(
        result[f"demo_{m}_{b}"] - result[f"demo_{m}"]
        for m in ("ap", "mrr")
        for b in ("edgebank", "edgebank_tw")
    )
    # the speed ratio: the median of three alternating rounds' own ratios, each round's rates beside it
    rounds = result["speed_rounds"]
    ratios = [r["pairs"] / r["tgn"] for r in rounds]
    assert len(rounds) == 3 and result["pair_vs_tgn_speed_ratios"] == ratios
    assert result["pair_vs_tgn_speed"] == np.median(ratios)
    assert result["pair_vs_tgn_speed_spread"] == [min(ratios), max(ratios)]


def test_converged_training_stops_on_validation_on_both_sides(capsys):
    argv = ["--json", "--events", "1200", "--seeds", "0", "--streams", "collegemsg", "--no-demo"]
    assert quality.main([*argv, "--max-epochs", "3", "--patience", "1"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["patience"] == 1 and result["epochs"] == 3
    for side in ("", "_pyg"):
        assert 2 <= result[f"epochs{side}_collegemsg"] <= 3  # at least the best and one past it, or all
    (run,) = result["runs"]
    aps = run["val_ap_per_epoch"]
    assert len(aps) == run["epochs"] and run["best_epoch"] == int(np.argmax(aps)) + 1  # the one scored
    assert 1 <= run["best_epoch_pyg"] <= run["epochs_pyg"]


def test_streams_are_time_sorted_from_zero_without_features():
    events = quality.prepare("digg_reply", 500)
    assert len(events) == 500 and events.t[0] == 0 and np.all(np.diff(events.t) >= 0)
    assert events.features is None


def test_ablation_flags_parse_and_bad_fields_fail_before_any_training(capsys):
    parsed = quality.overrides(["model.neighbor_time=query", "lr=3e-4", "baselines=[]"], "--ours")
    assert parsed == {"model": {"neighbor_time": "query"}, "lr": 3e-4, "baselines": []}
    for argv in (["--ours", "model.neighbor_tim=query"], ["--pyg", "negatives=all"], ["--ours", "lr"]):
        with pytest.raises(SystemExit):
            quality.main(argv)
        err = capsys.readouterr().err
        assert "error: " in err and "Traceback" not in err  # usage and one error line


def _few_destinations(n: int = 600, sources: int = 30, destinations: int = 12) -> EventBatch:
    """A stream with far fewer destinations than the benchmark's 100 negatives, two events per timestamp."""
    rng = np.random.default_rng(7)
    src = rng.integers(0, sources, n)
    dst = sources + (src + rng.integers(0, 3, n)) % destinations  # each source favours a few
    return EventBatch.from_columns(src=src, dst=dst, t=np.arange(n) // 2, eid=np.arange(n))


def test_few_destinations_rank_each_event_against_every_candidate_it_has():
    events = _few_destinations()
    _, val_end = split_points(len(events))
    fewest = 12
    for strategy in ("random", "historical"):
        neg = eval_negatives(events, val_end, strategy=strategy)
        assert neg.shape == (len(events) - val_end, 100)
        for row, i in zip(neg, range(val_end, len(events)), strict=True):
            now = events.dst[(events.t == events.t[i]) & (events.src == events.src[i])]
            real = row[row >= 0]
            assert (row[len(real) :] == -1).all()  # padding only at the end
            assert sorted(real) == sorted(set(events.dst) - set(now))  # all of them, once, none a positive
            fewest = min(fewest, len(real))
        np.testing.assert_array_equal(negative_counts(neg), (neg >= 0).sum(1))
    # every side ranks against the real negatives only: with every candidate in both sets, random and
    # historical negatives are the same sets in another order, so each side's MRR is the same for both
    (run,) = quality.run_stream("few", events, [0], 1)
    assert run["negatives"] == fewest < 12
    for side in ("", "_pyg", "_edgebank", "_edgebank_tw"):
        assert 1 / 13 <= run[f"mrr{side}"] <= 1
        assert run[f"mrr_historical{side}"] == pytest.approx(run[f"mrr{side}"], abs=1e-9), side
    flags = quality.summarize([run])["flags"]
    assert any(f"only {run['negatives']} candidate negatives" in line for line in flags)


def test_a_test_event_with_no_candidate_negative_is_a_clear_error():
    events = EventBatch.from_columns(src=[0, 0, 1, 1], dst=[5, 6, 5, 6], t=[0, 1, 2, 2], eid=np.arange(4))
    with pytest.raises(ConfigError, match=r"event 2 \(src 1, t 2\.0\) has no negative"):
        eval_negatives(events, 2)
