"""``streamgnn bench tasks_online --json``: a labelled task learned by the live job, its cost (wall and CPU
seconds over link prediction alone) and its prequential figures beside the baselines."""

from __future__ import annotations

import json
import math
import subprocess
import sys


def test_json_reports_the_cost_ratios_and_the_online_head_beside_its_baselines():
    out = subprocess.run(
        [sys.executable, "-m", "streamgnn.cli", "bench", "tasks_online", "--streams", "bitcoin_alpha",
         "--events", "1200", "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    result = json.loads(out.stdout)  # one JSON object, nothing else on stdout
    key = "sign_bitcoin_alpha"
    assert result[f"events_{key}"] == result[f"labels_{key}"] == 1200  # a label on every rating
    for name in ("cost_ratio", "cpu_ratio", "events_per_s_link", "events_per_s_task"):
        assert math.isfinite(result[f"{name}_{key}"]) and result[f"{name}_{key}"] > 0, name
    for name in ("auc_online", "auc_online_all", f"auc_{key}_features", f"auc_{key}_reputation"):
        value = result[name if name.startswith(f"auc_{key}") else f"{name}_{key}"]
        assert value is None or 0.0 <= value <= 1.0, (name, value)
    for name in (f"auc_online_fifths_{key}", f"auc_online_{key}_features_lr_fifths"):  # over time
        assert len(result[name]) == 5 and all(v is None or 0.0 <= v <= 1.0 for v in result[name]), name


def test_sharded_json_reports_the_task_s_cost_over_the_link_only_sharded_job():
    """``--sharded 2``: both jobs as 2 real gloo ranks; each label scored once over the ranks, the ratios
    of the same run's link-only sharded job."""
    out = subprocess.run(
        [sys.executable, "-m", "streamgnn.cli", "bench", "tasks_online", "--streams", "bitcoin_alpha",
         "--events", "1200", "--sharded", "2", "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    result = json.loads(out.stdout)
    key = "sign_bitcoin_alpha"
    assert result["sharded_world"] == 2 and result[f"sharded_labels_{key}"] == 1200
    per_rank = result[f"sharded_scored_per_rank_{key}"]
    assert len(per_rank) == 2 and sum(per_rank) == 1200 and all(per_rank)  # each label by one owner
    for name in ("cost_ratio", "cpu_ratio", "events_per_s_link", "events_per_s_task"):
        assert math.isfinite(result[f"sharded_{name}_{key}"]) and result[f"sharded_{name}_{key}"] > 0, name
    assert 0.0 <= result[f"sharded_auc_online_all_{key}"] <= 1.0
    assert f"cost_ratio_{key}" not in result  # the one-process jobs did not run
