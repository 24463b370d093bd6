"""Order and replay against a real broker: a finished topic replays exactly whatever the host's speed, a group
join is not idleness, a quiet live partition holds the others back for a bounded, measured time, and an
offset the log no longer holds is an error, never a silent skip."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from test_kafka_source import drain

from streamgnn.connectors.broker import LocalBroker
from streamgnn.connectors.kafka import EventProducer, KafkaSource, create_topic
from streamgnn.errors import OffsetOutOfRangeError
from streamgnn.events import EventBatch, concat
from streamgnn.store import StoreConfig, TemporalGraphStore


def slowed(source: KafkaSource, pause_s: float, every: int = 2) -> None:
    """A loaded host: once partitions are assigned, every ``every``-th fetch of the source's client comes
    ``pause_s`` late. (Before that, kafka-python polling this slowly never completes a join on Tansu.)"""
    consumer, calls = source._consumer, [0]
    poll = consumer.poll

    def slow_poll(timeout_s: float, max_messages: int):
        calls[0] += 1
        if calls[0] % every == 0 and source.assignment():
            time.sleep(pause_s)
        return poll(timeout_s, max_messages)

    consumer.poll = slow_poll


def test_replay_on_a_slow_loaded_host_builds_the_time_ordered_store(
    kafka_bootstrap, make_topic, make_events, backend
):
    """Fetches slower than any idle allowance (and a busy thread competing for the interpreter) must not
    free a partition whose data still sits in the topic: the store is the one built in time order."""
    topic = make_topic(3)
    events = make_events(9000, num_nodes=500)
    with EventProducer(kafka_bootstrap, topic, fmt="binary", batch_size=20, backend=backend) as producer:
        producer.send(events)
    reference = TemporalGraphStore(StoreConfig(num_partitions=2))
    reference.ingest(events)

    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            sum(range(10_000))

    spinner = threading.Thread(target=busy)
    spinner.start()
    try:
        store = TemporalGraphStore(StoreConfig(num_partitions=2))
        with KafkaSource(
            topic, bootstrap_servers=kafka_bootstrap, backend=backend, max_poll_messages=25
        ) as source:
            slowed(source, pause_s=1.5)
            for batch in drain(source, len(events), kafka_bootstrap):
                store.ingest(batch)
    finally:
        stop.set()
        spinner.join()
    assert store.num_edges == len(events)
    assert store.content_hash() == reference.content_hash()


@pytest.mark.parametrize("slow", [False, True])
def test_a_group_join_or_a_slow_fetch_is_not_idle_time(
    kafka_bootstrap, make_topic, make_events, backend, group_config, slow
):
    """Joining a group takes seconds (Tansu waits out the rebalance timeout), and a loaded host fetches
    late: a short idle timeout must still read everything, since idleness only counts once every
    assigned partition is read to its end."""
    topic = make_topic(2)
    events = make_events(3000)
    with EventProducer(kafka_bootstrap, topic, fmt="json", backend=backend) as producer:
        producer.send(events)
    with KafkaSource(
        topic, bootstrap_servers=kafka_bootstrap, backend=backend, group_id=f"join-{topic}",
        max_poll_messages=500, **group_config,
    ) as source:  # fmt: skip
        if slow:
            slowed(source, pause_s=1.2, every=3)
        began = time.monotonic()
        got = concat(list(source.stream(idle_timeout_s=1.0)))
        took = time.monotonic() - began
    assert np.array_equal(np.sort(got.eid), events.eid), f"{len(got)} of {len(events)} after {took:.1f}s"


def test_a_quiet_live_partition_holds_the_others_back_for_idle_partition_s(
    kafka_bootstrap, make_topic, backend
):
    """Partition 0 sends t=10 and partition 1 t=11, then both go quiet. With ``idle_partition_s=1`` the
    events wait until their partitions were quiet for 1 s (partition 0 might still send t=10.5, partition 1
    t=10.7); with 0 they come as soon as both partitions are read to their end."""
    from streamgnn.codec import encode_binary

    for wait in (1.0, 0.0):
        topic = make_topic(2)
        with KafkaSource(
            topic, bootstrap_servers=kafka_bootstrap, backend=backend, idle_partition_s=wait
        ) as source:
            with EventProducer(kafka_bootstrap, topic, backend=backend) as producer:
                for p, t in ((0, 10.0), (1, 11.0)):
                    one = EventBatch.from_columns(src=[p], dst=[9], t=[t], eid=[int(t)])
                    producer._p.send(topic, encode_binary(one), partition=p)
            sent = time.monotonic()  # acknowledged by the broker: the source cannot have had them before
            arrivals: dict[float, float] = {}
            deadline = time.monotonic() + 60
            while len(arrivals) < 2:
                assert time.monotonic() < deadline, arrivals
                batch = source.poll(0.05)
                for t in [] if batch is None else batch.t.tolist():
                    arrivals[t] = time.monotonic()
        held = arrivals[11.0] - sent
        assert arrivals[10.0] <= arrivals[11.0]
        assert held >= wait, f"idle_partition_s={wait}: t=11 came {held:.2f}s after it was produced"
        assert held < wait + 10, "the wait is bounded"


@pytest.fixture
def own_broker():
    with LocalBroker() as broker:
        yield broker


def test_a_recreated_topic_is_an_error_not_a_silent_skip(own_broker, make_events, backend):
    """The broker loses its data (restart with memory storage) and the topic comes back empty: the offsets a
    running source holds, and those a checkpoint holds, lie beyond the new log's end. Reading on would
    skip what is produced now, so both stop with an error naming the partition and the offsets."""
    from streamgnn.codec import encode_json_event
    from streamgnn.connectors.kafka import Producer

    topic, events = "recreated", make_events(400)
    create_topic(own_broker.bootstrap, topic, 1)
    with EventProducer(own_broker.bootstrap, topic, fmt="json", backend=backend) as producer:
        producer.send(events[:300])
    source = KafkaSource(topic, bootstrap_servers=own_broker.bootstrap, backend=backend).start()
    try:
        drain(source, 300, own_broker.bootstrap)
        assert source.positions() == {f"{topic}:0": 300}
        own_broker.stop()
        own_broker.start()  # same port, empty memory storage
        # the topic comes back on first use (Tansu creates topics on demand, maybe at the source's request)
        with Producer(backend, own_broker.bootstrap, {}) as raw:
            for i in range(300, 400):
                raw.send(topic, encode_json_event(events, i), partition=0)
        with pytest.raises(
            OffsetOutOfRangeError, match=rf"{topic}:0: the next offset to read, 300, is after"
        ):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                assert source.poll(0.2) is None, "events past the new log's end were delivered"
    finally:
        source.close()
    with (
        pytest.raises(OffsetOutOfRangeError, match=r"300, is after the end of its log \[0, \d+\]"),
        KafkaSource(
            topic, bootstrap_servers=own_broker.bootstrap, backend=backend, start_offsets={f"{topic}:0": 300}
        ) as restarted,
    ):
        list(restarted.stream(idle_timeout_s=5))
