"""`streamgnn demo` end to end on a short stream: broker, topic, online training, published embeddings."""

import json

from streamgnn.cli import main


def test_demo_runs_end_to_end(tmp_path, capsys):
    assert main(["demo", "--events", "1200", "--out", str(tmp_path), "--quiet"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["events"] == 1200
    assert summary["nodes_with_published_embeddings"] > 0
    assert 0.0 <= summary["metrics"]["ap"] <= 1.0
    png = (tmp_path / "metrics.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert "online AP" in capsys.readouterr().out
