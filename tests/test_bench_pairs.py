"""The pair-feature benchmark: a tiny run of its real path prints the promised keys; historical negatives."""

from __future__ import annotations

import json

import numpy as np

from streamgnn.benchmarks import pairs
from streamgnn.benchmarks.pyg_tgn import eval_negatives
from streamgnn.datasets import load


def test_tiny_run_prints_costs_and_the_speed_ratio(capsys):
    argv = ["--quick", "--json", "--events", "6000", "--train-events", "1200", "--repeats", "1"]
    assert pairs.main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    for key in ("history_us_per_query", "cooccurrence_us_per_query", "sampler_us_per_root"):
        assert result[key] > 0, key
    cost = (result["history_us_per_query"] + result["cooccurrence_us_per_query"]) / result[
        "sampler_us_per_root"
    ]
    assert np.isclose(result["pair_vs_sampler_cost"], cost)
    assert result["queries"] == 2000 * 101
    assert result["walk_us_per_query"] > 0 and result["walk_us_per_event"] > 0
    # training speed: --repeats alternating rounds, each ratio within its round, the median reported
    (round_,) = result["speed_rounds"]
    assert result["train_events_per_s_tgn"] == round_["tgn"] > 0
    assert result["pair_vs_tgn_speed_ratios"] == [round_["pairs"] / round_["tgn"]]
    assert result["pair_vs_tgn_speed"] == round_["pairs"] / round_["tgn"]
    assert result["walks_vs_no_walks_speed"] == round_["pairs"] / round_["no_walks"]
    assert result["decayed_vs_pairs_speed"] == round_["decayed"] / round_["pairs"]
    assert result["relative_vs_tgn_speed"] == round_["relative"] / round_["tgn"]
    assert result["relative_vs_pairs_speed"] == round_["relative"] / round_["pairs"]
    assert result["decayed_us_per_query"] > 0


def test_historical_negatives_are_destinations_the_source_met_before():
    events = load("collegemsg").take(slice(0, 3000))
    neg = eval_negatives(events, 2000, num=10, strategy="historical")
    met = {(s, d) for s, d in zip(events.src[:2000].tolist(), events.dst[:2000].tolist(), strict=True)}
    src = events.src[2000:]
    first = [(int(s), int(n)) for s, n in zip(src, neg[:, 0], strict=True)]
    known = [pair in met for pair in first]
    has_history = [any(p[0] == s for p in met) for s in src.tolist()]
    assert sum(known) > 0.5 * sum(has_history)  # where the source met others, column 0 is one of them
    assert not (neg == events.dst[2000:, None]).any()
