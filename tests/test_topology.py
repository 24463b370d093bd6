"""The docker-compose cluster's topology without Docker: the broker, a producer process writing the raw topic,
the partition router (the compose file's command) filling the events topic, two ``torchrun``
agents (one worker each, gloo, c10d rendezvous, as two trainer containers), the embeddings service as a
subprocess, and an HTTP client. Embeddings of replayed nodes arrive and change as the stream goes on, the two
workers agree, and a worker killed with SIGKILL (its whole container: agent and worker) and started again
resumes from the checkpoint without losing or repeating an event."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import numpy as np
import yaml

from streamgnn.codec import encode_json_lines
from streamgnn.connectors.broker import free_port
from streamgnn.events import EventBatch
from streamgnn.store import TemporalGraphStore
from streamgnn.train.checkpoint import load as load_checkpoint

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent
N, HALF = 2400, 1200


def get(url: str):
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = resp.read().decode()
            return json.loads(body) if "json" in resp.headers.get("content-type", "") else body
    except OSError:
        return None  # not up (yet, or again)


def scrape(port: int) -> dict[str, float]:
    text = get(f"http://127.0.0.1:{port}/metrics") or ""
    return {
        name: float(value)
        for name, _, value in (line.partition(" ") for line in text.splitlines() if not line.startswith("#"))
    }


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants (torchrun starts its workers in sessions of their own)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo += children.get(found[-1], [])
    return found


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL a process and everything it started, as stopping its container would."""
    for pid in tree(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait()


def wait_for(predicate, what: str, procs, timeout_s: float = 180.0):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        for name, proc in procs.items():
            assert proc.poll() is None, f"{name} exited with {proc.returncode}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_cluster_topology_trains_serves_and_survives_a_sigkill(kafka_bootstrap, tmp_path):
    rng = np.random.default_rng(5)
    events = EventBatch.from_columns(
        src=rng.integers(0, 60, N), dst=rng.integers(60, 90, N), t=np.arange(N, dtype=float), eid=np.arange(N)
    )
    run = uuid.uuid4().hex[:8]
    config = tmp_path / "cluster.yaml"
    config.write_text(
        f"""
kafka: {{bootstrap: "{kafka_bootstrap}", raw_topic: raw-{run}, events_topic: ev-{run}, partitions: 2,
        embeddings_topic: emb-{run}}}
train:
  batch_size: 100
  lr: 0.01
  eval_negatives: 5
  window_events: 500
  publish_every: 1
  checkpoint_dir: {tmp_path / "ckpt"}
  checkpoint_every: 1
  model: {{memory_dim: 16, time_dim: 8, embedding_dim: 16, num_neighbors: 5, dropout: 0.0}}
serve: {{log_every_s: 1.0}}
"""
    )
    env = {**os.environ, "OMP_WAIT_POLICY": "passive", "PYTHONWARNINGS": "ignore", "GLOO_SOCKET_IFNAME": "lo"}
    procs: dict[str, subprocess.Popen] = {}
    logs = {}

    def start(name: str, cmd: list[str]) -> None:
        logs[name] = (tmp_path / f"{name}.log").open("a")
        procs[name] = subprocess.Popen(
            cmd, stdout=logs[name], stderr=subprocess.STDOUT, env=env, start_new_session=True
        )

    def produce(part: EventBatch, name: str) -> None:
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(encode_json_lines(part))
        proc = subprocess.run(
            [str(BIN / "streamgnn"), "produce", str(path), "--bootstrap", kafka_bootstrap,
             "--topic", f"raw-{run}", "--partitions", "1", "--format", "binary"],
            capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr

    rdzv, service_port, metrics_a, metrics_b = free_port(), free_port(), free_port(), free_port()

    def trainer(name: str, metrics_port: int, is_host: int) -> None:
        """A trainer container: one torchrun agent, restarted whenever it exits (compose's restart policy).
        A worker that loses its peer fails, its agent exits (no in-place restarts), and both agents meet
        again in a fresh rendezvous."""
        cmd = [str(BIN / "torchrun"), "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
             "--rdzv-endpoint", f"127.0.0.1:{rdzv}", "--rdzv-id", run, "--rdzv-conf", f"is_host={is_host}",
             "--max-restarts", "0", "--monitor-interval", "0.5", "--module", "streamgnn.cli", "train",
             "--config", str(config), "--kafka", "--publish", "--metrics-port", str(metrics_port),
             "--log-every", "1", "--quiet"]  # fmt: skip
        start(name, ["bash", "-c", f"while true; do {shlex.join(cmd)}; sleep 1; done"])

    try:
        assert (
            subprocess.run([str(BIN / "streamgnn"), "topics", "--config", str(config)], env=env).returncode
            == 0
        )
        router = shlex.split(
            yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["router"]["command"]
        )
        local = {"/config/cluster.yaml": str(config), "/router": str(tmp_path / "router")}
        start("router", [str(BIN / "streamgnn"), *(local.get(a, a) for a in router[1:])])
        start(
            "service", [str(BIN / "streamgnn"), "serve", "--config", str(config), "--port", str(service_port)]
        )
        trainer("trainer-a", metrics_a, 1)
        trainer("trainer-b", metrics_b, 0)
        url = f"http://127.0.0.1:{service_port}"

        produce(events[:HALF], "first")
        first_nodes = np.union1d(events.src[:HALF], events.dst[:HALF])

        def both_at(position: int):
            a, b = scrape(metrics_a), scrape(metrics_b)
            keys = ("streamgnn_stream_position", "streamgnn_train_steps", "streamgnn_replica_fingerprint")
            done = all(m.get("streamgnn_stream_position") == position for m in (a, b))
            return done and all(a[k] == b[k] for k in keys) and (a, b)

        a, b = wait_for(lambda: both_at(HALF), "both workers at the first half, in agreement", procs)
        assert a["streamgnn_learned_events"] == b["streamgnn_learned_events"] == HALF
        ids = ",".join(map(str, first_nodes[:20]))
        before = wait_for(
            lambda: (
                (h := get(f"{url}/health"))
                and h["nodes"] == len(first_nodes)
                and get(f"{url}/embeddings?ids={ids}")
            ),
            "the first half's embeddings in the service",
            procs,
        )

        # kill trainer-b's container (agent and worker) while the second half streams in, then start it again
        kill_tree(procs.pop("trainer-b"))
        produce(events[HALF:], "second")
        trainer("trainer-b", metrics_b, 0)
        a, b = wait_for(lambda: both_at(N), "both workers at the end, in agreement, after the restart", procs)
        assert a["streamgnn_learned_events"] == b["streamgnn_learned_events"] == N  # none lost, none twice

        after = wait_for(
            lambda: (
                (e := get(f"{url}/embeddings?ids={ids}"))
                and e["embeddings"][0]["t"] > before["embeddings"][0]["t"]
                and e
            ),
            "embeddings refreshed by the second half",
            procs,
        )
        changed = [
            x["embedding"] != y["embedding"]
            for x, y in zip(before["embeddings"], after["embeddings"], strict=True)
        ]
        assert sum(changed) >= len(changed) // 2
        all_nodes = np.union1d(events.src, events.dst)
        wait_for(
            lambda: (h := get(f"{url}/health")) and h["nodes"] == len(all_nodes), "every node served", procs
        )
        top = get(f"{url}/topk?id={all_nodes[0]}&k=5")
        assert len(top["neighbors"]) == 5

        ckpt = wait_for(
            lambda: (c := load_checkpoint(tmp_path / "ckpt")).manifest["position"] == N and c,
            "the final checkpoint",
            procs,
        )
        # Every event once, none lost across the SIGKILL. Compared as a set, not as the time-ordered store's
        # hash: the router writes the two partitions live, and a partition read to its end frees the others
        # (idle_partition_s 0, docs/kafka.md), so on a loaded host an event can arrive after a later one of
        # the other partition and be stored late (the run on 2026-12-06 stored 89 of 2,400 that way).
        reference = TemporalGraphStore()
        reference.ingest(events)

        def stored(store) -> np.ndarray:  # (t, src, dst) of every stored edge, ids as the stream gave them
            e = store.edges()
            rows = np.c_[e.t, store.external_ids(e.src), store.external_ids(e.dst)]
            return rows[np.lexsort(rows.T[::-1])]

        np.testing.assert_array_equal(stored(ckpt.store), stored(reference))
        assert (
            "resumed from"
            in (tmp_path / "trainer-a.log").read_text() + (tmp_path / "trainer-b.log").read_text()
        )
        assert "nodes served" in (tmp_path / "service.log").read_text()  # the one-line status
    finally:
        for proc in procs.values():
            kill_tree(proc)
        for f in logs.values():
            f.close()
