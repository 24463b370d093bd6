"""The examples a user copies from must run."""

import json
import os
import runpy
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np

from streamgnn.connectors.broker import free_port
from streamgnn.sampling import EvalNegatives

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_replay_store_example(capsys, monkeypatch):
    monkeypatch.setattr("sys.argv", ["replay_store.py", "collegemsg"])
    runpy.run_path(str(EXAMPLES / "replay_store.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "collegemsg: 1,899 nodes, 59,835 edges" in out
    assert "restored equals original: True" in out


def test_readme_store_snippet_runs(tmp_path):
    readme = (EXAMPLES.parent / "docs/store.md").read_text()
    block = readme.split("# The temporal graph store", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    scope: dict = {}
    exec(
        compile(block.replace('"store-ckpt/"', "CKPT"), "docs/store.md", "exec"),
        {"CKPT": str(tmp_path)},
        scope,
    )
    store = scope["store"]
    assert store.num_edges == 2 and len(store.snapshot(25.0)) == 1


def test_readme_sampling_snippet_runs(tmp_path, monkeypatch):
    readme = (EXAMPLES.parent / "docs/sampling.md").read_text()
    block = readme.split("# Sample temporal neighborhoods", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(block, "docs/sampling.md", "exec"), scope)
    hop, sub, neg, fixed = scope["hop"], scope["sub"], scope["neg"], scope["fixed"]
    assert hop.num_roots == 400 and 0 < len(hop) <= 4000 and (hop.t < hop.query_t[hop.root_index]).all()
    assert sub.hops[1].num_roots == len(sub.hops[0]) and neg.shape == (200, 1)
    assert fixed.neg.shape == (200, 100)
    again = EvalNegatives.load(tmp_path / "eval_negatives")  # a verified checkpoint folder, read back equal
    assert (tmp_path / "eval_negatives/LATEST").exists() and np.array_equal(again.neg, fixed.neg)


def _run_example(args: list[str], tmp_path: Path) -> str:
    env = {**os.environ, "OMP_WAIT_POLICY": "passive", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_file_example_trains_data_parallel_under_torchrun(tmp_path):
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    out = _run_example(
        [torchrun, "--nproc_per_node", "2", "--master_port", str(free_port()),
         str(EXAMPLES / "train_file.py"), "--events", "2000", "--checkpoint-every", "5"],
        tmp_path,
    )  # fmt: skip
    summary = json.loads((tmp_path / "out/train_file/summary.json").read_text())
    assert summary["events"] == 2000 and 0.5 < summary["metrics"]["ap"] <= 1.0
    assert (tmp_path / "out/train_file/jodie_wikipedia/checkpoints/LATEST").exists()
    assert out.count("2,000 events in") == 1  # rank 0 reports, rank 1 stays quiet


def test_kafka_example_trains_from_a_topic_and_publishes_embeddings(kafka_bootstrap, tmp_path):
    topic = f"example-{uuid.uuid4().hex[:10]}"
    out = _run_example(
        [sys.executable, str(EXAMPLES / "train_kafka.py"), "--bootstrap", kafka_bootstrap, "--topic", topic,
         "--events", "2000", "--idle-timeout", "5"],
        tmp_path,
    )  # fmt: skip
    assert "produced 157,474 events" in out and "2,000 events in" in out
    summary = json.loads((tmp_path / "out/train_kafka/summary.json").read_text())
    assert summary["events"] == 2000 and 0.5 < summary["metrics"]["ap"] <= 1.0
    assert f"embeddings in {topic}-embeddings" in out
