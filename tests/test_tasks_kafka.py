"""Labels through a real Kafka broker (Tansu) into the live training job, and the job's head served by
``/predict`` over real HTTP (issue 35): every bad label a dead letter naming its message's offset and
line, nothing else lost, a resumed job reading on from its checkpoint's label offsets (a label older than
what it already learned is late), and the service answering with the checkpoint's head."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import torch
from topic_records import read_topic

from streamgnn.connectors.files import CsvSource
from streamgnn.connectors.kafka import EventProducer, Producer
from streamgnn.events import EventBatch
from streamgnn.jobs import TrainJob
from streamgnn.nn import TGNConfig
from streamgnn.serve import EmbeddingService, ServeConfig
from streamgnn.tasks.config import TaskConfig
from streamgnn.tasks.online import OnlineHead
from streamgnn.train import TrainConfig
from streamgnn.train.checkpoint import load_tensors

torch.set_num_threads(1)

MODEL = TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3, dropout=0.0)


def stream(n: int) -> EventBatch:
    rng = np.random.default_rng(5)
    return EventBatch.from_columns(
        src=rng.integers(0, 40, n), dst=rng.integers(40, 60, n), t=np.arange(n, dtype=float), eid=np.arange(n)
    )


def config(ckpt, **kw) -> TrainConfig:
    return TrainConfig(model=MODEL, batch_size=50, eval_negatives=5, checkpoint_dir=str(ckpt), **kw)


def send_labels(bootstrap: str, topic: str, messages: list[str]) -> None:
    with Producer("kafka-python", bootstrap, {}) as out:
        for text in messages:
            out.send(topic, text.encode())
        out.flush()


def label(node, t, y) -> str:
    return json.dumps({"node": int(node), "t": float(t), "y": y})


def test_labels_through_kafka_bad_ones_dead_letters_nothing_else_lost(kafka_bootstrap, make_topic, tmp_path):
    events, labels_topic = make_topic(1), make_topic(1)
    ev = stream(800)
    with EventProducer(kafka_bootstrap, events, fmt="binary", batch_size=100) as out:
        out.send(ev[:600])
        out.flush()
    good = [label(ev.src[i], i, int(ev.src[i] % 2)) for i in range(0, 600, 4)]
    bad = {
        "not json": "not JSON",
        json.dumps({"node": 1, "t": 9.0}): "missing field 'y'",
        json.dumps({"node": 1, "t": 9.0, "y": 5}): "not a class in 0..1",
        json.dumps({"node": 777, "t": 9.0, "y": 1}): "unknown node 777",
    }
    # one message of 10 good lines, then one bad line alone, in turn; then the rest of the good ones
    messages, expected = [], {}
    for k, (text, reason) in enumerate(bad.items()):
        messages.append("\n".join(good[10 * k : 10 * k + 10]))
        expected[f"{labels_topic}/0@{len(messages)}:line 1"] = reason
        messages.append(text)
    messages += ["\n".join(good[40:])]
    send_labels(kafka_bootstrap, labels_topic, messages)

    task = TaskConfig(labels_topic=labels_topic)
    job = TrainJob(config(tmp_path), topic=events, bootstrap=kafka_bootstrap, task=task, log_every_s=3600)
    job.run(idle_timeout_s=3.0, progress=False)
    lab = job.labelled
    assert job.trainer.position == 600
    assert lab.head.seen == len(good)  # nothing lost
    assert {d.where: d.reason for d in lab.letters}.keys() == expected.keys()
    for letter in lab.letters:
        assert expected[letter.where] in letter.reason

    # later: a label for a time the job has already learned past (late), a good one, and more events
    send_labels(kafka_bootstrap, labels_topic, [label(ev.src[3], 3, 1), label(ev.src[650], 650, 0)])
    with EventProducer(kafka_bootstrap, events, fmt="binary", batch_size=100) as out:
        out.send(ev[600:])
        out.flush()
    resumed = TrainJob(config(tmp_path), topic=events, bootstrap=kafka_bootstrap, task=task, log_every_s=3600)
    resumed.run(idle_timeout_s=3.0, progress=False)
    lab = resumed.labelled
    assert resumed.trainer.position == 800
    assert lab.head.seen == len(good) + 1  # the earlier labels were not read again
    assert lab.dead_letters == len(bad) + 1
    late = lab.letters[-1]
    assert "late label" in late.reason and late.where == f"{labels_topic}/0@{len(messages)}:line 1"


def write_csv(path, ev: EventBatch):
    path.write_text(
        "".join(f"{s},{d},{t}\n" for s, d, t in zip(ev.src, ev.dst, ev.t.astype(int), strict=True))
    )
    return path


@pytest.mark.parametrize("kind", ["node_classification", "edge_classification"])
def test_each_label_s_prediction_is_published_in_order_and_a_bad_one_gets_none(
    kafka_bootstrap, make_topic, tmp_path, kind
):
    """``task.predictions_topic``: every label the job scores has its prediction on the topic (read to its
    end offsets), in the order scored, keyed by its node (an edge's: ``[src, dst]``), with what the head
    predicted before learning from it and the step whose checkpoint holds that head; a bad label is a dead
    letter and has none."""
    ev = stream(600)
    events = write_csv(tmp_path / "events.csv", ev)
    labels_topic, predictions = make_topic(1), make_topic(1)
    edges = kind.startswith("edge")
    good = [
        {"node": int(ev.src[i]), **({"dst": int(ev.dst[i])} if edges else {}), "t": float(i),
         "y": int(ev.src[i] % 2)}
        for i in range(0, 600, 3)
    ]  # fmt: skip
    bad = [
        "not json",
        json.dumps({"node": 1, "t": 9.0}),  # no y
        json.dumps({"node": 777, **({"dst": 41} if edges else {}), "t": 9.0, "y": 1}),  # no event has 777
        json.dumps({"node": 1, **({"dst": 999} if edges else {}), "t": 9.0, "y": 7}),  # not a class
    ]
    lines = [json.dumps(r) for r in good]
    messages = ["\n".join(lines[k : k + 40]) for k in range(0, len(lines), 40)]
    for k, text in enumerate(bad):  # each bad one alone, between the good ones
        messages.insert(2 * k + 1, text)
    send_labels(kafka_bootstrap, labels_topic, messages)
    task = TaskConfig(kind=kind, labels_topic=labels_topic, predictions_topic=predictions)
    job = TrainJob(
        config(tmp_path / "ckpt"), source=CsvSource(events, batch_size=200), bootstrap=kafka_bootstrap,
        task=task, log_every_s=3600,
    )  # fmt: skip
    job.run(progress=False)
    head = job.labelled.head
    assert head.seen == len(good) and job.labelled.dead_letters == len(bad)

    records = read_topic(kafka_bootstrap, predictions)  # the job closed its sink: all of it is there
    got = [json.loads(r.value) for r in records]
    assert len(got) == len(good)
    ends = ("src", "dst") if edges else ("node",)
    assert [[g[e] for e in ends] for g in got] == [[r[e] for e in ("node", "dst")[: len(ends)]] for r in good]
    assert [g["t"] for g in got] == [r["t"] for r in good]
    want_keys = [json.dumps([r["node"], r["dst"]]) if edges else str(r["node"]) for r in good]
    assert [r.key.decode() for r in records] == want_keys
    scored = np.concatenate(head.records["score"])
    np.testing.assert_allclose([g["probability"] for g in got], scored, rtol=1e-12, atol=0)
    assert [g["label"] for g in got] == [int(p >= 0.5) for p in scored]
    # the step that scored each: the global batch (50 events, t == row) holding its time
    assert [g["step"] for g in got] == [int(r["t"]) // 50 for r in good]


def test_a_resumed_job_publishes_each_prediction_once_from_its_checkpoint(
    kafka_bootstrap, make_topic, tmp_path
):
    """A job stopped after 300 events (its last checkpoint there, written once the predictions before it
    were acknowledged) and resumed: the topic holds each label's prediction once, in time order, and the
    resumed head's predictions are those the uninterrupted job makes."""
    ev = stream(600)
    events = write_csv(tmp_path / "events.csv", ev)
    rows = [{"node": int(ev.src[i]), "t": float(i), "y": int(ev.src[i] % 2)} for i in range(0, 600, 2)]
    (tmp_path / "labels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    def run(ckpt, topic, **kw):
        task = TaskConfig(labels_file=str(tmp_path / "labels.jsonl"), predictions_topic=topic)
        job = TrainJob(
            config(ckpt, checkpoint_every=4), source=CsvSource(events, batch_size=200),
            bootstrap=kafka_bootstrap, task=task, log_every_s=3600,
        )  # fmt: skip
        job.run(progress=False, **kw)
        return job

    whole, parts = make_topic(1), make_topic(1)
    run(tmp_path / "whole", whole)
    first = run(tmp_path / "parts", parts, max_events=300)
    assert 0 < first.labelled.head.seen < len(rows)
    run(tmp_path / "parts", parts)
    once, twice = ([json.loads(r.value) for r in read_topic(kafka_bootstrap, t)] for t in (whole, parts))
    assert [g["t"] for g in twice] == [r["t"] for r in rows]  # each once, in order
    assert twice == once


def call(url: str, body=None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def wait_for(predicate, what: str, limit_s: float = 300.0):
    """Poll until ``predicate()`` holds (the bound only keeps a broken run from hanging forever)."""
    deadline = time.monotonic() + limit_s
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"never saw {what}"
        time.sleep(0.05)
    return value


@pytest.mark.parametrize("kind", ["node_classification", "edge_classification"])
def test_predict_serves_the_job_s_head_over_http(kafka_bootstrap, make_topic, tmp_path, kind):
    ev = stream(600)
    events = write_csv(tmp_path / "events.csv", ev)
    edges = kind.startswith("edge")
    rows = [
        {"node": int(ev.src[i]), "t": float(i), "y": int(ev.dst[i] % 2 if edges else ev.src[i] % 2),
         **({"dst": int(ev.dst[i])} if edges else {})}
        for i in range(0, 600, 2)
    ]  # fmt: skip
    (tmp_path / "labels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    embeddings = make_topic(1, compacted=True)
    job = TrainJob(
        config(tmp_path / "ckpt"), source=CsvSource(events, batch_size=200), bootstrap=kafka_bootstrap,
        embeddings_topic=embeddings, log_every_s=3600,
        task=TaskConfig(kind=kind, labels_file=str(tmp_path / "labels.jsonl")),
    )  # fmt: skip
    job.run(progress=False)
    lab = job.labelled
    saved = OnlineHead.from_state(load_tensors(tmp_path / "ckpt")[2]["task"]["head"])

    def features(src, dst=None):  # the job's stream features of these nodes as of its newest event
        index = job.trainer.store.node_index
        return lab.features.rows(
            index(src), None if dst is None else index(dst), np.full(len(src), lab.watermark)
        )

    served = ServeConfig(port=0, log_every_s=0, checkpoint_dir=str(tmp_path / "ckpt"))
    with EmbeddingService(served, kafka_bootstrap, embeddings) as service:
        url = service.url
        wait_for(lambda: call(f"{url}/health")[1]["nodes"] == 60, "all 60 nodes served")
        _, got = call(f"{url}/embeddings?ids=0,1,41")
        z = {e["id"]: np.array(e["embedding"], np.float32) for e in got["embeddings"]}
        if edges:
            status, got = call(f"{url}/predict", {"pairs": [[0, 41], [1, 41]]})
            x = np.stack([np.concatenate([z[0], z[41]]), np.concatenate([z[1], z[41]])])
            x = np.concatenate([x, features(np.array([0, 1]), np.array([41, 41]))], axis=1)
            keys = [{"src": 0, "dst": 41}, {"src": 1, "dst": 41}]
        else:
            status, got = call(f"{url}/predict?nodes=0,1")
            x, keys = np.stack([z[0], z[1]]), [{"node": 0}, {"node": 1}]
            x = np.concatenate([x, features(np.array([0, 1]))], axis=1)
        assert status == 200 and got["task"] == kind and got["checkpoint"].startswith("ckpt-")
        expect = saved.predict(x)
        np.testing.assert_allclose(
            job.labelled.head.predict(x), expect, rtol=0, atol=0
        )  # the job's last head
        for key, p, want in zip(keys, got["predictions"], expect, strict=True):
            assert {k: p[k] for k in key} == key
            assert p["probability"] == pytest.approx(float(want), rel=1e-6) and p["label"] == int(want >= 0.5)

        # errors: an unknown node, the other kind of query, nothing asked
        status, got = call(f"{url}/predict", {"pairs": [[0, 999]]} if edges else {"nodes": [0, 999]})
        assert status == 404 and got["unknown"] == [999]
        status, got = call(f"{url}/predict?nodes=0" if edges else f"{url}/predict?src=0&dst=41")
        assert status == 400 and kind in got["error"]
        status, got = call(f"{url}/predict", {} if not edges else {"pairs": []})
        assert status == 400
        status, got = call(
            f"{url}/predict", {"pairs": [[0, 41]], "k": 1} if edges else {"nodes": [0], "k": 1}
        )
        assert status == 400 and got["error"] == f"k: only node_affinity ranks classes, this task is {kind}"

    # a service reading the ids as strings finds the same nodes' stream features: the same predictions
    strs = ServeConfig(port=0, log_every_s=0, checkpoint_dir=str(tmp_path / "ckpt"), node_ids="str")
    with EmbeddingService(strs, kafka_bootstrap, embeddings) as service:
        url = service.url
        wait_for(lambda: call(f"{url}/health")[1]["nodes"] == 60, "all 60 nodes served as strings")
        asked = {"pairs": [["0", "41"], ["1", "41"]]} if edges else {"nodes": ["0", "1"]}
        status, got = call(f"{url}/predict", asked)
        assert status == 200
        for p, want in zip(got["predictions"], expect, strict=True):
            assert p["probability"] == pytest.approx(float(want), rel=1e-6)

    with EmbeddingService(ServeConfig(port=0, log_every_s=0), kafka_bootstrap, embeddings) as service:
        status, got = call(f"{service.url}/predict?nodes=0")
        assert status == 404 and "no task head" in got["error"] and "checkpoint_dir" in got["error"]
