"""The serve benchmark's measured path on a small table: a real server process, real HTTP, every key."""

from __future__ import annotations

from streamgnn.benchmarks import serve


def test_measure_reports_latency_throughput_and_recall_over_http():
    # isotropic rows over the index (built from 1,000 rows here, 100,000 by default)
    res = serve.measure(2_000, lookups=30, topks=10, updates=5, isotropic=True, exact_below=1_000)
    for key in (
        "lookup_p50_ms",
        "lookup_p99_ms",
        "topk_p50_ms",
        "topk_p99_ms",
        "inproc_lookup_ms",
        "inproc_topk_ms",
    ):
        assert res[key] > 0, key
    assert res["lookup_p99_ms"] >= res["lookup_p50_ms"] and res["topk_p99_ms"] >= res["topk_p50_ms"]
    assert res["lookups_per_s"] > 0 and res["topk_per_s"] > 0
    assert res["lookup_http_overhead_x"] > 1  # HTTP adds to the in-process call
    assert res["topk_recall_at_10"] >= 0.9  # served answers against the exact scan of the same rows
    assert res["index_update_per_s"] > 0 and res["exact_update_per_s"] > 0
    assert res["inproc_approx_topk_p99_ms"] >= res["inproc_approx_topk_p50_ms"] > 0
