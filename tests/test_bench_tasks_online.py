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
