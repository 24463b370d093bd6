"""Every source meets ``streamgnn.sources.EventSource``, checked the same way on each (as river checks every
estimator): built for real (a file on disk, a shipped dataset, a topic on the tests' Tansu broker), each hands
out its events in order, resumes from a saved position with exactly the rest, ends with a lag of 0, counts the
inputs it refused, and closes twice without complaint.

Each case builds a fresh source (``make(positions)``: seeked there when given) and says how to read it to its
end (a live source is read until it is at the end of what its topic holds), which events it must deliver and
how many inputs it must refuse itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pytest

from streamgnn import datasets
from streamgnn.cli._dead_letters import Tally
from streamgnn.connectors.files import CsvSource, DatasetSource, JsonLinesSource
from streamgnn.events import EventBatch
from streamgnn.shard import KafkaPartitions, Ownership, PartitionedReplay
from streamgnn.shard.source import LocalSource
from streamgnn.sources import EventSource, IterableSource, as_source
from streamgnn.train.broadcast import BroadcastSource
from streamgnn.train.distributed import DistContext

N = 240  # events per case, in batches of about 50
BAD = 2  # inputs a refusing source is given that are no events (its dead letters)


@dataclass
class Case:
    make: Callable[[dict | None], EventSource]
    read: Callable[[EventSource], Iterator[EventBatch]]
    eids: list[int]  # what a whole pass delivers, in order
    refused: int  # inputs the source dead-letters itself


def events(n: int = N) -> EventBatch:
    rng = np.random.default_rng(7)
    eid = np.arange(n)
    return EventBatch.from_columns(
        src=rng.integers(0, 40, n), dst=rng.integers(0, 40, n), t=eid * 1.0, eid=eid
    )


def built(make: Callable[[], EventSource]) -> Callable[[dict | None], EventSource]:
    def seeked(positions: dict | None) -> EventSource:
        source = make()
        if positions is not None:
            source.seek(positions)
        return source

    return seeked


def whole(source: EventSource) -> Iterator[EventBatch]:
    return iter(source)


def csv_case(tmp_path) -> Case:
    ev = events()
    cols = (ev.src.tolist(), ev.dst.tolist(), ev.t.tolist(), ev.eid.tolist())
    lines = [f"{s},{d},{t},{e}" for s, d, t, e in zip(*cols, strict=True)]
    lines[10:10] = ["1,2"]  # too few fields
    lines[100:100] = ["1,2,not-a-time,5"]
    path = tmp_path / "events.csv"
    path.write_text("\n".join(lines) + "\n")
    return Case(
        built(lambda: CsvSource(path, ("src", "dst", "t", "eid"), batch_size=50)), whole, list(range(N)), BAD
    )


def jsonl_case(tmp_path) -> Case:
    ev = events()
    lines = [
        json.dumps({"src": s, "dst": d, "t": t, "eid": e})
        for s, d, t, e in zip(ev.src.tolist(), ev.dst.tolist(), ev.t.tolist(), ev.eid.tolist(), strict=True)
    ]
    lines[5:5] = ["{not json"]
    lines[77:77] = [json.dumps({"src": 1, "dst": 2})]  # no time
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return Case(built(lambda: JsonLinesSource(path, batch_size=50)), whole, list(range(N)), BAD)


def tally_case(tmp_path) -> Case:
    case = jsonl_case(tmp_path)
    return Case(built(lambda: Tally(case.make(None), "events.jsonl")), whole, case.eids, case.refused)


def dataset_case(tmp_path) -> Case:
    name = min(datasets.names(), key=lambda n: datasets.info(n).rows)
    eids = datasets.load(name).eid.tolist()
    return Case(built(lambda: DatasetSource(name, batch_size=5000)), whole, eids, 0)


def memory_case(tmp_path) -> Case:
    ev = events()
    batches = [ev[i : i + 50] for i in range(0, N, 50)]
    return Case(built(lambda: as_source(batches)), whole, list(range(N)), 0)


def replay_case(tmp_path) -> Case:
    ev = events()
    own = Ownership(num_partitions=4, world_size=2, rank=1)
    mine = PartitionedReplay(ev, own).pull()
    order = np.lexsort((mine.eid, mine.t))
    return Case(built(lambda: PartitionedReplay(ev, own, chunk=30)), whole, mine.eid[order].tolist(), 0)


def kafka_topic(kafka_bootstrap, make_topic, partitions: int = 1) -> tuple[str, list[int]]:
    """A topic holding ``events()`` as JSON lines, keyed by graph partition, and ``BAD`` messages that hold no
    event; returns it and the eids in the order a reader delivers them (time order)."""
    from streamgnn.connectors.kafka import EventProducer, Producer

    topic = make_topic(partitions)
    with EventProducer(kafka_bootstrap, topic, fmt="json") as producer:
        producer.send(events())
    with Producer("kafka-python", kafka_bootstrap, {}) as raw:
        for p in range(BAD):
            raw.send(topic, b"{not json", partition=p % partitions)
    return topic, list(range(N))


@pytest.fixture
def kafka_case(kafka_bootstrap, make_topic) -> Case:
    from streamgnn.connectors.kafka import KafkaSource

    topic, eids = kafka_topic(kafka_bootstrap, make_topic, partitions=2)

    def make(positions: dict | None) -> EventSource:
        source = KafkaSource(topic, bootstrap_servers=kafka_bootstrap, max_batch_events=50, linger_s=None)
        if positions is not None:
            source.seek(positions)
        return source

    return Case(make, lambda s: s.stream(idle_timeout_s=0), eids, BAD)


@pytest.fixture
def partitions_case(kafka_bootstrap, make_topic) -> Case:
    topic, eids = kafka_topic(kafka_bootstrap, make_topic, partitions=1)
    own = Ownership(num_partitions=1, world_size=1, rank=0)
    make = built(
        lambda: KafkaPartitions(
            topic,
            own,
            idle_timeout_s=0,
            bootstrap_servers=kafka_bootstrap,
            max_batch_events=50,
            linger_s=None,
        )
    )
    return Case(make, whole, eids, BAD)


@pytest.fixture
def broadcast_case(kafka_bootstrap, make_topic) -> Case:
    from streamgnn.connectors.kafka import KafkaSource

    topic, eids = kafka_topic(kafka_bootstrap, make_topic, partitions=1)

    def make() -> EventSource:
        kafka = KafkaSource(topic, bootstrap_servers=kafka_bootstrap, max_batch_events=50, linger_s=None)
        return BroadcastSource(kafka, DistContext(), idle_timeout_s=0, heartbeat_s=0.1)

    return Case(built(make), whole, eids, BAD)


BUILT = {
    "csv": csv_case, "jsonl": jsonl_case, "tally": tally_case, "dataset": dataset_case, "memory": memory_case,
    "partitioned-replay": replay_case,
}  # fmt: skip
ON_BROKER = ["kafka_case", "partitions_case", "broadcast_case"]


@pytest.fixture(params=[*BUILT, *ON_BROKER])
def case(request, tmp_path) -> Case:
    if request.param in BUILT:
        return BUILT[request.param](tmp_path)
    return request.getfixturevalue(request.param)


def test_every_source_meets_the_contract(case: Case):
    source = case.make(None)
    assert isinstance(source, EventSource)
    # batches in order: every event once, in stream order, none empty
    got = []
    for batch in case.read(source):
        assert len(batch) and (np.diff(batch.t) >= 0).all()
        got += batch.eid.tolist()
    assert got == case.eids
    # the end of a finite read: ended, nothing behind, every refusal counted
    assert source.ended
    assert source.dead_letter_count() == case.refused
    wait_for_zero_lag(source)
    positions = source.positions()
    source.close()
    source.close()  # closing again does nothing
    # resumed from its end, a source has nothing more to give
    rest = case.make(positions)
    assert [e for b in case.read(rest) for e in b.eid.tolist()] == []
    rest.close()


def test_a_source_resumed_from_its_position_gives_exactly_the_rest(case: Case):
    first = case.make(None)
    batches = case.read(first)
    head = next(batches).eid.tolist() + next(batches).eid.tolist()
    positions = first.positions()
    first.close()
    rest = case.make(positions)
    tail = [e for b in case.read(rest) for e in b.eid.tolist()]
    rest.close()
    assert len(head) >= 2 and head + tail == case.eids


def wait_for_zero_lag(source: EventSource) -> None:
    """A replay knows its lag at its end; a broker's end offsets are read about once a second: wait."""
    import time

    while (lag := source.lag()) != 0:
        assert lag is None or lag > 0
        time.sleep(0.05)


def test_batches_held_in_memory_and_local_sources_are_event_sources():
    ev = events(10)
    assert as_source(ev).positions() == {"memory": 0}
    assert isinstance(as_source([ev]), IterableSource)
    own = Ownership(num_partitions=2, world_size=1, rank=0)
    assert isinstance(PartitionedReplay(ev, own), LocalSource)
    with pytest.raises(Exception, match="not this source"):
        as_source([ev]).seek({"file:x": 3})


def test_a_checkpoint_records_what_a_source_reads_also_through_a_wrapper(tmp_path):
    from streamgnn.jobs.resume import source_identity

    case = jsonl_case(tmp_path)
    file = case.make(None)
    assert source_identity(file, None)["type"] == "file"
    assert source_identity(Tally(file, "events.jsonl"), None) == source_identity(file, None)
    name = min(datasets.names(), key=lambda n: datasets.info(n).rows)
    assert source_identity(Tally(DatasetSource(name)), None)["name"] == name
    assert source_identity(as_source([events(5)]), None) is None
