"""The partition router: order independent of batch boundaries, and a router killed with SIGKILL at random
points resumes with no event lost, doubled or placed differently (real subprocesses, the embedded broker)."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamgnn.codec import decode
from streamgnn.events import EventBatch
from streamgnn.jobs.routing import RoutingState

BUFFERED = {"name": "fennel", "buffer_edges": 3, "max_pending": 5}


def stream(n=400, nodes=60, seed=0):
    """Adds with some node updates (before a vertex's first edge too) and deletes, t == eid."""
    rng = np.random.default_rng(seed)
    kind = rng.choice([0, 0, 0, 0, 0, 1, 2], n)
    src, dst = rng.integers(0, nodes, n), rng.integers(0, nodes, n)
    kind[:5] = 2  # updates of vertices that have no edge yet
    return EventBatch.from_columns(kind=kind, src=src, dst=dst, t=np.arange(n, dtype=float), eid=np.arange(n))


def routed(spec, events, cuts):
    """Eids published per partition; checks that a vertex partitioner publishes only placed vertices."""
    state = RoutingState(spec, 4)
    out: dict[int, list[int]] = {}

    def publish(batches):
        for p, b in batches.items():
            out.setdefault(p, []).extend(b.eid.tolist())
            if state.partitioner.config.places_vertices:  # what sharded consumers need
                named = np.c_[np.ones(len(b), bool), b.kind != 2]
                assert (b.placement[named] >= 0).all() and (b.placement[:, 0] == p).all()

    i = j = 0
    while i < len(events):
        c = cuts[j % len(cuts)]
        publish(state.route(events[i : i + c])[0])
        i, j = i + c, j + 1
    publish(state.flush())
    return out, state


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 90), min_size=1, max_size=5), st.sampled_from(["fennel", "hdrf", "ldg"]))
def test_routing_is_independent_of_batch_boundaries(cuts, name):
    spec = BUFFERED if name == "fennel" else name
    events = stream()
    whole, state = routed(spec, events, [len(events)])
    assert routed(spec, events, cuts)[0] == whole
    published = sorted(e for eids in whole.values() for e in eids)
    letters = state.counts["dead_letters"]
    if name == "hdrf":  # a delete goes to every partition that may hold its edge
        assert set(published) == set(range(len(events))) - set(_dead(spec, events))
    else:  # everything else exactly once
        assert published == sorted(set(range(len(events))) - set(_dead(spec, events)))
    assert letters == len(_dead(spec, events))


def _dead(spec, events):
    state = RoutingState(spec, 4)
    _, letters = state.route(events)
    return [d.eid for d in letters]


def test_held_events_follow_their_vertices():
    """An event waits for its source and (vertex partitioners) its destination: whatever is published names
    only placed vertices, as sharded consumers need."""
    state = RoutingState(BUFFERED, 4)
    ev = EventBatch.from_columns(
        kind=[2, 0, 0, 0, 0, 0], src=[7, 7, 7, 7, 1, 1], dst=[7, 1, 2, 3, 4, 5], t=[0.0, 1, 2, 3, 4, 5],
        eid=[0, 1, 2, 3, 4, 5],
    )  # fmt: skip
    out, _ = state.route(ev[:3])
    assert sum(len(b) for b in out.values()) == 0 and len(state.held) == 3  # 7 has two edges of three
    out, _ = state.route(ev[3:4])
    ((p, b),) = out.items()  # 7 placed: its update goes; its edges wait for 1, 2 and 3
    assert b.eid.tolist() == [0] and p == state.labels[state.ids.lookup(np.array([7]))[0]]
    out, _ = state.route(ev[4:])  # 1's third edge places 1: 7 -> 1 goes; 1 -> 4, 1 -> 5 wait for 4 and 5
    assert [b.eid.tolist() for b in out.values()] == [[1]] and (out[p].placement >= 0).all()
    rest = state.flush()
    assert sorted(e for b in rest.values() for e in b.eid.tolist()) == [2, 3, 4, 5]
    assert all((b.placement >= 0).all() for b in rest.values())


def _read(bootstrap, topic, k):
    """Events per partition of ``topic`` (decoded, in offset order)."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in range(k)]
        ends = c.end_offsets(tps)
        c.assign(tps)
        c.seek_to_beginning()
        out = {p: [] for p in range(k)}
        while any(c.position(tp) < ends[tp] for tp in tps):
            for tp, records in c.poll(timeout_ms=1000).items():
                for r in records:
                    batch, _ = decode(r.value, dict(r.headers or ()).get("content-type").decode(), "test")
                    rows = (batch.eid.tolist(), batch.src.tolist(), batch.t.tolist(), _weights(batch))
                    out[tp.partition] += list(zip(*rows, strict=True))
        return out
    finally:
        c.close()


def test_killed_router_resumes_without_loss_duplicates_or_moves(kafka_bootstrap, make_topic, tmp_path):
    from streamgnn.connectors.kafka import EventProducer
    from streamgnn.jobs.router import PartitionRouter, RouterConfig

    events = stream(n=2000, nodes=300, seed=1)
    raw = make_topic(1)
    with EventProducer(kafka_bootstrap, raw, fmt="binary", batch_size=50) as out:
        out.send(events)
        out.flush()
    k = 4
    dead = len(_dead({"name": "fennel", "buffer_edges": 3}, events))
    options = dict(partitioner={"name": "fennel", "buffer_edges": 3}, checkpoint_every=150)
    whole = make_topic(k)
    config = RouterConfig(checkpoint_dir=tmp_path / "a", **options)
    report = PartitionRouter(kafka_bootstrap, raw, whole, k, config, fmt="json").run(
        max_events=len(events), flush=True
    )
    assert report.events == len(events) and report.dead_letter_count == dead and report.held == 0

    resumed = make_topic(k)
    ckpt = tmp_path / "b"
    cmd = [
        sys.executable, "-m", "streamgnn.cli", "partition", "--bootstrap", kafka_bootstrap, "--in-topic", raw,
        "--out-topic", resumed, "--partitions", str(k), "--partitioner", "fennel", "--buffer-edges", "3",
        "--checkpoint", str(ckpt), "--checkpoint-every", "150", "--format", "json",
        "--max-events", str(len(events)), "--flush",
    ]  # fmt: skip
    env = {**os.environ, "OMP_WAIT_POLICY": "passive"}
    rng = np.random.default_rng(7)
    kills = 0
    for _ in range(2):
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        first = _latest(ckpt)
        while proc.poll() is None and _latest(ckpt) == first:  # wait for the event: a new checkpoint
            time.sleep(0.02)
        time.sleep(float(rng.uniform(0, 0.3)))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert kills >= 1
    got, want = _read(kafka_bootstrap, resumed, k), _read(kafka_bootstrap, whole, k)
    assert got == want
    eids = [e for rows in got.values() for e, *_ in rows]
    assert len(eids) == len(set(eids)) == len(events) - dead


def _latest(root):
    try:
        return (root / "LATEST").read_text()
    except OSError:
        return None


def test_router_refuses_rebalancing_and_bad_settings():
    from streamgnn.errors import ConfigError
    from streamgnn.jobs.router import PartitionRouter, RouterConfig

    with pytest.raises(ConfigError, match="rebalance"):
        RouterConfig(partitioner={"name": "ldg", "rebalance": {"every_edges": 5}})
    with pytest.raises(ConfigError, match="reads"):
        PartitionRouter("x:1", "a", "a", 2)
    with pytest.raises(ConfigError, match=r"^partitioner: a RouterConfig option"):  # not a client setting
        PartitionRouter("x:1", "a", "b", 2, partitioner="ldg")
    for bad in (dict(checkpoint_every=0), dict(batch_size=0), dict(allowed_lateness=-1.0)):
        with pytest.raises(ConfigError):
            RouterConfig(**bad)


def test_readme_partition_snippet_runs(kafka_bootstrap, tmp_path, monkeypatch):
    import uuid
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "docs/partitioning.md").read_text()
    block = (
        readme.split("# Partition the graph as it streams", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    )
    raw, events = f"raw-{uuid.uuid4().hex[:8]}", f"events-{uuid.uuid4().hex[:8]}"
    block = block.replace("localhost:9092", kafka_bootstrap).replace('"college-raw"', repr(raw))
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(block.replace('"college-hdrf"', repr(events)), "docs/partitioning.md", "exec"), scope)
    assert scope["report"].edge_cut < 0.6 and scope["report"].vertices_moved == sum(
        len(m) for m in scope["moves"]
    )
    assert (tmp_path / "partition.png").exists()
    routed = scope["routed"]
    assert (
        routed.events == 59_835
        and routed.published == 59_835
        and 1.0 < routed.partitioning.replication_factor < 5
    )
    assert (tmp_path / "hdrf-ckpt" / "LATEST").exists()


def _weights(b: EventBatch) -> list[float]:
    """Each event's weight; one without weighs 1.0 (the codec's rule)."""
    return [1.0] * len(b) if b.weight is None else b.weight.tolist()


def _weighted(events: EventBatch) -> EventBatch:
    import dataclasses

    return dataclasses.replace(events, weight=np.linspace(0.5, 2.0, len(events)).astype(np.float32))


def test_held_events_without_weights_join_weighted_ones_and_survive_a_checkpoint():
    """A held event weighs 1.0 when weighted events join it, before or after a checkpoint."""
    events = stream(n=300, nodes=80, seed=2)
    plain, heavy = events[:150], _weighted(events[150:])
    state = RoutingState(BUFFERED, 4)
    first, _ = state.route(plain)
    assert len(state.held) and state.held.weight is None
    arrays, meta = state.state()
    restored = RoutingState.from_state(arrays, meta, 4)
    outs = [s.route(heavy)[0] for s in (state, restored)]
    outs += [s.flush() for s in (state, restored)]
    for p in range(4):
        a, b = (EventBatch.empty() if p not in o else o[p] for o in (outs[0], outs[1]))
        assert a.eid.tolist() == b.eid.tolist()
    published = [b for o in (first, outs[0], outs[2]) for b in o.values()]
    weight = {e: w for b in published for e, w in zip(b.eid.tolist(), _weights(b), strict=True)}
    assert sorted(weight) == sorted(set(events.eid.tolist()) - set(_dead(BUFFERED, events)))
    assert all(weight[e] == 1.0 for e in plain.eid.tolist() if e in weight)
    assert [weight[e] for e in heavy.eid.tolist() if e in weight] == [
        w for e, w in zip(heavy.eid.tolist(), heavy.weight.tolist(), strict=True) if e in weight
    ]


def test_routing_refuses_another_schema_before_changing_anything():
    state = RoutingState(BUFFERED, 4)
    state.route(stream(n=50, seed=3))
    before, letters_before = state.state()[0], state.counts["dead_letters"]
    strings = EventBatch.from_columns(src=["a"], dst=["b"], t=[99.0], eid=[999])
    featured = EventBatch.from_columns(src=[1], dst=[2], t=[99.0], eid=[998], features=np.ones((1, 2)))
    for bad, why in ((strings, "str node ids"), (featured, "feature width changed from none to 2")):
        out, letters = state.route(bad)
        assert not out and [d.eid for d in letters] == bad.eid.tolist() and why in letters[0].reason
    after = state.state()[0]
    assert after.keys() == before.keys() and all(np.array_equal(after[k], v) for k, v in before.items())
    assert state.counts["dead_letters"] == letters_before + 2


def test_dead_letter_reasons_name_plain_values():
    state = RoutingState("hdrf", 2)
    state.route(EventBatch.from_columns(src=[1], dst=[2], t=[0.0], eid=[0]))
    _, letters = state.route(
        EventBatch.from_columns(kind=[1, 1], src=[7, 1], dst=[8, 3], t=[1.0, 2], eid=[1, 2])
    )
    reasons = [d.reason for d in letters]
    assert reasons and all("np." not in r and "int64" not in r for r in reasons), reasons
    assert "(7 -> 8)" in reasons[0]


def _dead_letters(bootstrap, topic):
    """(source offset, eid, reason) of each dead letter in ``topic``, sorted."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        end = c.end_offsets([tp])[tp]
        c.assign([tp])
        c.seek_to_beginning()
        out = []
        while c.position(tp) < end:
            for records in c.poll(timeout_ms=1000).values():
                for r in records:
                    h = {k: v.decode() for k, v in r.headers}
                    out.append((int(h["source-offset"]), h.get("eid"), h["reason"]))
        return sorted(out)
    finally:
        c.close()


def test_a_restarted_router_keeps_the_stream_schema_held_events_and_dead_letter_count(
    kafka_bootstrap, make_topic, tmp_path
):
    """Stopped after the first half and restarted from its checkpoint, the router meets an event of another
    feature width and one of string ids first, then weighted events joining unweighted held ones: it
    publishes and dead-letters exactly what a router that read the whole topic in one go does, and its
    summary counts the dead letters of decoding over both lives."""
    from kafka import KafkaProducer

    from streamgnn.codec import encode_binary
    from streamgnn.jobs.router import PartitionRouter, RouterConfig

    events = stream(n=600, nodes=150, seed=4)
    k, spec = 4, {"name": "fennel", "buffer_edges": 3}
    featured = EventBatch.from_columns(src=[1], dst=[2], t=[300.0], eid=[10_000], features=np.ones((1, 2)))
    first = [encode_binary(events[i : i + 50]) for i in range(0, 300, 50)]
    first.insert(2, b"\x00 not an event")
    second = [encode_binary(featured), b'{"src": "a", "dst": "b", "t": 300.0, "eid": 10001}']
    for j, i in enumerate(range(300, 600, 50)):  # weighted and unweighted messages in turn
        piece = events[i : i + 50]
        second.append(encode_binary(_weighted(piece) if j % 2 else piece))
    raw, dlq_resumed, dlq_whole = make_topic(1), make_topic(1), make_topic(1)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)

    def send(values):
        for value in values:
            producer.send(raw, value, partition=0)
        producer.flush()

    send(first)
    resumed, ckpt = make_topic(k), tmp_path / "ckpt"
    life = PartitionRouter(
        kafka_bootstrap, raw, resumed, k, RouterConfig(spec, ckpt), dead_letter_topic=dlq_resumed
    ).run(max_events=300)
    assert life.events == 300 and life.dead_letter_count >= 1 and life.held > 0  # held unweighted events
    send(second)
    producer.close()
    cmd = [
        sys.executable, "-m", "streamgnn.cli", "partition", "--bootstrap", kafka_bootstrap, "--in-topic", raw,
        "--out-topic", resumed, "--partitions", str(k), "--partitioner", "fennel", "--buffer-edges", "3",
        "--checkpoint", str(ckpt), "--dead-letter-topic", dlq_resumed, "--max-events", "600", "--flush",
        "--log-every", "0",
    ]  # fmt: skip
    env = {**os.environ, "OMP_WAIT_POLICY": "passive"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]

    whole = make_topic(k)
    report = PartitionRouter(
        kafka_bootstrap, raw, whole, k, RouterConfig(spec), dead_letter_topic=dlq_whole
    ).run(max_events=600, flush=True)
    routing_letters = len(_dead(spec, events))
    assert report.events == 600 and report.held == 0 and report.dead_letter_count == 3 + routing_letters
    assert f"{report.dead_letter_count:,} dead letters" in proc.stdout, proc.stdout
    assert _read(kafka_bootstrap, resumed, k) == _read(kafka_bootstrap, whole, k)
    letters = _dead_letters(kafka_bootstrap, dlq_resumed)
    assert letters == _dead_letters(kafka_bootstrap, dlq_whole)
    assert len(letters) == report.dead_letter_count
    assert [r for _, _, r in letters].count(
        "event feature width changed from none to 2; use one feature width per stream"  # admission's words
    ) == 1
    assert all("np." not in r for _, _, r in letters)


def test_the_partition_command_dead_letters_events_beyond_its_allowed_lateness(
    kafka_bootstrap, make_topic, tmp_path
):
    """``streamgnn partition --allowed-lateness 5``, run again from its checkpoint once more events came: an
    event 9 behind the newest routed one is a dead letter with the lateness reason, one 2 behind is routed;
    the stream's other dead letters are those of a router without the flag."""
    from kafka import KafkaProducer

    from streamgnn.cli import main
    from streamgnn.codec import encode_binary

    events = stream(n=200, nodes=50, seed=5)  # t == eid: in order, nothing late
    late = EventBatch.from_columns(src=[1, 3], dst=[2, 4], t=[190.0, 197.0], eid=[10_000, 10_001])
    raw, out, dlq = make_topic(1), make_topic(4), make_topic(1)
    argv = ["partition", "--bootstrap", kafka_bootstrap, "--in-topic", raw, "--out-topic", out,
            "--partitions", "4", "--partitioner", "hash", "--allowed-lateness", "5", "--checkpoint",
            str(tmp_path / "ckpt"), "--dead-letter-topic", dlq, "--log-every", "0"]  # fmt: skip
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for batch, until in ((events, 200), (late, 202)):  # the source sorts what it delivers together by time
        producer.send(raw, encode_binary(batch), partition=0)
        producer.flush()
        assert main([*argv, "--max-events", str(until)]) == 0
    producer.close()
    letters = {int(eid): reason for _, eid, reason in _dead_letters(kafka_bootstrap, dlq)}
    assert set(letters) == set(_dead("hash", events)) | {10_000}
    assert "9 behind the stream (newest t=199.0), beyond allowed_lateness=5" in letters[10_000]
    routed = {eid for rows in _read(kafka_bootstrap, out, 4).values() for eid, *_ in rows}
    assert 10_001 in routed and 10_000 not in routed


def test_the_routing_module_example_runs():
    import doctest

    import streamgnn.jobs.routing as module

    assert doctest.testmod(module).failed == 0
