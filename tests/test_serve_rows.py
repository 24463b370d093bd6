"""One bad row of the embeddings topic is a dead letter with its reason; every other row of the same poll is
applied. Rows are real ``ConsumerRecord`` s given to the reader's decoding (a property over hostile rows),
and the issue's case goes through a real broker and the service's HTTP API."""

from __future__ import annotations

import json
import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import KafkaProducer
from kafka.consumer.fetcher import ConsumerRecord
from test_serve_edge import request

from streamgnn.embeddings.table import EmbeddingTable
from streamgnn.serve import EmbeddingService, ServeConfig
from streamgnn.serve.reader import EmbeddingsReader

DIM = 4
F32 = [("content-type", b"application/x-streamgnn-embedding-f32")]


def dead_letters(reader: EmbeddingsReader) -> dict[str, float]:
    """The reader's dead-letter counter, by reason label."""
    return {
        s.labels["reason"]: s.value
        for m in reader.metrics.registry.collect()
        if m.name == "streamgnn_dead_letters"
        for s in m.samples
        if s.name.endswith("_total")
    }


def record(offset: int, key: bytes | None, value: bytes | None, headers=()) -> ConsumerRecord:
    return ConsumerRecord(
        "embeddings", 0, None, offset, 1_000, 0, key, value, list(headers), None, -1, -1, -1
    )


def nested(depth: int) -> bytes:
    return b'{"embedding": ' + b"[" * depth + b"1" + b"]" * depth + b"}"


HOSTILE_VALUES = [
    b'{"embedding": [' + str(10**400).encode() + b", 0, 0, 0]}",  # OverflowError in float32
    b'{"embedding": [' + b"9" * 5000 + b", 0, 0, 0]}",  # beyond the int parser's digit limit
    b'{"embedding": [1e999, 0, 0, 0]}',
    b'{"embedding": [NaN, 0, 0, 0]}',
    b'{"embedding": [1, 2, 3]}',  # a 3-d row in a 4-d table
    b'{"embedding": [[1, 2], [3, 4]]}',
    b'{"embedding": [[1, 2], [3]]}',  # ragged
    b'{"embedding": "abcd"}',
    b'{"embedding": {"a": 1}}',
    b'{"embedding": null}',
    b'{"embedding": [true, false, null, "x"]}',
    b'{"embedding": [1, 2, 3, 4], "t": "soon"}',
    b'{"embedding": [1, 2, 3, 4], "t": [1]}',
    b'{"embedding": [1, 2, 3, 4], "t": 1e999}',
    b'{"vector": [1, 2, 3, 4]}',
    b"[1, 2, 3, 4]",  # not an object: no .get
    b'"embedding"',
    b"12",
    b"null",
    b"",
    b"\xff\xfe\x00",  # not UTF-8
    b'{"embedding": [1, 2, 3, 4]',  # cut short
    nested(100_000),  # deeper than the parser's recursion
    nested(5),
    b"\x00\x00\x80",  # not whole float32s when sent as f32
    np.full(4, 1e30, "<f4").tobytes(),  # a squared norm beyond float32
]
HOSTILE_KEYS = [None, b"", b"1_0", b" 1", b"+1", b"\xd9\xa1", b"\xff", b"9" * 30, b"-" * 3, b"x"]


@st.composite
def rows(draw) -> tuple[list[ConsumerRecord], dict[int, np.ndarray]]:
    """A poll's records, good and hostile mixed, and the vector each good node must end with."""
    records, expected, good_rows = [], {}, 0
    for i, good in enumerate(draw(st.lists(st.booleans(), min_size=1, max_size=25))):
        if good:
            node = draw(st.integers(0, 9))
            vec = np.array(draw(st.lists(st.integers(-100, 100), min_size=DIM, max_size=DIM)), np.float32)
            if draw(st.booleans()):
                value, headers = json.dumps({"node": node, "t": 1.0, "embedding": vec.tolist()}).encode(), ()
            else:
                value, headers = vec.astype("<f4").tobytes(), [*F32, ("t", b"2.5")]
            expected[node] = vec
            good_rows += 1
            records.append(record(i, str(node).encode(), value, headers))
            continue
        key = draw(st.sampled_from([*HOSTILE_KEYS, b"55"]))  # a node of its own: it may be applied
        value = draw(st.sampled_from([*HOSTILE_VALUES, None]) | st.binary(max_size=40))
        headers = draw(
            st.sampled_from([(), F32, [("t", b"\xff")], [("t", b"nan")], [("t", None)], [(None, b"")]])
        )
        records.append(record(i, key, value, headers))
    return records, expected, good_rows


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(poll=rows())
def test_any_row_is_applied_or_dead_lettered_and_the_others_are_applied(poll):
    records, expected, good_rows = poll
    reader = EmbeddingsReader("unused:9092", "embeddings", table=EmbeddingTable(DIM))
    reader._apply(records)
    letters = sum(dead_letters(reader).values())
    assert reader.messages + letters == len(records)  # each row applied or dead-lettered, once
    assert reader.messages >= good_rows
    ids = sorted(expected)
    if ids:  # every good node holds its last good row's vector, whatever the hostile rows around it held
        got = reader.table.embeddings(np.array(ids, np.int64))
        assert all(np.array_equal(row, expected[n]) for n, row in zip(ids, got, strict=True))


def test_the_issues_row_in_a_real_poll_leaves_the_other_ten_served(kafka_bootstrap):
    """Ten good rows and one holding 10**400, in one poll: the ten are served, the one counted as a dead
    letter with its reason, and /health says 10 nodes."""
    from streamgnn.connectors.kafka import create_topic

    topic = f"rows-{os.getpid()}"
    create_topic(kafka_bootstrap, topic, 1, compacted=True)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for node in range(5):
        producer.send(
            topic, json.dumps({"node": node, "t": 1, "embedding": [node, 1, 0, 0]}).encode(), key=b"%d" % node
        )
    producer.send(topic, HOSTILE_VALUES[0], key=b"99")
    for node in range(5, 10):
        producer.send(
            topic, json.dumps({"node": node, "t": 1, "embedding": [node, 1, 0, 0]}).encode(), key=b"%d" % node
        )
    producer.flush()
    producer.close()
    with EmbeddingService(ServeConfig(port=0, log_every_s=0), kafka_bootstrap, topic) as service:
        assert service.reader.wait_caught_up(120)
        status, _, raw = request(service.url, "/health")
        assert status == 200 and json.loads(raw)["nodes"] == 10
        status, _, raw = request(service.url, "/embeddings?ids=" + ",".join(map(str, range(10))))
        assert status == 200
        assert [e["embedding"][0] for e in json.loads(raw)["embeddings"]] == list(range(10))
        status, _, _ = request(service.url, "/embeddings?ids=99")
        assert status == 404
        letters = dead_letters(service.reader)
        assert letters == {"undecodable embedding message": 1.0}, letters
