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


def otc_prefix(*options: str) -> dict:
    """``bench tasks --json`` on Bitcoin OTC's first 2,000 ratings, one epoch, with ``options``."""
    out = subprocess.run(
        [sys.executable, "-m", "streamgnn.cli", "bench", "tasks", "--streams", "bitcoin_otc",
         "--events", "2000", "--epochs", "1", *options, "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(out.stdout)


def test_replay_batches_report_each_size_and_the_noise_beside_the_figures():
    """``--replay-batches``: each size's figures, the sizes validation picked, and how far the figures
    are from noise (standard errors, the seeds' spread)."""
    result = otc_prefix("--replay-batches", "200", "50")
    key = "sign_bitcoin_otc"  # its first 2,000 ratings: 14 negative of 300 in test, 9 in validation
    assert result["replay_batches"] == [200, 50]
    (run,) = result["runs"]
    assert result[f"replay_chosen_{key}"] == [run["replay_batch"]] and run["replay_batch"] in (200, 50)
    picked = run["replay"][str(run["replay_batch"])]  # JSON keys are strings
    assert picked["auc"] == run["auc"] and picked["val_auc"] == run["val_auc"]
    assert max(r["val_auc"] for r in run["replay"].values()) == run["val_auc"]
    for size in (200, 50):
        assert 0.0 <= result[f"auc_{key}_replay_{size}"] <= 1.0
        assert 0.0 <= result[f"auc_{key}_embeddings_replay_{size}"] <= 1.0
    assert 0.0 < result[f"auc_se_{key}"] < 0.5
    assert 0.0 < result[f"auc_diff_se_{key}_reputation"] < 0.5
    assert result[f"spread_auc_{key}"] == 0.0  # one seed


def test_head_penalties_and_the_unweighted_loss_reach_ours_and_validation_picks_the_head():
    """``--head-penalties``/``--head-loss``: the linear heads' validation figures beside the staged
    head's stages, ours the best of them on validation."""
    result = otc_prefix("--head-penalties", "1e-3", "--head-loss", "unweighted")
    assert result["head_penalties"] == [1e-3] and result["head_loss"] == "unweighted"
    (run,) = result["runs"]
    stages = run["val_auc_stages"]
    assert "linear_all_0.001" in stages and "joint" in stages
    assert run["val_auc"] == max(stages.values())  # the staged head's last kept stage, or the linear one


def test_head_other_end_is_refused_by_name_for_streams_whose_labels_have_none():
    out = subprocess.run(
        [sys.executable, "-m", "streamgnn.cli", "bench", "tasks", "--head-other-end", "--json",
         "--streams", "jodie_wikipedia", "bitcoin_otc"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 2 and out.stdout == ""
    refused = out.stderr.split("not ", 1)[1].split("]")[0]
    assert "--head-other-end" in out.stderr and "bitcoin_otc" in refused and "jodie_wikipedia" not in refused
