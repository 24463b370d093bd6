"""The sharded job through the one entry point (``TrainJob``, what ``streamgnn train`` and compose run): 2
real gloo ranks read their own partitions of a topic on the real broker, stop part way, resume from the common
checkpoint, report as the replicated job does and publish the embeddings of the vertices each owns; the
embedding service, over real HTTP, then answers every vertex with the vector its owner holds. A dataset
source and a YAML config through the CLI run the same job. This file is also the worker script."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import urllib.request
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_shard_train as one  # noqa: E402  (the stream and the model of the sharded tests)

PARTITIONS, HALF = 4, 480
TOTAL = one.BATCHES * one.BATCH  # 960 events; then one later event per source vertex (see ``stream``)


def stream():
    """``make_events`` and, after it, one event from every source vertex: each rank then reads past the
    stream's first ``TOTAL`` events, so the ranks agree where it ends without waiting for a quiet topic."""
    from streamgnn.events import EventBatch, concat

    events = one.make_events()
    sources = np.unique(events.src)
    tail = EventBatch.from_columns(
        src=sources, dst=np.full(len(sources), 60), t=events.t[-1] + 1.0 + np.arange(len(sources)),
        eid=10_000 + np.arange(len(sources)), features=np.zeros((len(sources), 4), np.float32),
    )  # fmt: skip
    return concat([events, tail])


def worker(rank: int, world: int, port: int, out: str) -> None:
    from streamgnn.shard import ShardConfig
    from streamgnn.train.job import TrainJob

    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    work = Path(os.environ["JOB_DIR"])
    config = dataclasses.replace(
        one.make_config(), serve_every=2, publish_every=3, checkpoint_dir=str(work / "ckpt"),
        checkpoint_every=3, sharding=ShardConfig(num_partitions=PARTITIONS),
    )  # fmt: skip
    kafka = dict(
        topic=os.environ["JOB_TOPIC"], bootstrap=os.environ["JOB_BOOTSTRAP"], log_every_s=0,
        embeddings_topic=os.environ["JOB_EMBEDDINGS"], out_dir=str(work / "out"),
    )  # fmt: skip
    first = TrainJob(config, **kafka).run(max_events=HALF, progress=False)
    job = TrainJob(config, **kafka)  # a restarted job: the same command
    second = job.run(max_events=TOTAL, progress=False)
    trainer = job.trainer
    table = trainer.table
    gids = np.arange(trainer.index.num_nodes)
    mine = trainer.index.external(gids[trainer.index.owned(gids)])
    registry = job.metrics.registry
    torch.save(
        {"first": first.as_dict(), "second": second.as_dict(), "owned": mine,
         "vectors": table.embeddings(mine), "read": set(trainer.batcher.source.positions()),
         "position": registry.get_sample_value("streamgnn_stream_position"),
         "steps": registry.get_sample_value("streamgnn_train_steps"), "status": job._status()},
        out,
    )  # fmt: skip


def test_a_sharded_job_resumes_reports_and_serves_every_vertex(
    kafka_bootstrap, make_topic, tmp_path, spawn_ranks, monkeypatch
):
    from streamgnn.connectors.kafka import produce_dataset
    from streamgnn.serve import EmbeddingService, ServeConfig

    topic, embeddings = f"sharded-{os.getpid()}-{tmp_path.name[-8:]}", make_topic(1, compacted=True)
    produce_dataset(kafka_bootstrap, topic, stream(), PARTITIONS, fmt="binary")
    for key, value in (("DIR", tmp_path), ("TOPIC", topic), ("BOOTSTRAP", kafka_bootstrap),
                       ("EMBEDDINGS", embeddings)):  # fmt: skip
        monkeypatch.setenv(f"JOB_{key}", str(value))
    ranks = spawn_ranks(__file__, 2, tmp_path)
    for r, got in enumerate(ranks):
        assert got["read"] == {f"{topic}:{p}" for p in range(r, PARTITIONS, 2)}  # its own partitions
        assert got["first"]["events"] == HALF and got["second"]["events"] == TOTAL - HALF  # resumed there
        assert got["position"] == TOTAL and got["steps"] == one.BATCHES  # the metrics of the whole run
        assert got["status"].startswith(f"rank {r}/2: {TOTAL:,} events") and "lag" in got["status"]
        assert got["second"]["latency_p50_ms"] > 0  # (the replicated job's figure; it was NaN when sharded)
    events = one.make_events()
    vertices = np.unique(np.r_[events.src, events.dst])
    owned = [set(got["owned"].tolist()) for got in ranks]
    assert owned[0].isdisjoint(owned[1]) and owned[0] | owned[1] == set(vertices.tolist())
    assert all(owned)  # each rank owns some
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())  # rank 0's report
    assert summary["events"] == TOTAL - HALF and 0.0 < summary["metrics"]["ap"] <= 1.0  # scored, not NaN
    assert summary["learned"] == TOTAL  # every event learned once over the two runs

    with EmbeddingService(ServeConfig(port=0, log_every_s=0), kafka_bootstrap, embeddings) as service:
        service.reader.wait_caught_up(60)
        url = f"http://127.0.0.1:{service.port}"
        for got in ranks:  # every vertex, from the rank that owns it, as that rank holds it
            ids = ",".join(str(v) for v in got["owned"].tolist())
            with urllib.request.urlopen(f"{url}/embeddings?ids={ids}") as reply:
                answer = json.loads(reply.read())["embeddings"]
            assert [a["id"] for a in answer] == got["owned"].tolist()
            served = np.array([a["embedding"] for a in answer], np.float32)
            np.testing.assert_array_equal(served, got["vectors"])
        request = urllib.request.Request(
            f"{url}/topk", json.dumps({"id": int(vertices[0]), "k": 5}).encode(),
            {"content-type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request) as reply:
            assert len(json.loads(reply.read())["neighbors"]) == 5


if __name__ == "__main__":
    worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])


def test_streamgnn_train_runs_a_sharded_config_on_a_dataset(tmp_path, capsys):
    """``streamgnn train --config`` with ``train.sharding``: the sharded job (its per-rank checkpoint layout),
    each rank keeping its partitions of the dataset; run again, it resumes and ends where it was told."""
    from streamgnn.cli import main

    config = tmp_path / "sharded.yaml"
    config.write_text(
        "train:\n  batch_size: 100\n  eval_negatives: 5\n  checkpoint_every: 2\n"
        "  sharding: {num_partitions: 4}\n"
        "  model: {memory_dim: 8, time_dim: 8, embedding_dim: 8, num_neighbors: 5}\n"  # pair features on
    )
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    argv = ["train", "--config", str(config), "--dataset", "jodie_wikipedia", "--checkpoint-dir", str(ckpt),
            "--out", str(out), "--quiet", "--log-every", "0"]  # fmt: skip
    assert main([*argv, "--events", "300"]) == 0
    assert (ckpt / "rank-00000" / "LATEST").exists()  # the sharded layout: one folder per rank
    assert main([*argv, "--events", "500"]) == 0
    printed = capsys.readouterr().out
    assert "resumed from" in printed and "300 events already learned" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["events"] == 200 and summary["learned"] == 500 and summary["batches"] == 5
