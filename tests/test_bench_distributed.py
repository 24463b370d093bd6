"""The distributed benchmark's small path, end to end (real gloo ranks): every key the issue names, with
values that hold whatever the host's speed."""

from __future__ import annotations

import json

import pytest

from streamgnn.benchmarks import distributed


def test_small_run_reports_the_headline_keys(capsys):
    distributed.main(
        ["--json", "--events", "2400", "--stream-events", "20000", "--worlds", "1,2", "--repeats", "1"]
    )
    res = json.loads(capsys.readouterr().out)
    for key in ("bytes_per_rank_vs_single", "events_per_s_w2_vs_w1", "ap_w2", "ap_w1",
                "comm_free_bytes_vs_exact", "comm_free_ap"):  # fmt: skip
        assert key in res, key
    assert 0.3 < res["bytes_per_rank_vs_single"] < 1.0  # a rank holds less than everything
    assert 0.0 < res["comm_free_bytes_vs_exact"] < 1.0  # no sampling or memory exchange
    assert abs(res["ap_w2"] - res["ap_w1"]) < 0.02  # exact mode: the same scores up to float noise
    assert 0.3 < res["comm_free_ap"] <= 1.0 and res["events_per_s_w2_vs_w1"] > 0
    assert res["w1.sent_bytes_per_batch"] == 0 and res["w2.sent.memory_rows"] > 0
    assert res["w2.collectives_per_batch"] > res["w2_comm_free.collectives_per_batch"]
    # the default model: exact mode asks destinations' owners for their half of the pair features
    assert res["pair_features"] and res["w2.sent.pair_neighbors"] > 0
    assert "w2_comm_free.sent.pair_neighbors" not in res  # communication-free reads what the rank holds
    # ownership by Fennel's placement (as the partition router publishes it): exact, and fewer cut edges
    assert abs(res["w2_fennel.ap"] - res["ap_w1"]) < 0.02 and res["fennel_bytes_vs_hash"] > 0
    assert res["fennel_edge_cut"] < res["hash_edge_cut"] and res["w2_fennel.sent.memory_rows"] > 0


def test_too_few_events_for_the_warm_up_are_refused_by_name(capsys):
    with pytest.raises(SystemExit) as exit_:
        distributed.main(["--events", "2000", "--worlds", "1,2"])  # all ten warm-up batches, none timed
    assert exit_.value.code == 2 and "--events 2000" in capsys.readouterr().err
