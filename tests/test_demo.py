"""`streamgnn demo` end to end on a short stream: broker, topic, online training, published embeddings."""

import json
import re
import shlex
import signal
import socket
import subprocess
import sys

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


def test_demo_serve_keeps_broker_and_service_up_with_curl_lines_that_work(tmp_path):
    """`streamgnn demo --serve`: the printed curl lines answer, summary.json says what is running, and
    Ctrl-C (SIGINT) stops both the service and the broker."""
    cmd = [sys.executable, "-m", "streamgnn.cli", "demo", "--events", "600", "--out", str(tmp_path)]
    proc = subprocess.Popen(
        [*cmd, "--quiet", "--serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines = []
        for line in proc.stdout:  # the lines come once the service has read every published row
            lines.append(line.strip())
            if line.startswith("Ctrl-C stops"):
                break
        assert lines and lines[-1].startswith("Ctrl-C stops"), "\n".join(lines)
        broker = re.search(
            r"broker (127\.0\.0\.1:\d+)", next(x for x in lines if x.startswith("broker"))
        ).group(1)
        url = re.search(r"on (http://\S+) ", next(x for x in lines if x.startswith("serving"))).group(1)
        summary = json.loads((tmp_path / "summary.json").read_text())
        assert summary["broker"] == f"tansu (local, serving on {broker})" and summary["service"] == url
        curls = [shlex.split(x) for x in lines if x.startswith("curl ")]
        answers = [
            json.loads(subprocess.run(c, capture_output=True, text=True, check=True).stdout) for c in curls
        ]
        embeddings, topk, score, health = answers
        assert len(embeddings["embeddings"]) == 2 and len(embeddings["embeddings"][0]["embedding"]) == 100
        assert len(topk["neighbors"]) == 5
        assert score["scorer"] == "link_predictor" and 0.0 <= score["scores"][0]["score"] <= 1.0
        assert health["caught_up"] and health["nodes"] == summary["nodes_with_published_embeddings"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 0
        assert "stopping the service and the broker" in proc.stdout.read()
        for address in (broker, url.removeprefix("http://")):
            host, port = address.rsplit(":", 1)
            with socket.socket() as s:
                assert s.connect_ex((host, int(port))) != 0, f"{address} still answers"
        summary = json.loads((tmp_path / "summary.json").read_text())
        assert summary["broker"] == "tansu (local, stopped)" and summary["service"] == f"{url} (stopped)"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_demo_serve_refuses_a_taken_port_before_it_trains(tmp_path, capsys):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        assert main(["demo", "--serve", "--port", str(port), "--out", str(tmp_path / "demo")]) == 2
    err = capsys.readouterr().err
    assert f"port {port} is in use" in err and "--port" in err
    assert not (tmp_path / "demo").exists()  # refused before any work: no broker, no folder
