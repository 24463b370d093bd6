"""``streamgnn bench tasks --quick --json``: the promised keys, each baseline's beside ours, sane values
(AUC for the node and edge labels, NDCG@10 for Travian's node affinity)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

STREAM_KEYS = {
    "wikipedia_ban": ("majority", "persistence", "features"),
    "sign_bitcoin_otc": ("majority", "persistence", "features", "reputation"),
    "sign_bitcoin_alpha": ("majority", "persistence", "features", "reputation"),
}


def test_quick_json_reports_every_task_beside_its_baselines():
    out = subprocess.run(
        [sys.executable, "-m", "streamgnn.cli", "bench", "tasks", "--quick", "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    result = json.loads(out.stdout)  # one JSON object, nothing else on stdout
    assert result["smoke"] is True and result["epochs"] == 1
    for key, baselines in STREAM_KEYS.items():
        figures = [result[f"auc_{key}"]] + [result[f"auc_{key}_{b}"] for b in baselines]
        for value in figures:
            assert value is None or 0.0 <= value <= 1.0, (key, figures)
        assert result[f"auc_{key}_majority"] == 0.5  # a constant ranks nothing
        defined = [v for v in figures[1:] if v is not None]
        if figures[0] is not None:
            assert math.isclose(result[f"margin_{key}"], figures[0] - max(defined))
    assert result["test_positive_sign_bitcoin_otc"] > 0 and result["test_positive_sign_bitcoin_alpha"] > 0
    for run in result["runs"]:
        labelled = run["labels"] if run["stream"] == "travian_alliance" else run["events"]
        assert run["train"] + run["val"] + run["test"] == labelled  # every label split
        assert run["train"] > run["val"] > 0 and run["test"] > 0
    # Travian alliances as node affinity: NDCG@10 of ours and of TGB's baselines, on the same test rows
    travian = [result[f"ndcg10_travian_alliance{b}"] for b in ("", "_persistence", "_moving_average")]
    assert all(0.0 < v <= 1.0 for v in travian), travian
    best = max(travian[1:])
    assert math.isclose(result["margin_travian_alliance"], travian[0] - best)
    assert all(0.8 < v < 0.9 for v in result["published_auc_wikipedia_ban"].values())
