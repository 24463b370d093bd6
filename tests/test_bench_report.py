"""How every benchmark prints: a short headline naming each figure's dataset, or the whole JSON object; quick
runs are labelled smoke values both ways."""

from __future__ import annotations

import json

import pytest

from streamgnn.benchmarks.common import SMOKE, report

RESULTS = {"events": 157_474, "insert_events_per_s": 2.5e6, "insert_vs_rebuild": 205.0, "extra": 1}
HEADLINE = {
    "insert_events_per_s": "inserts/s, JODIE Wikipedia ({events:,} events)",
    "insert_vs_rebuild": "insert vs rebuild, JODIE Wikipedia",
    "not_measured": "a figure this run did not produce",
}


def test_the_headline_names_the_dataset_of_each_figure_and_nothing_else(capsys):
    report(RESULTS, False, "store", HEADLINE, quick=False)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "# store" and SMOKE not in "\n".join(lines)
    assert "inserts/s, JODIE Wikipedia (157,474 events)" in lines[1] and "2,500,000.000" in lines[1]
    assert "insert vs rebuild, JODIE Wikipedia" in lines[2] and "205.000" in lines[2]
    assert not any("extra" in line or "not_measured" in line for line in lines)  # only the headline
    assert lines[-1] == "(5 figures in all: --json prints every one)"


def test_quick_runs_are_smoke_values_in_the_headline_and_in_the_json(capsys):
    report(RESULTS, False, "store", HEADLINE, quick=True)
    assert capsys.readouterr().out.splitlines()[1] == f"# {SMOKE}"
    report(RESULTS, True, "store", HEADLINE, quick=True)
    assert json.loads(capsys.readouterr().out) == {**RESULTS, "smoke": True}
    report(RESULTS, True, "store", HEADLINE, quick=False)
    assert json.loads(capsys.readouterr().out)["smoke"] is False


def test_the_json_is_strict_a_figure_that_is_not_a_number_is_null(capsys):
    """A metric of an empty split is NaN: the JSON says null there (strict parsers refuse ``NaN``), at any
    depth, and keeps every finite figure as it is."""
    report({"ap": float("nan"), "rates": [1.5, float("inf")], "per": {"a": -float("inf"), "b": 2.0}}, True,
           "t", {}, quick=False)  # fmt: skip
    out = capsys.readouterr().out
    assert json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in the JSON")) == {
        "ap": None, "rates": [1.5, None], "per": {"a": None, "b": 2.0}, "smoke": False,
    }  # fmt: skip
