"""Live snapshots from a real Kafka topic: each is yielded once the watermark has passed its time plus the
allowed lateness, equals the from-scratch snapshot, and the stream's position survives a restart; the
builder holds the live window, not the history."""

import numpy as np

from streamgnn.connectors.kafka import EventProducer, KafkaSource
from streamgnn.events import EventBatch, EventKind
from streamgnn.snapshots import SnapshotBuilder, SnapshotSpec, SnapshotStream, live_snapshots, snapshot_at
from streamgnn.store import StoreConfig, TemporalGraphStore

LATENESS = 20.0
SPEC = SnapshotSpec(every=100.0, start=100.0, weight="count")


def late_stream(n=2400, seed=0):
    """Edge adds, deletes (from t=200, once every node exists) and feature updates over t in [0, 1200), sent
    out of order by up to 15 time units, within the lateness."""
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(0, 1200, n))
    order = np.argsort(t + rng.uniform(0, 15, n), kind="stable")
    kind = rng.choice([EventKind.EDGE_ADD] * 8 + [EventKind.EDGE_DELETE, EventKind.NODE_UPDATE], n).astype(
        np.int8
    )
    kind[(kind == EventKind.EDGE_DELETE) & (t < 200)] = EventKind.EDGE_ADD
    src, dst = rng.integers(0, 30, n), rng.integers(0, 30, n)
    feats = rng.normal(size=(n, 2)).astype(np.float32)
    return EventBatch.from_columns(kind=kind[order], src=src[order], dst=dst[order], t=t[order],
                                   eid=np.arange(n), features=feats[order])  # fmt: skip


def consume(bootstrap, topic, store, stream, out, stop_after=None):
    with KafkaSource(topic, bootstrap_servers=bootstrap, store=store, max_batch_events=150) as src:
        for snap in live_snapshots(src, store, stream=stream, idle_timeout_s=3.0):
            out.append((snap, store.watermark))
            if stop_after is not None and len(out) == stop_after:
                return src.positions()
    return None


def test_kafka_live_snapshots_are_final_exact_and_resumable(kafka_bootstrap, make_topic, tmp_path):
    events = late_stream()
    topic = make_topic(1)
    with EventProducer(kafka_bootstrap, topic, fmt="binary", batch_size=150) as producer:
        producer.send(events)
        producer.flush()

    store = TemporalGraphStore(StoreConfig(allowed_lateness=LATENESS))
    whole: list = []
    consume(kafka_bootstrap, topic, store, SnapshotStream(store, SPEC), whole)
    assert store.num_edges > 1800 and store.num_node_updates > 150
    times = [s.t for s, _ in whole]
    assert times == [100.0 * k for k in range(1, 13)]  # through the first time after the last event
    for snap, watermark in whole:
        if snap.t < store.watermark - LATENESS:  # yielded while the stream ran: only once it was final
            assert watermark > snap.t + LATENESS
        a, b = snap.canonical(), snapshot_at(store, snap.t, SPEC).canonical()  # from everything, at the end
        assert np.array_equal(a.edge_index, b.edge_index) and np.array_equal(a.edge_weight, b.edge_weight)
        assert np.array_equal(a.x, b.x)

    # stop after 5 snapshots, checkpoint the stream with the store and the topic offsets, resume elsewhere
    part = TemporalGraphStore(StoreConfig(allowed_lateness=LATENESS))
    stream, first = SnapshotStream(part, SPEC), []
    offsets = consume(kafka_bootstrap, topic, part, stream, first, stop_after=5)
    stream.save(tmp_path / "ckpt", source_offsets=offsets)
    resumed = SnapshotStream.load(tmp_path / "ckpt")
    rest: list = []
    consume(kafka_bootstrap, topic, resumed.store, resumed, rest)
    assert [s.t for s, _ in first + rest] == times
    for (a, _), (b, _) in zip(first + rest, whole, strict=True):  # by external ids: the source orders each
        assert external_edges(a, resumed.store) == external_edges(b, store)  # batch by time, so internal
    assert resumed.store.num_edges == store.num_edges  # ids could follow each run's batch boundaries


def external_edges(snap, store):
    ext = store.external_ids
    return sorted(zip(ext(snap.edge_index[0]).tolist(), ext(snap.edge_index[1]).tolist(),
                      snap.edge_weight.tolist(), strict=True))  # fmt: skip


def test_window_builder_memory_follows_the_window_not_the_stream():
    """A long stream cut in 1%-wide windows: the builder's own bytes stay flat while the store grows."""
    store = TemporalGraphStore()
    spec = SnapshotSpec(kind="window", every=1000.0, start=1000.0, weight="count")
    builder = SnapshotBuilder(store, spec)
    rng = np.random.default_rng(0)
    sizes, t = [], 1000.0
    for k in range(40):
        n = 5000
        ev = EventBatch.from_columns(src=rng.integers(0, 10**5, n), dst=rng.integers(0, 10**5, n),
                                     t=np.sort(rng.uniform(k * 1000, (k + 1) * 1000, n)),
                                     eid=np.arange(k * n, (k + 1) * n))  # fmt: skip
        store.ingest(ev)
        snap = builder.advance(t)
        t += 1000.0
        assert snap.num_edges > 4900  # a window of ~5000 distinct pairs
        sizes.append(builder.nbytes())
    assert max(sizes[20:]) <= 1.5 * max(sizes[5:20])  # flat, while the store holds 8x more events
    assert store.nbytes()["change_journal"] <= 2 * 16 * 5000  # the feed journal: one window's edges
