"""The snapshot benchmark on small parts: every headline key, the equality checks inside it, its plot."""

import math

import pytest

from streamgnn.benchmarks import snapshots


def test_collect_reports_the_headline_keys_and_plots(tmp_path):
    res = snapshots.collect(
        days=3, repeats=1, events=60_000, seeds=[0], chickenpox_epochs=1, bitcoin_epochs=1, weeks=60
    )
    for key in (
        "incremental_vs_rebuild",
        "chickenpox_mse",
        "chickenpox_mse_pgt",
        "bitcoin_otc_auc",
        "bitcoin_otc_auc_edgebank",
        "bitcoin_otc_mrr",
        "bitcoin_otc_auc_pa",
        "memory_builder_growth",
    ):
        assert math.isfinite(res[key]) and res[key] > 0, key  # fmt: skip
    assert res["travian_snapshots"] == 3 and res["chickenpox_snapshots"] == 56
    assert res["memory_builder_growth"] < 1.5 and res["memory_snapshots"] == 99
    path = tmp_path / "snapshots.png"
    snapshots.plot(res, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_arguments_are_one_line_errors(capsys):
    with pytest.raises(SystemExit):
        snapshots.main(["--seeds", "0"])
    with pytest.raises(SystemExit):
        snapshots.main(["--plot", "/no/such/folder/x.png"])
    assert "does not exist" in capsys.readouterr().err
