"""``streamgnn bench follow --quick --json``: a real broker, a producer at fixed rates and the default
training job; the keys the issue names, and figures that make sense (not speed: the host may be busy)."""

from __future__ import annotations

import json
import math

import pytest

from streamgnn.cli import main


def test_quick_follow_reports_every_key_and_sane_figures(capsys):
    assert main(["bench", "follow", "--quick", "--json"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in (
        "max_sustained_events_per_s", "fresh_p50_ms", "fresh_p99_ms", "ap_at_max_vs_every_event",
        "learned_fraction_at_max", "ap_at_max", "above_edgebanks_at_max", "every_event", "runs",
        "load_avg_before", "smoke", "warmup_s",
    ):  # fmt: skip
        assert key in res, key
    assert res["warmup_s"] > 0  # the job's paths stepped once before the first rate
    assert res["smoke"] is True and res["rates"] == [2000.0, 10000.0]
    assert res["max_sustained_events_per_s"] in (0.0, *res["rates"])
    for run in res["runs"]:
        # every event written was through the trainer by the end, or counted in the lag
        assert 0 < run["consumed"] <= run["events"] == run["rate"] * res["seconds_per_rate"]
        assert run["end_lag"] <= run["max_lag"] <= run["events"]
        assert run["sustained"] == (run["end_lag"] < 2 * run["rate"])
        assert 0 < run["fresh_p50_ms"] <= run["fresh_p99_ms"]
        assert 0 < run["learned_fraction"] <= 1
        # a sample was evaluated; its figures come with an interval, beside both EdgeBanks on the same events
        assert run["evaluated"] > 0
        for key in ("ap", "mrr", "edgebank_ap", "edgebank_tw_ap", "edgebank_mrr"):
            assert 0 <= run[key] <= 1, key
        assert run["ap_low"] <= run["ap"] <= run["ap_high"]
    ref = res["every_event"]
    assert 0 < ref["ap"] <= 1 and ref["events"] == 5_000
    if res["max_sustained_events_per_s"]:
        assert math.isclose(res["ap_at_max_vs_every_event"], res["ap_at_max"] - ref["ap"])


def test_a_negative_reference_is_refused_by_name(capsys):
    """``--reference-events 0`` runs the live job alone (A/B runs); a negative count is refused."""
    with pytest.raises(SystemExit) as stop:
        main(["bench", "follow", "--quick", "--reference-events", "-1"])
    assert stop.value.code == 2 and "--reference-events" in capsys.readouterr().err


def test_follow_costs_scores_each_estimate_on_the_same_steps(capsys):
    """``streamgnn bench follow_costs``: every estimate scored on the same items, errors that make sense (not
    which estimate wins: a few items on a busy host decide nothing)."""
    assert main(["bench", "follow_costs", "--events", "3000", "--json"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["events"] == 3_000 and res["items"] >= 1
    for name in ("line", "per_event", "per_step"):
        for q in ("median", "p90"):
            assert math.isfinite(res[f"{name}_{q}_error"]) and res[f"{name}_{q}_error"] >= 0, (name, q)
    assert res["line_fixed_ms"] >= 0 and res["line_per_event_ms"] >= 0
