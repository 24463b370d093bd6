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
from shard_ranks import rank_env  # noqa: E402
from topic_records import read_topic  # noqa: E402

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
    from streamgnn.jobs import TrainJob
    from streamgnn.shard import ShardConfig

    rank_env(rank, world, port)
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
    assert {n: 0.0 < m["ap"] <= 1.0 for n, m in summary["baselines"].items()} == {
        "edgebank": True,
        "edgebank_tw": True,
    }  # the baselines, scored beside the model as in the replicated job

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


def one_job(rank: int, world: int, port: int, out: str) -> None:
    """One sharded job over the topic to ``JOB_EVENTS`` events, with a dead-letter topic and, if given, an
    embeddings topic to which the cadence alone would publish nothing before the end (``publish_every``)."""
    from streamgnn.jobs import TrainJob
    from streamgnn.shard import ShardConfig

    rank_env(rank, world, port)
    config = dataclasses.replace(
        one.make_config(),
        serve_every=1,
        publish_every=10_000,
        sharding=ShardConfig(num_partitions=PARTITIONS),
    )
    job = TrainJob(
        config, topic=os.environ["JOB_TOPIC"], bootstrap=os.environ["JOB_BOOTSTRAP"], log_every_s=0,
        embeddings_topic=os.environ.get("JOB_EMBEDDINGS") or None, dead_letter_topic=os.environ["JOB_DLQ"],
    )  # fmt: skip
    result = job.run(max_events=int(os.environ["JOB_EVENTS"]), progress=False)
    torch.save({"result": result.as_dict(), "learned": job.trainer.learned}, out)


if __name__ == "__main__":
    case = one_job if os.environ.get("JOB_CASE") == "one_job" else worker
    case(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])


def head_and_tail(head: int):
    """The first ``head`` events of ``make_events`` and a later tail with one event per source vertex (as in
    ``stream``), apart: the job ends at ``head`` events once every rank has read past them."""
    from streamgnn.events import EventBatch

    events = one.make_events()[:head]
    sources = np.unique(events.src)
    tail = EventBatch.from_columns(
        src=sources, dst=np.full(len(sources), 60), t=events.t[-1] + 1.0 + np.arange(len(sources)),
        eid=10_000 + np.arange(len(sources)), features=np.zeros((len(sources), 4), np.float32),
    )  # fmt: skip
    return events, tail


def read_records(bootstrap: str, topic: str) -> list:
    """Every record of ``topic`` now (all partitions)."""
    return read_topic(bootstrap, topic)


def run_job(monkeypatch, spawn_ranks, tmp_path, **env) -> list:
    """What each rank of ``one_job`` saved, ``env`` its ``JOB_*`` variables."""
    monkeypatch.setenv("JOB_CASE", "one_job")
    for key, value in env.items():
        monkeypatch.setenv(f"JOB_{key.upper()}", str(value))
    return spawn_ranks(__file__, 2, tmp_path)


def test_a_sharded_job_sends_each_refused_event_to_the_dead_letter_topic_once(
    kafka_bootstrap, make_topic, tmp_path, spawn_ranks, monkeypatch
):
    """Refused events of a sharded job's topic go to the dead-letter topic once each, with the reason and the
    topic, partition and offset of their message, as the replicated job's do: a bad field on each rank
    (its source's decoder), a delete of an unknown vertex (refused by the index every rank holds, sent by
    rank 1, which read it), a delete of an edge that never was (refused by the shards of both endpoints,
    sent by the source's owner). A redelivered event id is skipped, not a dead letter."""
    from streamgnn.codec import decode_binary
    from streamgnn.connectors.kafka import produce_dataset
    from streamgnn.events import BAD_KIND, NEGATIVE_TIME, EventBatch, concat
    from streamgnn.partition import hash_partition

    events, tail = head_and_tail(HALF)
    on_rank = {
        r: [v for v in range(60) if hash_partition(np.array([v]), PARTITIONS)[0] % 2 == r] for r in (0, 1)
    }
    s0, s1 = on_rank[0][0], on_rank[1][0]
    unknown = next(v for v in range(9000, 9100) if hash_partition(np.array([v]), PARTITIONS)[0] % 2 == 1)
    before = events.t < events.t[400]  # a pair of known vertices that never had an edge, for a delete
    assert s0 in events.src[before]
    paired = set(events.dst[before & (events.src == s0)].tolist())
    never = next(d for d in np.unique(events.dst[before]).tolist() if d not in paired)
    bad = EventBatch.from_columns(
        kind=[0, 7, 1, 1, 0], src=[s0, s1, unknown, s0, s1], dst=[61, 62, unknown + 1, never, 63],
        t=[-1.0, events.t[200], events.t[300], events.t[400], events.t[350]],
        eid=[20_000, 20_001, 20_002, 20_003, 5], features=np.zeros((5, 4), np.float32),
    )  # fmt: skip
    why = {20_000: NEGATIVE_TIME, 20_001: BAD_KIND, 20_002: f"delete names an unknown node ({unknown} ->",
           20_003: "delete matched no live edge"}  # fmt: skip
    topic, dlq = f"sharded-dlq-{os.getpid()}-{tmp_path.name[-8:]}", make_topic(1)
    produce_dataset(
        kafka_bootstrap, topic, concat([events, bad, tail]), PARTITIONS, fmt="binary", batch_size=50
    )
    # the global batches hold the head, the two deletes and the redelivery; the batchers drop the bad fields
    ranks = run_job(monkeypatch, spawn_ranks, tmp_path, topic=topic, bootstrap=kafka_bootstrap, dlq=dlq,
                    events=HALF + 3)  # fmt: skip
    assert [got["result"]["dead_letters"] for got in ranks] == [4, 4]  # summed over the ranks, once each
    letters = read_records(kafka_bootstrap, dlq)
    headers = [{k: v.decode() for k, v in r.headers} for r in letters]
    assert sorted(int(h["eid"]) for h in headers) == sorted(why)  # each once; the redelivered id 5 not at all
    for h in headers:
        eid = int(h["eid"])
        assert why[eid] in h["reason"], h
        src = bad.src[bad.eid == eid][0]
        part = int(h["source-partition"])
        assert h["source-topic"] == topic and part == hash_partition(np.array([src]), PARTITIONS)[0]
        message = read_records_at(kafka_bootstrap, topic, part, int(h["source-offset"]))
        assert eid in decode_binary(message).eid.tolist()  # the offset names the message that held it


def test_the_replicated_job_counts_each_dead_letter_once(kafka_bootstrap, make_topic):
    """The replicated job (one process) sends the store's refusals through its Kafka source, whose counter
    then holds them too: the job's count is still one per letter on the dead-letter topic, also when the
    source is polled again after the letters went out."""
    from streamgnn.connectors.kafka import produce_dataset
    from streamgnn.events import EventBatch, concat
    from streamgnn.jobs import TrainJob

    events, tail = head_and_tail(2 * HALF)  # more than one poll of the source (10 batches)
    bad = EventBatch.from_columns(
        kind=[1, 7], src=[9001, 3], dst=[9002, 4], t=[events.t[100], events.t[150]], eid=[20_000, 20_001],
        features=np.zeros((2, 4), np.float32),
    )  # fmt: skip
    topic, dlq = make_topic(1), make_topic(1)
    produce_dataset(kafka_bootstrap, topic, concat([events, bad, tail]), None, fmt="binary", batch_size=50)
    config = dataclasses.replace(one.make_config(), serve_every=0)
    job = TrainJob(config, topic=topic, bootstrap=kafka_bootstrap, dead_letter_topic=dlq, log_every_s=0)
    result = job.run(max_events=2 * HALF + 1, progress=False)  # the head and the delete (the kind 7 is
    assert result.dead_letters == len(read_records(kafka_bootstrap, dlq)) == 2  # no row: decoding refused it)


def read_records_at(bootstrap: str, topic: str, partition: int, offset: int) -> bytes:
    """The value of the record at ``offset`` of ``topic``'s ``partition``."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, partition)
        c.assign([tp])
        c.seek(tp, offset)
        while True:
            for records in c.poll(timeout_ms=1000).values():
                return records[0].value
    finally:
        c.close()


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


def test_a_sharded_job_publishes_while_its_topic_is_idle(
    kafka_bootstrap, make_topic, tmp_path, spawn_ranks, monkeypatch
):
    """With the topic quiet, the ranks publish the rows they refreshed (the cadence, ``publish_every``, would
    publish nothing before the end): the records come while the job still waits for the events that end it."""
    from concurrent.futures import ThreadPoolExecutor

    from streamgnn.connectors.kafka import produce_dataset
    from streamgnn.partition import hash_partition

    events, tail = head_and_tail(HALF)
    topic, embeddings = f"sharded-idle-{os.getpid()}-{tmp_path.name[-8:]}", make_topic(1, compacted=True)
    produce_dataset(kafka_bootstrap, topic, events, PARTITIONS, fmt="binary", batch_size=50)
    env = dict(topic=topic, bootstrap=kafka_bootstrap, embeddings=embeddings, dlq=make_topic(1), events=HALF)
    with ThreadPoolExecutor(1) as pool:
        ranks = pool.submit(run_job, monkeypatch, spawn_ranks, tmp_path, **env)
        owners = set()
        while owners != {0, 1}:  # the job cannot end before the tail: what comes now came while it was idle
            assert not ranks.done(), ranks.result()  # (a rank that failed raises here)
            ids = {int(r.key) for r in read_records(kafka_bootstrap, embeddings)}
            owners = set((hash_partition(np.array(sorted(ids), dtype=np.int64), PARTITIONS) % 2).tolist())
        # every rank's records came (each rank published its own) before the tail was produced
        produce_dataset(kafka_bootstrap, topic, tail, None, fmt="binary")
        assert [got["result"]["events"] for got in ranks.result()] == [HALF, HALF]
    assert ids <= set(np.r_[events.src, events.dst].tolist())  # vertices of the head
