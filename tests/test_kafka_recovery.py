"""Crashes and outages: a consumer killed with SIGKILL resumes from its checkpoint, and a frozen broker
costs time, never events."""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from kafka_markers import MARKER_EID, markers, without_markers

from streamgnn.connectors.broker import LocalBroker
from streamgnn.connectors.kafka import EventProducer, KafkaSource, create_topic
from streamgnn.errors import ConnectorError
from streamgnn.events import concat
from streamgnn.partition import hash_partition
from streamgnn.store import StoreConfig, TemporalGraphStore


def consume_with_checkpoints(bootstrap: str, topic: str, ckpt: str, backend: str, hold_at: str = "0") -> None:
    """The worker: resume from ``ckpt`` if there is one, checkpoint every few batches, print progress;
    with ``hold_at``, stop and wait (for the SIGKILL) once the store holds that many edges, so that a
    loaded host cannot let it finish before the test has read its progress."""
    path = Path(ckpt)
    store = (
        TemporalGraphStore.load(path) if path.exists() else TemporalGraphStore(StoreConfig(num_partitions=2))
    )
    source = KafkaSource(
        topic,
        bootstrap_servers=bootstrap,
        backend=backend,
        store=store,
        max_batch_events=1000,
        max_poll_messages=40,
    )
    with source as src:
        for i, batch in enumerate(src.stream(idle_timeout_s=0)):  # the topic is finished: read to its end
            store.ingest(batch)
            if i % 4 == 3:
                store.save(path, source_offsets=src.positions())
            print(store.num_edges, flush=True)
            if 0 < int(hold_at) <= store.num_edges:
                sys.stdin.readline()  # nobody writes: the test kills it here at the latest
        store.save(path, source_offsets=src.positions())
    print("done", flush=True)


def test_consumer_killed_mid_stream_resumes_from_checkpoint_to_the_same_store(
    kafka_bootstrap, make_topic, make_events, backend, tmp_path
):
    """Three partitions and binary messages of 50 events: the store's content depends on the order events
    arrive in, so this holds only because the source merges partitions into one (time, partition, offset)
    order whatever the fetches did; and a restart inside a half-delivered message re-reads rows the
    checkpoint already holds, which the store skips by event id."""
    topic = make_topic(3)
    events = make_events(20_000, num_nodes=2000)
    with EventProducer(kafka_bootstrap, topic, fmt="binary", batch_size=50, backend=backend) as producer:
        producer.send(events)
    sizes = np.bincount(hash_partition(events.src, 3), minlength=3)
    ends = {f"{topic}:{p}": int(-(-sizes[p] // 50)) for p in range(3)}  # messages per partition
    reference = TemporalGraphStore(StoreConfig(num_partitions=2))
    with KafkaSource(topic, bootstrap_servers=kafka_bootstrap, backend=backend) as source:
        for batch in source.stream(idle_timeout_s=0):
            reference.ingest(batch)
        assert source.positions() == ends
    assert reference.num_edges == len(events)

    ckpt = tmp_path / "ckpt"
    cmd = [sys.executable, __file__, kafka_bootstrap, topic, str(ckpt), backend]
    worker = subprocess.Popen([*cmd, "12000"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    progress = 0
    while progress < 6000:  # kill it well into the stream (6000-12000 edges), between or during checkpoints
        line = worker.stdout.readline()
        assert line and line.strip() != "done", "the worker finished before it could be killed"
        progress = int(line)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    worker.stdin.close()
    crashed = TemporalGraphStore.load(ckpt)
    assert 0 < crashed.num_edges < len(events)
    assert crashed.source_offsets.keys() == ends.keys()
    assert sum(crashed.source_offsets.values()) < sum(ends.values())

    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("done")
    resumed = TemporalGraphStore.load(ckpt)
    assert resumed.source_offsets == ends
    assert resumed.num_edges == len(events)
    assert resumed.content_hash() == reference.content_hash()


@pytest.fixture
def own_broker():
    """A broker of this test's own, since freezing the shared one would stall every other test."""
    with LocalBroker() as broker:
        yield broker


def test_broker_frozen_longer_than_client_timeouts_loses_nothing(own_broker, make_events, backend, caplog):
    bootstrap = own_broker.bootstrap
    topic = "outage"
    create_topic(bootstrap, topic, 2)
    events = make_events(6000)
    first, second = events[:3000], events[3000:]
    fast = {
        "kafka-python": {
            "session_timeout_ms": 3000, "heartbeat_interval_ms": 500, "max_poll_interval_ms": 3000,
            "request_timeout_ms": 2000, "reconnect_backoff_max_ms": 1000,
        },
        "confluent": {
            "session.timeout.ms": 3000, "heartbeat.interval.ms": 500, "max.poll.interval.ms": 3000,
            "socket.timeout.ms": 2000, "reconnect.backoff.max.ms": 1000,
        },
    }[backend]  # fmt: skip
    caplog.set_level(logging.WARNING, logger="streamgnn")
    with (
        EventProducer(bootstrap, topic, fmt="json", backend=backend) as producer,
        KafkaSource(
            topic,
            bootstrap_servers=bootstrap,
            backend=backend,
            group_id="outage",
            commit_interval_s=0.5,
            **fast,
        ) as source,  # fmt: skip
    ):
        producer.send(first)
        producer.flush()
        got = []
        while sum(map(len, got)) < 1000:
            got.append(source.poll(15))
        own_broker.pause()
        sender = threading.Thread(target=lambda: (producer.send(second), producer.flush()))
        sender.start()  # produced while the broker is frozen: held and resent by the producer
        frozen_until = time.monotonic() + 6.0  # twice the session timeout, three times the request timeout
        while time.monotonic() < frozen_until:
            batch = source.poll(0.5)
            if batch is not None:
                got.append(batch)  # whatever was buffered before the freeze
        own_broker.resume()
        sender.join()  # the producer recovered (bounded by the test's timeout, not by a guess at the host)
        # a marker in each partition, produced after every event: once both arrived, every event came
        # and any duplicate came before them (bounded by the test's timeout, not by a guess at the host)
        sent = markers(2, events.t.max())
        producer.send(sent)
        producer.flush()
        while not set(sent.eid) <= set(concat(got).eid if got else []):
            batch = source.poll(1.0)
            if batch is not None:
                got.append(batch)
    eids = concat(got).eid
    assert sorted(eids[eids >= MARKER_EID]) == sorted(sent.eid), "a marker was delivered twice"
    eids = without_markers(eids)
    assert len(eids) == len(events), "events were delivered twice"
    assert np.array_equal(np.sort(eids), events.eid)
    assert any("retrying" in r.getMessage().lower() for r in caplog.records), "the outage went unlogged"


def test_local_broker_refuses_a_second_start_and_a_port_another_program_holds(own_broker):
    """A second start() would orphan the running Tansu; on a busy fixed port the readiness probe would
    reach the other program and call that a started broker."""
    pid, bootstrap = own_broker.pid, own_broker.bootstrap
    with pytest.raises(ConnectorError, match="already runs"):
        own_broker.start()
    assert own_broker.pid == pid and own_broker.bootstrap == bootstrap
    create_topic(bootstrap, "still-served", 1)  # the first broker still answers
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        busy = LocalBroker(port=other.getsockname()[1])
        with pytest.raises(ConnectorError, match="in use"):
            busy.start()
        assert busy.pid is None


HOLDER = """
import sys, time
from streamgnn.connectors.broker import LocalBroker
broker = LocalBroker().start()
print(broker.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_local_broker_dies_with_the_process_that_started_it(sig):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(holder.stdout.readline())
        assert _alive(pid)
        holder.send_signal(sig)
        holder.wait()
        while _alive(pid):  # until the broker ends (bounded by the test's timeout: one that outlived its
            time.sleep(0.05)  # parent, re-parented to init, fails the test there)
    finally:
        holder.kill()
        holder.wait()


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for init to reap it counts as dead)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


if __name__ == "__main__":  # the worker process of the SIGKILL test
    consume_with_checkpoints(*sys.argv[1:])
