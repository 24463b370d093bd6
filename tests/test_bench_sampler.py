"""The sampler benchmark on a small stream: every figure it reports, its check against the numpy baseline,
the issue's headline keys and its plot."""

from __future__ import annotations

from streamgnn.benchmarks import sampler


def test_measure_reports_every_method_and_the_headline_keys(tmp_path):
    small = sampler.power_law_stream(6_000, seed=1)
    per = {small.name: sampler.measure(small, runs=2, batches=3, threads=(1, 2))}
    res = per[small.name]
    for method in sampler.METHODS:
        for th in (1, 2):
            assert res[f"{method}_per_s@{th}t"] > 0 and res[f"{method}_call_ms@{th}t"] > 0
    assert res["recent10_vs_lastneighborloader"] == res["recent10.ours_per_s"] / res["recent10.lnl_per_s"]
    head = sampler.headline({**per, "other": {**res, "recent10_vs_lastneighborloader": 0.5}})
    assert set(head) == {
        "recent10_per_s", "recent10_vs_lastneighborloader", "uniform2hop_per_s", "uniform2hop_vs_numpy",
        "after_insert_call_ms",
    }  # fmt: skip
    assert head["recent10_vs_lastneighborloader"] == 0.5  # the weaker stream's figure
    path = tmp_path / "sampler.png"
    sampler.plot(per, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
