"""The sharded Kafka example under ``torchrun --nproc_per_node 2`` against the embedded broker: each rank
reads only its own topic partitions, and the run reports and checkpoints per rank."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from streamgnn.connectors.broker import free_port
from streamgnn.store.checkpoint import read_latest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "train_sharded_kafka.py"


def test_sharded_kafka_example_under_torchrun(kafka_bootstrap, tmp_path):
    """The README's command, as written, against the test broker (plus a short run and a fresh topic)."""
    readme = (EXAMPLE.parent.parent / "README.md").read_text()
    block = readme.split("## Scale out", 1)[1].split("```bash", 1)[1].split("```", 1)[0].strip()
    assert block.startswith("torchrun --nproc_per_node 2 examples/train_sharded_kafka.py")
    topic = f"sharded-{uuid.uuid4().hex[:10]}"
    args = block.split()[1:]
    args[args.index("examples/train_sharded_kafka.py")] = str(EXAMPLE)
    args[args.index("--bootstrap") + 1] = kafka_bootstrap
    env = {**os.environ, "OMP_WAIT_POLICY": "passive", "PYTHONWARNINGS": "ignore"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--master_port", str(free_port()), *args,
           "--topic", topic, "--partitions", "4", "--events", "1000", "--checkpoint-every", "2",
           "--idle-timeout", "5"]  # fmt: skip
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "produced 157,474 events" in run.stdout and "1,000 events on 2 ranks" in run.stdout
    summary = json.loads((tmp_path / "out/train_sharded_kafka/summary.json").read_text())
    assert summary["events"] == 1000 and 0.4 < summary["metrics"]["ap"] <= 1.0
    read = []
    for rank in range(2):  # each rank's checkpoint holds the offsets of its own partitions, and only those
        root = tmp_path / f"out/train_sharded_kafka/checkpoints/rank-{rank:05d}"
        step = read_latest(root)[0]
        manifest = json.loads(next((root / step / "store").glob("ckpt-*/manifest.json")).read_text())
        read.append({int(key.rsplit(":", 1)[1]) for key in manifest["source_offsets"]})
        assert all(key.startswith(topic) for key in manifest["source_offsets"])
    assert read == [{0, 2}, {1, 3}]
