"""`streamgnn demo` end to end on a short stream: broker, topic, online training, published embeddings."""

import json

import pytest

from streamgnn.cli import main


def test_demo_runs_end_to_end(tmp_path, capsys):
    assert main(["demo", "--events", "1200", "--out", str(tmp_path), "--quiet"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["events"] == 1200
    assert summary["nodes_with_published_embeddings"] > 0
    assert 0.0 <= summary["metrics"]["ap"] <= 1.0
    assert summary["plot_path"] == str(tmp_path / "metrics.png")
    assert summary["summary_path"] == str(tmp_path / "summary.json")
    png = (tmp_path / "metrics.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    part = summary["partition"]  # placed as it streamed: every vertex, better than a random cut of 4
    assert part["method"] == "fennel" and part["edges"] == 1200 and part["pending"] == 0
    assert sum(part["vertex_loads"]) == part["vertices"] and part["edge_cut"] < 0.75
    assert (tmp_path / "partition.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    assert "online AP" in out and "edge cut" in out
    # the summary line shows EdgeBank beside TGN, on the same negatives, as summary.json records it
    for label, name in (("EdgeBank", "edgebank"), ("EdgeBank (time window)", "edgebank_tw")):
        base = summary["baselines"][name]
        assert f"{label} AP {base['ap']:.4f}  MRR {base['mrr']:.4f}" in out


def test_cli_reports_mistakes_without_a_traceback(tmp_path, capsys):
    assert main(["demo", "--dataset", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown dataset 'nope'" in capsys.readouterr().err
    missing = str(tmp_path / "events.jsonl")
    assert main(["produce", missing, "--bootstrap", "127.0.0.1:1", "--topic", "t"]) == 2
    assert "no events file" in capsys.readouterr().err
    for bad in (
        ["demo", "--events", "-5"],
        ["produce", "x", "--bootstrap", "b", "--topic", "t", "--partitions", "0"],
    ):
        with pytest.raises(SystemExit) as exit_:
            main(bad)
        assert exit_.value.code == 2
        assert "must be a positive integer" in capsys.readouterr().err
