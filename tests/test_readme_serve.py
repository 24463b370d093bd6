"""The serving and cluster blocks of docs/serving.md and docs/cluster.md, run as written against a real
service and broker (addresses swapped for the test's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from streamgnn.connectors.sink import KafkaSink
from streamgnn.serve import EmbeddingService, ServeConfig

DOCS = Path(__file__).resolve().parent.parent / "docs"


def block(page: str, heading: str, lang: str) -> str:
    return (DOCS / page).read_text().split(heading, 1)[1].split(f"```{lang}\n", 1)[1].split("```", 1)[0]


def published(bootstrap: str, topic: str) -> np.ndarray:
    vectors = np.random.default_rng(3).normal(size=(10, 4)).astype(np.float32)
    with KafkaSink(bootstrap, embeddings_topic=topic, fmt="binary") as sink:
        sink.publish_embeddings(np.arange(10), vectors, t=1.0)
        sink.flush()
    return vectors


def run_bash(script: str, port: int, cwd: Path | None = None) -> tuple[list, str]:
    """The JSON answers the script printed (curl adds no newline), and the text after them."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    script = script.replace("localhost:8000", f"127.0.0.1:{port}") + "\nkill $(jobs -p) 2>/dev/null || true"
    proc = subprocess.run(
        ["bash", "-ec", script], capture_output=True, text=True, env=env, timeout=180, cwd=cwd
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out, answers, text, decoder = proc.stdout.lstrip(), [], [], json.JSONDecoder()
    while out:  # the service's own log lines (it runs in the same shell) are text too
        if out.startswith("{"):
            value, end = decoder.raw_decode(out)
            answers.append(value)
        else:
            end = out.find("\n") + 1 or len(out)
            text.append(out[:end].strip())
        out = out[end:].lstrip()
    return answers, "\n".join(t for t in text if t.startswith("streamgnn_"))


def test_reading_embeddings_back_block(kafka_bootstrap, make_topic):
    topic = make_topic(1, compacted=True)
    vectors = published(kafka_bootstrap, topic)
    code = block("serving.md", "Any Kafka client can read the topic too", "python")
    code = code.replace('"localhost:9092", "embeddings"', f'"{kafka_bootstrap}", "{topic}"')
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    np.testing.assert_array_equal(scope["vectors"], vectors[[1, 2]])
    assert scope["ids"].shape == (1, 5) and 1 not in scope["ids"][0]


def test_cluster_block_runs_against_the_service(kafka_bootstrap, make_topic):
    topic = make_topic(1, compacted=True)
    published(kafka_bootstrap, topic)
    with EmbeddingService(ServeConfig(port=0, log_every_s=0), kafka_bootstrap, topic) as service:
        service.reader.wait_caught_up(60)
        (health, embeddings, topk), rest = run_bash(
            block("cluster.md", "# The docker-compose cluster", "bash"), service.port
        )
    assert not rest
    assert health["nodes"] == 10 and [e["id"] for e in embeddings["embeddings"]] == [1, 2]
    assert topk["metric"] == "dot" and len(topk["neighbors"]) == 5
