"""KafkaSink (embeddings, predictions) and produce_dataset against a real broker."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from topic_records import read_topic

from streamgnn.codec import encode_json_lines
from streamgnn.connectors.kafka import KafkaSource, produce_dataset
from streamgnn.connectors.sink import BATCH_BYTES, KafkaSink, decode_embedding
from streamgnn.datasets import load
from streamgnn.errors import ConfigError
from streamgnn.events import concat
from streamgnn.partition import hash_partition


def read_all(bootstrap: str, topic: str, n: int) -> list:
    """The records of ``topic`` (its writers closed: read to its end offsets), which must be exactly ``n``, in
    offset order per partition."""
    records = read_topic(bootstrap, topic)
    assert len(records) == n
    return records


@pytest.mark.parametrize("fmt", ["json", "binary"])
def test_embeddings_keyed_by_node_so_the_latest_wins(kafka_bootstrap, make_topic, backend, fmt):
    topic = make_topic(2, compacted=True)
    rng = np.random.default_rng(1)
    nodes = np.arange(100, 150)
    first = rng.normal(size=(50, 16)).astype(np.float32)
    second = rng.normal(size=(20, 16)).astype(np.float32)
    with KafkaSink(kafka_bootstrap, embeddings_topic=topic, fmt=fmt, backend=backend) as sink:
        assert sink.publish_embeddings(nodes, first, t=10.0) == 50
        assert sink.publish_embeddings(nodes[:20], second, t=20.0) == 20
    latest: dict[int, tuple[np.ndarray, float | None]] = {}
    for rec in read_all(kafka_bootstrap, topic, 70):
        ctype = dict(rec.headers)["content-type"].decode()
        latest[int(rec.key)] = decode_embedding(rec.value, ctype)
    assert sorted(latest) == nodes.tolist()
    for i, node in enumerate(nodes):
        vector, t = latest[int(node)]
        want = second[i] if i < 20 else first[i]
        assert np.array_equal(vector, want)  # float32 exactly, in both formats
        if fmt == "json":
            assert t == (20.0 if i < 20 else 10.0)


def test_rows_of_many_requests_arrive_each_once_as_sent(kafka_bootstrap, make_topic):
    """kafka-python's sends batched by ``BATCH_BYTES`` (a live job publishes thousands of rows at a time):
    3,000 rows of 100 floats, several batches, each arrives once, exactly; a caller's batch_size is kept."""
    topic = make_topic(1, compacted=True)
    rows = np.random.default_rng(2).normal(size=(3000, 100)).astype(np.float32)
    with KafkaSink(kafka_bootstrap, embeddings_topic=topic, fmt="binary") as sink:
        assert sink._p._p.config["batch_size"] == BATCH_BYTES
        assert sink.publish_embeddings(np.arange(3000), rows, t=1.0) == 3000
    got = {}
    for rec in read_all(kafka_bootstrap, topic, 3000):
        got[int(rec.key)] = decode_embedding(rec.value, dict(rec.headers)["content-type"].decode())[0]
    assert sorted(got) == list(range(3000))
    assert all(np.array_equal(got[i], rows[i]) for i in range(3000))
    with KafkaSink(kafka_bootstrap, embeddings_topic=topic, fmt="binary", batch_size=4096) as sink:
        assert sink._p._p.config["batch_size"] == 4096


def test_predictions_and_bad_input(kafka_bootstrap, make_topic, backend):
    topic = make_topic(1)
    with KafkaSink(kafka_bootstrap, predictions_topic=topic, backend=backend) as sink:
        assert sink.publish_predictions([1, 2], [3, 4], [0.25, 0.75], t=5.0) == 2
        with pytest.raises(ConfigError, match="one each"):
            sink.publish_predictions([1], [2, 3], [0.5])
        with pytest.raises(ConfigError, match="NaN"):
            sink.publish_predictions([1], [2], [float("nan")])
        with pytest.raises(ConfigError, match="no embeddings_topic"):
            sink.publish_embeddings([1], np.zeros((1, 2)))
    got = [json.loads(r.value) for r in read_all(kafka_bootstrap, topic, 2)]
    assert got == [
        {"src": 1, "dst": 3, "t": 5.0, "score": 0.25},
        {"src": 2, "dst": 4, "t": 5.0, "score": 0.75},
    ]
    with pytest.raises(ConfigError, match="does not exist"):
        KafkaSink(kafka_bootstrap, embeddings_topic="no-such-topic", backend=backend)


def test_produce_dataset_by_name_lands_every_event_keyed_by_partition(kafka_bootstrap, backend):
    topic = f"jodie-{backend}-{time.monotonic_ns()}"
    report = produce_dataset(kafka_bootstrap, topic, "jodie_wikipedia", 4, fmt="binary", backend=backend)
    events = load("jodie_wikipedia")
    assert (report.events, report.partitions) == (len(events), 4)
    for p in range(4):
        with KafkaSource(
            partitions=[f"{topic}:{p}"], bootstrap_servers=kafka_bootstrap, backend=backend
        ) as src:
            want = events.take(hash_partition(events.src, 4) == p)
            got = []
            while sum(map(len, got)) < len(want):
                got.append(src.poll(10))
            assert np.array_equal(concat(got).eid, want.eid)  # all of them, in time order


def test_produce_dataset_from_a_file_at_a_rate(kafka_bootstrap, make_events, tmp_path):
    events = make_events(600)
    path = tmp_path / "events.jsonl"
    path.write_bytes(encode_json_lines(events))
    topic = f"file-{time.monotonic_ns()}"
    report = produce_dataset(kafka_bootstrap, topic, path, 3, rate=1000.0, fmt="json", batch_size=50)
    assert report.events == report.messages == 600
    assert report.seconds >= 0.5  # 600 events at 1000/s
    with KafkaSource(topic, bootstrap_servers=kafka_bootstrap) as source:
        got = concat(list(source.stream(idle_timeout_s=1.0)))
    assert np.array_equal(np.sort(got.eid), events.eid)
    with pytest.raises(ConfigError, match="rate"):
        produce_dataset(kafka_bootstrap, topic, path, 3, rate=0)


@pytest.mark.parametrize(
    ("backend", "producer_config", "admin"),
    [
        ("kafka-python", {"security_protocol": "SASL_SSL", "sasl_plain_password": "p", "linger_ms": 5},
         {"security_protocol": "SASL_SSL", "sasl_plain_password": "p"}),
        ("confluent", {"security.protocol": "sasl_ssl", "sasl.username": "u", "sasl.password": "p",
                       "ssl.ca.location": "/ca.pem", "linger.ms": 5},
         {"security_protocol": "SASL_SSL", "sasl_plain_username": "u", "sasl_plain_password": "p",
          "ssl_cafile": "/ca.pem"}),
    ],
)  # fmt: skip
def test_produce_dataset_creates_the_topic_with_the_producers_security_settings(
    backend, producer_config, admin
):
    """create_topic's admin client must reach a secured cluster the way the producer does; producer-only
    settings would make kafka-python's admin client refuse to start."""
    from kafka import KafkaAdminClient

    from streamgnn.connectors.kafka.settings import admin_settings

    got = admin_settings(backend, producer_config)
    assert got == admin
    assert set(got) <= set(KafkaAdminClient.DEFAULT_CONFIG)


def test_label_predictions_keyed_by_node_or_pair(kafka_bootstrap, make_topic, backend):
    topic = make_topic(1)
    with KafkaSink(kafka_bootstrap, predictions_topic=topic, backend=backend) as sink:
        node = [{"probability": 0.25, "label": 0}, {"probabilities": [0.5, 0.5], "label": 0}]
        assert sink.publish_label_predictions(["a", "b"], None, [1.0, 2.5], node, step=3) == 2
        assert sink.publish_label_predictions([1], [2], [4.0], [{"value": -1.5}], step=4) == 1
        with pytest.raises(ConfigError, match="1 nodes, 2 times"):
            sink.publish_label_predictions([1], None, [1.0, 2.0], node)
        with pytest.raises(ConfigError, match="NaN"):
            sink.publish_label_predictions([1], None, [1.0], [{"value": float("nan")}])
    records = read_all(kafka_bootstrap, topic, 3)
    assert [r.key for r in records] == [b"a", b"b", b"[1, 2]"]
    assert [json.loads(r.value) for r in records] == [
        {"node": "a", "t": 1.0, "probability": 0.25, "label": 0, "step": 3},
        {"node": "b", "t": 2.5, "probabilities": [0.5, 0.5], "label": 0, "step": 3},
        {"src": 1, "dst": 2, "t": 4.0, "value": -1.5, "step": 4},
    ]


def test_sink_refuses_node_ids_no_message_key_can_carry(kafka_bootstrap, make_topic, backend):
    topic = make_topic(1)
    with KafkaSink(kafka_bootstrap, embeddings_topic=topic, predictions_topic=topic, backend=backend) as sink:
        with pytest.raises(ConfigError, match="lone surrogate"):
            sink.publish_embeddings(["ok", "bad\ud800"], np.ones((2, 4), np.float32))
        with pytest.raises(ConfigError, match="lone surrogate"):
            sink.publish_predictions(["a"], ["\udfff"], [0.5])
        assert sink.publish_embeddings(["ok"], np.ones((1, 4), np.float32)) == 1
    (record,) = read_all(kafka_bootstrap, topic, 1)
    assert record.key == b"ok"


def test_produce_command_names_an_unreachable_broker_in_one_line_after_the_connect_timeout(tmp_path):
    streamgnn = str(Path(sys.executable).with_name("streamgnn"))
    cases = [
        (["--bootstrap", "127.0.0.1:1", "--connect-timeout", "1"], "127.0.0.1:1 (connection refused)"),
        (["--bootstrap", "no-such-host.invalid:9092", "--connect-timeout", "1"], "(unknown host)"),
        (["--bootstrap", "localhost:notaport"], "'localhost:notaport' is not 'host:port'"),
    ]
    for extra, expected in cases:
        began = time.monotonic()
        out = subprocess.run(
            [streamgnn, "produce", "collegemsg", "--topic", "t", *extra],
            capture_output=True, text=True, timeout=120, cwd=tmp_path,
        )  # fmt: skip
        assert out.returncode == 2, out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("streamgnn: error:") and expected in lines[0], lines
        assert time.monotonic() - began < 60  # the old client retried ~31 s, then printed a traceback
