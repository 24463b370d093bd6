"""``TopicReader`` / ``read_topic``: a topic read directly (the embeddings service, the router's read-back, a
job's lag, the demo's count) gives the same records through either client, from chosen offsets to the end
offsets taken when the read began, and asking for a topic never creates it."""

from __future__ import annotations

import uuid

from streamgnn.connectors.kafka import Producer, TopicReader, read_topic


def fill(bootstrap: str, topic: str, backend: str, n: int = 30) -> list[tuple[int, bytes, bytes]]:
    """``n`` keyed messages with a header, over partitions 0 and 1 in turn: ``(partition, key, value)``."""
    sent = [(i % 2, f"k{i}".encode(), f"v{i}".encode()) for i in range(n)]
    with Producer(backend, bootstrap, {}) as producer:
        for p, key, value in sent:
            producer.send(topic, value, key=key, partition=p, headers=[("h", key + b"!")])
    return sent


def test_a_topic_read_to_its_end_gives_every_record_once_in_offset_order(
    kafka_bootstrap, make_topic, backend
):
    topic = make_topic(2)
    sent = fill(kafka_bootstrap, topic, backend)
    got = read_topic(kafka_bootstrap, topic, backend=backend)
    assert sorted((r.partition, r.key, r.value) for r in got) == sorted(sent)
    assert all(dict(r.headers)["h"] == r.key + b"!" and r.topic == topic for r in got)
    assert all(r.timestamp is not None and r.timestamp > 0 for r in got)
    for p in (0, 1):
        offsets = [r.offset for r in got if r.partition == p]
        assert offsets == list(range(15))  # in order, none twice


def test_a_read_from_chosen_offsets_ends_at_the_end_offsets_it_began_with(
    kafka_bootstrap, make_topic, backend
):
    topic = make_topic(2)
    fill(kafka_bootstrap, topic, backend)
    with TopicReader(kafka_bootstrap, backend=backend) as reader:
        assert reader.partitions(topic) == [0, 1]
        ends = reader.end_offsets(topic)  # (Tansu's may lie inside the last record batch: <= 15)
        assert set(ends) == {0, 1} and 0 < ends[1] <= 15 and reader.end_offsets(topic, [1]) == {1: ends[1]}
        reader.assign(topic, {0: 10, 1: None})  # partition 1 from its beginning
        assert reader.positions() == {0: 10, 1: 0}
        got = reader.read_to(ends)
        assert reader.positions()[0] >= 15 and reader.positions()[1] >= 15
    first = {p: min(r.offset for r in got if r.partition == p) for p in (0, 1)}
    assert first == {0: 10, 1: 0}
    assert sorted(r.offset for r in got if r.partition == 0) == list(range(10, 15))
    assert sorted(r.offset for r in got if r.partition == 1) == list(range(15))


def test_asking_for_a_topic_that_does_not_exist_does_not_create_it(kafka_bootstrap, backend):
    topic = f"absent-{uuid.uuid4().hex[:10]}"
    with TopicReader(kafka_bootstrap, backend=backend) as reader:
        assert reader.partitions(topic) == []
        assert reader.partitions(topic) == []  # (a broker that creates topics on request would have by now)
