"""The partition benchmark's quick path on a small slice: every headline key, sane values."""

import json

from streamgnn.benchmarks import partition


def test_quick_partition_benchmark_reports_the_headline_keys(capsys, tmp_path):
    argv = ["--quick", "--json", "--datasets", "bitcoin_otc,synthetic", "--synthetic-edges", "20000"]
    assert partition.main([*argv, "--plot", str(tmp_path / "p.png")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["smoke"] is True  # quick figures say so
    for key in (
        "best_cut_vs_metis",
        "best_cut_vs_hash",
        "ldg_edges_per_s",
        "fennel_edges_per_s",
        "hdrf_rf_vs_hash",
    ):
        assert out[key] > 0, key
    assert out["best_cut_vs_hash"] < 0.9 and out["hdrf_rf_vs_hash"] < 1.0
    k4 = out["datasets"]["bitcoin_otc"]["4"]
    assert k4["cut"]["metis"] < k4["cut"]["fennel"] < k4["cut"]["hash"]
    assert (tmp_path / "p.png").exists() and out["synthetic_edges"] == 20000
