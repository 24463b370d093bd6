"""KafkaSource and EventProducer against a real broker, once per installed client."""

from __future__ import annotations

import logging
import os
import threading
import time

import numpy as np
import pytest
from topic_records import end_offsets

from streamgnn.codec import CONTENT_JSON, encode_json_event, encode_json_lines
from streamgnn.connectors.kafka import EventProducer, KafkaSource, create_topic
from streamgnn.connectors.sink import KafkaSink
from streamgnn.errors import CodecError, ConfigError, ConnectorError
from streamgnn.events import EventBatch, concat
from streamgnn.partition import hash_partition
from streamgnn.store import StoreConfig, TemporalGraphStore


def drain(source: KafkaSource, n: int, bootstrap: str) -> list:
    """Batches until ``n`` events arrived and the source handed out every message its partitions held then
    (their end offsets): nothing more can come, so no more than ``n`` may have (bounded by the test's
    timeout, not by a guess at the host's speed)."""
    batches, got = [], 0

    def take() -> None:
        nonlocal got
        batch = source.poll(0.5)
        if batch is not None:
            batches.append(batch)
            got += len(batch)

    while got < n:
        take()
    ends = end_offsets(bootstrap, source.assignment())
    while any(source.positions().get(key, 0) < end for key, end in ends.items()):
        take()
    assert got == n, f"{got} events arrived, {n} were produced"
    return batches


@pytest.mark.parametrize("fmt", ["json", "binary"])
def test_multi_partition_topic_delivers_every_event_once_in_time_order(
    kafka_bootstrap, make_topic, make_events, backend, fmt
):
    topic = make_topic(4)
    events = make_events(6000)
    with EventProducer(kafka_bootstrap, topic, fmt=fmt, batch_size=250, backend=backend) as producer:
        for piece in events.split(1000):
            producer.send(piece)
    with KafkaSource(
        topic, bootstrap_servers=kafka_bootstrap, backend=backend, max_batch_events=700
    ) as source:
        batches = drain(source, len(events), kafka_bootstrap)
        assert source.assignment() == {f"{topic}:{p}" for p in range(4)}
        assert sum(source.positions().values()) == producer.messages
    got = concat(batches)
    assert np.array_equal(np.sort(got.eid), events.eid)
    order = np.argsort(got.eid)
    assert np.array_equal(got.src[order], events.src) and np.array_equal(got.dst[order], events.dst)
    # time order holds within every batch, and across batches for each topic partition
    assert all(np.all(np.diff(b.t) >= 0) for b in batches)
    part = hash_partition(got.src, 4)
    for p in range(4):
        assert np.all(np.diff(got.t[part == p]) >= 0)


def test_producer_keys_events_by_graph_partition(kafka_bootstrap, make_topic, make_events, backend):
    topic = make_topic(3)
    events = make_events(3000)
    with EventProducer(kafka_bootstrap, topic, fmt="binary", batch_size=100, backend=backend) as producer:
        producer.send(events)
    for p in range(3):
        with KafkaSource(
            partitions=[f"{topic}:{p}"], bootstrap_servers=kafka_bootstrap, backend=backend
        ) as one:
            want = int((hash_partition(events.src, 3) == p).sum())
            got = concat(drain(one, want, kafka_bootstrap))
            assert np.all(hash_partition(got.src, 3) == p)


def test_checkpoint_offsets_resume_exactly_where_the_store_stopped(
    kafka_bootstrap, make_topic, make_events, backend, tmp_path
):
    topic = make_topic(1)
    events = make_events(5000)
    with EventProducer(kafka_bootstrap, topic, fmt="json", backend=backend) as producer:
        producer.send(events)
    whole = TemporalGraphStore(StoreConfig(num_partitions=2))
    whole.ingest(events)

    store = TemporalGraphStore(StoreConfig(num_partitions=2))
    with KafkaSource(
        topic, bootstrap_servers=kafka_bootstrap, backend=backend, max_batch_events=800
    ) as source:
        while store.num_edges < 2000:
            batch = source.poll(10)
            assert batch is not None
            store.ingest(batch)
        store.save(tmp_path / "ckpt", source_offsets=source.positions())
        store.ingest(source.poll(10))  # ingested after the checkpoint: lost in the "crash" below

    restored = TemporalGraphStore.load(tmp_path / "ckpt")
    assert restored.source_offsets == {f"{topic}:0": restored.num_edges}
    with KafkaSource(topic, bootstrap_servers=kafka_bootstrap, backend=backend, store=restored) as source:
        for batch in drain(source, len(events) - restored.num_edges, kafka_bootstrap):
            restored.ingest(batch)
    assert restored.num_edges == len(events)
    assert restored.content_hash() == whole.content_hash()


def test_backpressure_pauses_fetching_and_keeps_group_membership(
    kafka_bootstrap, make_topic, make_events, backend, group_config
):
    """A consumer slower than max.poll.interval in total stays in its group, with a bounded buffer."""
    topic = make_topic(2)
    events = make_events(12_000)
    with EventProducer(kafka_bootstrap, topic, fmt="binary", batch_size=50, backend=backend) as producer:
        producer.send(events)
    bound, poll = 1000, 5
    with KafkaSource(
        topic, bootstrap_servers=kafka_bootstrap, backend=backend, group_id=f"slow-{topic}",
        max_buffered_events=bound, max_batch_events=300, max_poll_messages=poll, **group_config,
    ) as source:  # fmt: skip
        batches, got, started = [], 0, time.monotonic()
        while got < len(events):
            batch = source.poll(15)
            assert batch is not None, f"stalled after {got} events"
            batches.append(batch)
            got += len(batch)
            time.sleep(0.12)  # a slow model step
        slow_s = time.monotonic() - started
        # every message handed out with every event (to the end offsets; some brokers, Tansu, report an end
        # inside the last record batch): nothing more to come
        ends = end_offsets(kafka_bootstrap, source.assignment())
        assert all(source.positions()[key] >= end for key, end in ends.items()), (source.positions(), ends)
        stats = source.stats
    assert slow_s > 3.0 * 1.3  # well beyond max_poll_interval_ms=3000
    assert stats.pauses >= 1
    assert stats.max_buffered_events <= bound + poll * 50 * 2  # one poll per partition past the bound
    assert stats.assignments == 1, "the slow consumer was dropped from its group"
    assert np.array_equal(np.sort(concat(batches).eid), events.eid)


def test_rejects_settings_that_break_the_delivery_contract(kafka_bootstrap, make_topic, backend):
    topic = make_topic(1)
    auto = {"enable_auto_commit": True} if backend == "kafka-python" else {"enable.auto.commit": True}
    with pytest.raises(ConfigError, match="auto.commit"):
        KafkaSource(topic, bootstrap_servers=kafka_bootstrap, backend=backend, **auto)
    with pytest.raises(ConfigError, match="does not exist"):
        KafkaSource("no-such-topic", bootstrap_servers=kafka_bootstrap, backend=backend).start()
    with pytest.raises(ConfigError, match="dead-letter topic"):
        KafkaSource(
            topic, bootstrap_servers=kafka_bootstrap, backend=backend, dead_letter_topic="nope"
        ).start()
    with pytest.raises(ConfigError, match="partitions"):
        create_topic(kafka_bootstrap, topic, 3)


def test_json_lines_messages_and_headerless_json_decode(kafka_bootstrap, make_topic, make_events, backend):
    """Several events per JSON message, with and without a content-type header."""
    from kafka import KafkaProducer

    topic = make_topic(1)
    events = make_events(900)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for i, piece in enumerate(events.split(100)):
        headers = [("content-type", CONTENT_JSON.encode())] if i % 2 else None
        producer.send(topic, encode_json_lines(piece), headers=headers)
    producer.flush()
    producer.close()
    with KafkaSource(topic, bootstrap_servers=kafka_bootstrap, backend=backend) as source:
        got = concat(drain(source, len(events), kafka_bootstrap))
        assert source.stats.dead_letters == 0
    assert np.array_equal(got.eid, events.eid)


def test_stream_schema_comes_from_the_store_not_from_where_the_source_resumes(
    kafka_bootstrap, make_topic, backend
):
    """Resuming right at an event of the wrong id type or feature width must not make it the stream's."""
    from kafka import KafkaProducer

    topic = make_topic(1)
    store = TemporalGraphStore(StoreConfig(num_partitions=2))
    store.ingest(EventBatch.from_columns(src=[1], dst=[2], t=[0.0], eid=[0], features=[[0.5, 0.5]]))
    assert store.ids.id_type == "int" and store.edge_feature_dim == 2
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for src, dst, eid, features in [("a", "b", 1, None), (1, 2, 2, None), (1, 2, 3, [1.0, 2.0, 3.0]),
                                    (1, 2, 4, [1.0, 2.0]), (2, 3, 5, [3.0, 4.0])]:  # fmt: skip
        batch = EventBatch.from_columns(
            src=[src], dst=[dst], t=[float(eid)], eid=[eid], features=None if features is None else [features]
        )
        producer.send(topic, encode_json_event(batch, 0))
    producer.flush()
    producer.close()
    with KafkaSource(topic, bootstrap_servers=kafka_bootstrap, backend=backend, store=store) as source:
        got = concat(drain(source, 2, kafka_bootstrap))
        assert source.stats.dead_letters == 3
    assert got.eid.tolist() == [4, 5]
    assert store.ingest(got).dead_letters == []


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_bad_client_settings_name_only_keys_and_leave_no_client_behind(kafka_bootstrap, make_topic, backend):
    """A misspelt password key must not print the password (client errors quote values), and a source whose
    dead-letter producer fails must close the consumer it already made."""
    topic = make_topic(1)
    secret = "hunter2-must-not-show"
    if backend == "kafka-python":
        typo = {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_plain_pasword": secret,
        }
    else:
        typo = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.pasword": secret}
    key = list(typo)[-1]
    kw = {"bootstrap_servers": kafka_bootstrap, "backend": backend}
    threads, fds = set(threading.enumerate()), _open_fds()
    attempts = [
        lambda: KafkaSource(topic, **kw, **typo),
        lambda: KafkaSource(topic, **kw, dead_letter_topic=topic, producer_config=typo),
        lambda: EventProducer(kafka_bootstrap, topic, backend=backend, **typo),
        lambda: KafkaSink(kafka_bootstrap, embeddings_topic=topic, backend=backend, **typo),
    ]
    for attempt in attempts:
        with pytest.raises(ConfigError) as info:
            attempt()
        assert key in str(info.value) and secret not in str(info.value)
        assert info.value.__cause__ is None and info.value.__suppress_context__  # no traceback shows it
    deadline = time.monotonic() + 60  # a bound on waiting for the threads to end, not a condition
    while (set(threading.enumerate()) - threads or _open_fds() > fds) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not set(threading.enumerate()) - threads
    assert _open_fds() <= fds


def test_producer_sends_no_part_of_a_batch_it_cannot_send_whole(
    kafka_bootstrap, make_topic, make_events, backend
):
    """A row that cannot be encoded, or a message over the size limit, raises before anything is queued;
    an oversized message is refused at once rather than retried forever."""
    from kafka import KafkaConsumer, TopicPartition

    topic = make_topic(2)
    events = make_events(20)
    t = events.t.copy()
    t[np.flatnonzero(hash_partition(events.src, 2) == 1)[0]] = np.nan  # partition 0 would go out first
    with EventProducer(kafka_bootstrap, topic, backend=backend) as producer:
        with pytest.raises(CodecError, match="NaN"):
            producer.send(EventBatch(events.kind, events.src, events.dst, t, events.eid))
        assert producer.messages == 0
    big = make_events(80_000)  # about 1.3 MB per partition as one binary message
    with EventProducer(
        kafka_bootstrap, topic, fmt="binary", batch_size=len(big), backend=backend
    ) as producer:
        began = time.monotonic()
        with pytest.raises(ConnectorError, match="batch_size"):
            producer.send(big)
        assert time.monotonic() - began < 10
        assert producer.send(events) == 2
    reader = KafkaConsumer(bootstrap_servers=kafka_bootstrap)
    ends = reader.end_offsets([TopicPartition(topic, p) for p in range(2)])
    reader.close()
    assert sorted(ends.values()) == [1, 1]  # the two binary messages of the good batch, nothing else


def test_a_store_from_another_stream_stops_the_source_with_one_loud_error(
    kafka_bootstrap, make_topic, make_events, backend, caplog
):
    """Every event of the topic has string ids, the store int ids: a configuration error, said once at
    ERROR level and then raised, not thousands of quiet dead letters."""
    topic = make_topic(1)
    store = TemporalGraphStore(StoreConfig(num_partitions=2))
    store.ingest(make_events(10))
    events = make_events(300)
    named = EventBatch.from_columns(
        src=[f"n{i}" for i in events.src], dst=[f"n{i}" for i in events.dst], t=events.t, eid=events.eid
    )
    with EventProducer(kafka_bootstrap, topic, fmt="json", backend=backend) as producer:
        producer.send(named)
    caplog.set_level(logging.ERROR)
    with (
        KafkaSource(topic, bootstrap_servers=kafka_bootstrap, backend=backend, store=store) as source,
        pytest.raises(ConfigError, match="none of the first 100 events .* fits the store .*has str node ids"),
    ):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert source.poll(0.2) is None
    errors = [r for r in caplog.records if "do not fit the store" in r.getMessage()]
    assert len(errors) == 1, [r.getMessage() for r in caplog.records]


def test_linger_bounds_what_a_batch_adds_for_a_slow_caller(kafka_bootstrap, make_topic, make_events, backend):
    """A caller that needs 1 ms per event gets batches of about linger_s worth of events (here 0.1 s: about
    100), not max_batch_events, so no event waits behind a huge batch; without linger_s it gets them all."""
    topic = make_topic(1)
    events = make_events(5000)
    with EventProducer(kafka_bootstrap, topic, fmt="binary", batch_size=500, backend=backend) as producer:
        producer.send(events)
    for linger in (0.1, None):
        sizes = []
        with KafkaSource(
            topic, bootstrap_servers=kafka_bootstrap, backend=backend, linger_s=linger
        ) as source:
            while sum(sizes) < 1500:
                batch = source.poll(10)
                assert batch is not None
                sizes.append(len(batch))
                time.sleep(len(batch) * 1e-3)  # the caller's work: 1 ms per event
        if linger is None:
            assert max(sizes) >= 1000, sizes  # whatever is ready (the whole topic, once fetched)
        else:
            # after the first batch (before the pace is known) about 100 events; a slow host only shrinks it
            assert max(sizes[1:]) <= 200, sizes


def test_a_kafka_python_without_the_state_the_pause_workaround_needs_is_refused_loudly(
    kafka_bootstrap, make_topic, monkeypatch
):
    """The workaround for kafka-python 3.0.12's resumed partitions writes the fetcher's state; a version
    that changed it must be refused at once, not left to stall the first time backpressure resumes."""
    import kafka

    class Changed(kafka.KafkaConsumer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            del self._fetcher._next_partition_records

    monkeypatch.setattr(kafka, "KafkaConsumer", Changed)
    threads = set(threading.enumerate())
    with pytest.raises(ConnectorError, match=r"kafka-python==3\.0\.12"):
        KafkaSource(make_topic(1), bootstrap_servers=kafka_bootstrap, backend="kafka-python")
    deadline = time.monotonic() + 60
    while set(threading.enumerate()) - threads and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not set(threading.enumerate()) - threads, "the refused client was left running"
