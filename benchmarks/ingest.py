"""Kafka ingest throughput: KafkaSource -> TemporalGraphStore, against a bare consume loop of the same client.

Starts its own Tansu broker and loads JODIE Wikipedia into two 4-partition topics keyed by graph partition:
single-event JSON messages, and binary batches of 1,000 events (the dataset replayed back to back with
shifted times and event ids, so a run lasts long enough to measure). Then, per installed client:
  * the raw loop polls every JSON message and touches nothing: the ceiling for any consumer of that client;
  * our source decodes, validates and merges the partitions in time order, and the store ingests.
Both use the clients' default settings (record CRC checks on; kafka-python does them in C via `crc32c`).
Each figure is the median of several runs, timed from creating the consumer to the last message received
or event stored, so connecting and fetching are inside. Every run starts after a full garbage collection:
with torch loaded one costs ~0.3 s, and where the collector's thresholds happen to trip it would land in
one run or another by chance. The process CPU time of each run (all threads, the clients' own included)
is reported too: on a loaded host, where the runs wait for a core, it says where the difference lies.

Keys of --json: per client (kafka_python_, confluent_) the JSON and binary events/s into the store, the raw
loop's messages/s and `<client>_json_vs_raw` (JSON source -> store over the raw loop; confluent_json_vs_raw
for the fast client), the CPU microseconds per message of the raw loop and per event of the JSON source
(`raw_<client>_cpu_us_per_msg`, `<client>_json_cpu_us_per_event`), plus the headline keys for the default
client. The same JSON events from a file: `file_json_events_per_s` (``JsonLinesSource`` -> store, which
reads through the codec's fast path), `file_json_careful_events_per_s` (the file's lines through the careful
decoder alone, the path file sources had before it moved into the codec) and their ratio
`file_json_fast_vs_careful`.

python benchmarks/ingest.py [--quick] [--json] [--events N]    (also: streamgnn bench ingest)
"""

from __future__ import annotations

import argparse
import gc
import resource
import statistics
import tempfile
import time
from itertools import islice
from pathlib import Path

try:
    from .common import report, set_threads
except ImportError:  # run as a script
    from common import report, set_threads

from streamgnn.cli._args import positive_int
from streamgnn.codec import decode_json_lines, encode_json_lines, fast_rows
from streamgnn.connectors.broker import LocalBroker
from streamgnn.connectors.files import JsonLinesSource
from streamgnn.connectors.kafka import EventProducer, KafkaSource, available_backends, create_topic
from streamgnn.datasets import load
from streamgnn.events import EventBatch, concat
from streamgnn.store import StoreConfig, TemporalGraphStore

PARTITIONS = 4
POLL_MESSAGES = 2000  # the same poll size for the raw loops and our source


def replayed(events: EventBatch, times: int) -> EventBatch:
    """``events`` back to back ``times`` times, each copy later in time and with fresh event ids."""
    span, n = float(events.t.max() - events.t.min()) + 1.0, len(events)
    copies = [
        EventBatch(events.kind, events.src, events.dst, events.t + k * span, events.eid + k * n)
        for k in range(times)
    ]
    return concat(copies)


def cpu_seconds() -> float:
    """CPU time of this process so far, every thread included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed(run, *args) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of ``run(*args)``, which returns its own wall time, after a full
    collection."""
    gc.collect()
    cpu = cpu_seconds()
    wall = run(*args)
    return wall, cpu_seconds() - cpu


def raw_loop(backend: str, bootstrap: str, topic: str, messages: int) -> float:
    """Seconds for the bare client to receive ``messages`` messages from every partition."""
    start = time.perf_counter()
    got = 0
    if backend == "kafka-python":
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
        )
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        while got < messages:
            for records in consumer.poll(timeout_ms=100, max_records=POLL_MESSAGES).values():
                got += len(records)
    else:
        from confluent_kafka import Consumer, TopicPartition

        # a fresh group starting "earliest", as KafkaSource does (an explicit OFFSET_BEGINNING costs Tansu
        # half a second more to start)
        conf = {
            "bootstrap.servers": bootstrap,
            "group.id": f"raw-{time.time_ns()}",
            "auto.offset.reset": "earliest",
        }
        consumer = Consumer(conf)
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        while got < messages:
            got += sum(1 for m in consumer.consume(POLL_MESSAGES, 0.1) if m.error() is None)
    seconds = time.perf_counter() - start
    consumer.close()
    return seconds


def file_into_store(path: Path, events: int, fast: bool) -> float:
    """Seconds for ``JsonLinesSource`` to hand a file's ``events`` events to the store (``fast=False``: the
    file's lines in the source's chunks through the careful decoder alone, the path file sources had before
    the fast one moved into the codec)."""
    start = time.perf_counter()
    store = TemporalGraphStore(StoreConfig(num_partitions=PARTITIONS))
    if fast:
        source = JsonLinesSource(path)
        for batch in source:
            store.ingest(batch)
        letters = source.dead_letter_count()
    else:
        letters = 0
        with path.open("rb") as f:
            while chunk := list(islice(f, JsonLinesSource.batch_size)):
                batch, bad = decode_json_lines(b"".join(chunk), str(path), fast=False)
                letters += len(bad)
                store.ingest(batch)
    seconds = time.perf_counter() - start
    if letters or store.num_edges != events:
        raise RuntimeError(f"{path}: {letters} dead letters, {store.num_edges} of {events} events stored")
    return seconds


def file_figures(events: EventBatch, repeats: int) -> dict:
    """The JSON-lines file source into the store, with the fast path and with the careful one alone."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "events.jsonl"
        path.write_bytes(encode_json_lines(events))
        runs = {True: [], False: []}
        for _ in range(repeats):  # interleaved, as the Kafka runs are
            for fast in runs:
                runs[fast].append(timed(file_into_store, path, len(events), fast)[0])
    fast, careful = (len(events) / statistics.median(runs[k]) for k in (True, False))
    return {
        "file_json_events_per_s": fast,
        "file_json_careful_events_per_s": careful,
        "file_json_fast_vs_careful": fast / careful,
    }


def source_into_store(backend: str, bootstrap: str, topic: str, events: int) -> float:
    """Seconds for KafkaSource to hand ``events`` events to the store, and the store to apply them."""
    start = time.perf_counter()
    store = TemporalGraphStore(StoreConfig(num_partitions=PARTITIONS))
    source = KafkaSource(topic, bootstrap_servers=bootstrap, backend=backend, max_poll_messages=POLL_MESSAGES)
    with source:
        while store.num_edges < events:
            batch = source.poll(10.0)
            if batch is None:
                raise RuntimeError(f"{topic}: stalled at {store.num_edges} of {events} events")
            store.ingest(batch)
        seconds = time.perf_counter() - start
        if source.stats.dead_letters:
            raise RuntimeError(f"{topic}: {source.stats.dead_letters} dead letters in a clean dataset")
    return seconds


HEADLINE = {
    "json_events_per_s": "JSON events/s into the store (kafka-python), JODIE Wikipedia",
    "json_vs_raw_kafka_python": "JSON ingest vs a bare consume loop, JODIE Wikipedia",
    "binary_events_per_s": "binary events/s into the store (kafka-python), JODIE Wikipedia replayed",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a run under a minute (fewer events and runs)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--repeats", type=positive_int, default=None, help="timed runs per figure (e.g. 5)")
    ap.add_argument(
        "--events", type=positive_int, default=None, help="at most this many events per topic (a smoke run)"
    )
    args = ap.parse_args(argv)
    set_threads(1)
    repeats = args.repeats or (3 if args.quick else 5)
    backends = available_backends()
    wiki = load("jodie_wikipedia")
    events = {
        "json": wiki[:50_000] if args.quick else wiki,
        "binary": replayed(wiki, 4 if args.quick else 10),
    }
    if args.events is not None:
        events = {fmt: batch[: args.events] for fmt, batch in events.items()}
    # compile (or load the cached kernels) outside the timing
    TemporalGraphStore().ingest(wiki[:100])
    fast_rows([b'{"src":1,"dst":2,"t":1.0,"eid":1}'], "warm-up")

    results: dict = {
        **file_figures(events["json"], repeats),
        "dataset": "jodie_wikipedia",
        "broker": "tansu (local, memory storage)",
        "partitions": PARTITIONS,
        "repeats": repeats,
        "json_events": len(events["json"]),
        "binary_events": len(events["binary"]),
        "binary_batch": 1000,
    }
    with LocalBroker() as broker:
        bootstrap = broker.bootstrap
        for fmt, batch in events.items():
            create_topic(bootstrap, fmt, PARTITIONS)
            # the last client (confluent when installed) sets the topics up in a fraction of the time
            with EventProducer(bootstrap, fmt, fmt=fmt, batch_size=1000, backend=backends[-1]) as out:
                out.send(batch)
                out.flush()
                results[f"{fmt}_messages"] = out.messages
        for backend in backends:
            key = backend.replace("-", "_")
            runs: dict[str, list[tuple[float, float]]] = {"raw": [], "json": [], "binary": []}
            for _ in range(repeats):  # interleaved, so a noisy neighbour slows every kind of run alike
                runs["raw"].append(timed(raw_loop, backend, bootstrap, "json", results["json_messages"]))
                for fmt, batch in events.items():
                    runs[fmt].append(timed(source_into_store, backend, bootstrap, fmt, len(batch)))
            wall = {kind: [w for w, _ in r] for kind, r in runs.items()}
            cpu = {kind: statistics.median(c for _, c in r) for kind, r in runs.items()}
            results[f"raw_{key}_msgs_per_s"] = results["json_messages"] / statistics.median(wall["raw"])
            results[f"raw_{key}_cpu_us_per_msg"] = cpu["raw"] / results["json_messages"] * 1e6
            results[f"{key}_json_cpu_us_per_event"] = cpu["json"] / len(events["json"]) * 1e6
            for fmt, batch in events.items():
                results[f"{key}_{fmt}_events_per_s"] = len(batch) / statistics.median(wall[fmt])
            ratio = results[f"{key}_json_events_per_s"] / results[f"raw_{key}_msgs_per_s"]
            results[f"{key}_json_vs_raw"] = ratio
    # the headline figures are for the default client, kafka-python
    results["json_events_per_s"] = results["kafka_python_json_events_per_s"]
    results["json_vs_raw_kafka_python"] = results["kafka_python_json_vs_raw"]
    results["binary_events_per_s"] = results["kafka_python_binary_events_per_s"]
    report(
        results, args.json, "Kafka ingest: KafkaSource -> store vs a bare consume loop", HEADLINE, args.quick
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
