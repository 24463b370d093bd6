"""Malformed input never stops the stream: every bad message lands in the dead-letter topic with its
origin, and every good event lands in the store (credentials: test_kafka_security.py)."""

from __future__ import annotations

import json
import zlib

import numpy as np
from topic_records import read_topic

from streamgnn.codec import CONTENT_BINARY, CONTENT_JSON, encode_binary, encode_json_event
from streamgnn.connectors.kafka import KafkaSource
from streamgnn.events import EventBatch
from streamgnn.store import StoreConfig, TemporalGraphStore

BAD_EID = 10**12  # far from the good eids, so no bad event is skipped as a duplicate
JSON_H = [("content-type", CONTENT_JSON.encode())]
BIN_H = [("content-type", CONTENT_BINARY.encode())]


def fuzzed(rng: np.random.Generator, k: int) -> tuple[bytes | None, list | None]:
    """Malformed message number ``k``: each yields exactly one dead letter, from the source or the store."""
    eid = BAD_EID + k
    good_line = encode_json_event(EventBatch.from_columns(src=[1], dst=[2], t=[5.0], eid=[eid]), 0)
    one = EventBatch.from_columns(src=[1, 2], dst=[2, 3], t=[1.0, 2.0], eid=[eid, eid + 10**9])
    kind = k % 20
    if kind == 0:  # random bytes, no header (no newline, so one line; a leading '{' keeps it non-blank)
        return b"{" + rng.integers(0, 256, int(rng.integers(0, 200)), dtype=np.uint8).tobytes().replace(
            b"\n", b"x"
        ), None
    if kind == 1:  # truncated JSON
        return good_line[: int(rng.integers(1, len(good_line)))], JSON_H
    if kind == 2:
        return json.dumps({"src": [1], "dst": 2, "t": 1.0, "eid": eid}).encode(), JSON_H
    if kind == 3:
        return json.dumps({"src": 1, "dst": 2, "t": "yesterday", "eid": eid}).encode(), JSON_H
    if kind == 4:
        return json.dumps({"src": 1, "dst": 2, "t": 1.0}).encode(), JSON_H  # no eid
    if kind == 5:
        return json.dumps({"kind": 9, "src": 1, "dst": 2, "t": 1.0, "eid": eid}).encode(), JSON_H
    if kind == 6:
        return json.dumps({"src": 1, "dst": 2, "t": -3.0, "eid": eid}).encode(), JSON_H
    if kind == 7:
        return b'{"src":1,"dst":2,"t":NaN,"eid":%d}' % eid, JSON_H
    if kind == 8:
        return json.dumps({"src": 2**70, "dst": 2, "t": 1.0, "eid": eid}).encode(), JSON_H
    if kind == 9:  # one corrupted byte in a binary batch
        data = bytearray(encode_binary(one))
        data[int(rng.integers(20, len(data)))] ^= 0xFF
        return bytes(data), BIN_H
    if kind == 10:
        data = encode_binary(one)
        return data[: int(rng.integers(0, len(data)))], BIN_H
    if kind == 11:
        return b"src,dst,t\n1,2,3", [("content-type", b"text/csv")]
    if kind == 12:
        return (b"" if k % 40 == 12 else None), None  # empty value, tombstone
    if kind == 13:  # a valid event of another stream: string ids
        return json.dumps({"src": "alice", "dst": "bob", "t": 1.0, "eid": eid}).encode(), JSON_H
    if kind == 14:  # a valid event of another stream: features
        return json.dumps({"src": 1, "dst": 2, "t": 1.0, "eid": eid, "features": [0.5, 1.5]}).encode(), JSON_H
    if kind == 15:
        return b"[" * 3000, JSON_H  # deeper than the JSON parser recurses
    if kind == 16:  # a binary batch whose second event has an infinite time
        bad = EventBatch.from_columns(src=[1], dst=[2], t=[np.inf], eid=[eid])
        return encode_binary(bad), BIN_H
    if kind == 17:  # decodes fine, but deletes an edge between nodes the store never saw
        return json.dumps(
            {"kind": "edge_delete", "src": 10**9 + k, "dst": 10**9, "t": 1.0, "eid": eid}
        ).encode(), JSON_H
    if kind == 18:
        return json.dumps({"src": True, "dst": 2, "t": 1.0, "eid": eid}).encode(), JSON_H
    return "\u00e9\u00e8".encode("latin-1") + b'{"src":1}', JSON_H  # not UTF-8


def test_ten_thousand_malformed_messages_all_dead_lettered_and_every_good_event_stored(
    kafka_bootstrap, make_topic, make_events, backend
):
    from kafka import KafkaProducer

    topic, dlq, parts = make_topic(3), make_topic(1), 3
    good = make_events(12_000)
    rng = np.random.default_rng(7)
    # the good stream, in time order: single-event JSON messages and binary batches of 100
    messages: list[tuple[bytes | None, list | None, bool]] = []
    start = 0
    while start < len(good):
        if rng.random() < 0.2:
            messages.append((encode_binary(good[start : start + 100]), BIN_H, True))
            start += 100
        else:
            messages.append((encode_json_event(good, start), JSON_H if rng.random() < 0.5 else None, True))
            start += 1
    n_bad = 10_000
    slots = np.sort(rng.choice(np.arange(3 * parts, len(messages) + n_bad), n_bad, replace=False))
    stream: list = []
    bad_iter = iter(range(n_bad))
    slot_set = set(slots.tolist())
    good_iter = iter(messages)
    for i in range(len(messages) + n_bad):
        if i in slot_set:
            value, headers = fuzzed(rng, next(bad_iter))
            stream.append((value, headers, False))
        else:
            stream.append(next(good_iter))
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=20, max_request_size=2**21)
    bad_positions = set()
    counts = [0] * parts
    for i, (value, headers, ok) in enumerate(stream):
        p = i % parts  # round robin keeps every partition in time order
        key = b"tombstone" if value is None else None  # Kafka needs a key on a null value
        producer.send(topic, value=value, key=key, headers=headers or [], partition=p)
        if not ok:
            bad_positions.add((p, counts[p]))
        counts[p] += 1
    producer.flush()
    producer.close()

    store = TemporalGraphStore(StoreConfig(num_partitions=2))
    ends = {f"{topic}:{p}": counts[p] for p in range(parts)}
    with KafkaSource(
        topic, bootstrap_servers=kafka_bootstrap, backend=backend, dead_letter_topic=dlq
    ) as source:
        while source.positions() != ends:  # wait for the messages, not for time: a loaded host is slow
            batch = source.poll(0.5)
            if batch is not None:
                report = store.ingest(batch)
                source.report_dead_letters(report.dead_letters)
        assert source.poll(0.5) is None
        assert source.stats.dead_letters == n_bad

    edges = store.edges()
    order = np.argsort(edges.t)
    assert store.num_edges == len(good)
    assert np.array_equal(edges.t[order], good.t)
    assert np.array_equal(store.external_ids(edges.src[order]), good.src)
    assert np.array_equal(store.external_ids(edges.dst[order]), good.dst)

    letters = read_topic(kafka_bootstrap, dlq)  # the source flushed its dead letters when it closed
    assert len(letters) == n_bad
    origins = set()
    for rec in letters:
        h = dict(rec.headers)
        assert h["reason"] and h["source-topic"].decode() == topic, h
        origins.add((int(h["source-partition"]), int(h["source-offset"])))
    assert origins == bad_positions


def read_dead_letters(bootstrap: str, dlq: str, n: int) -> list:
    """The records of the one-partition topic ``dlq``, which must be exactly ``n``."""
    letters = read_topic(bootstrap, dlq)  # the source flushed them (positions())
    assert len(letters) == n, [dict(r.headers).get("reason") for r in letters]
    return letters


def consume(source: KafkaSource, n: int) -> list[int]:
    """Event ids until ``n`` arrived (bounded by the test's timeout); the source must not stop on the way."""
    eids: list[int] = []
    while len(eids) < n:
        batch = source.poll(0.5)
        if batch is not None:
            eids += batch.eid.tolist()
    return eids


def test_payloads_the_codec_cannot_read_are_dead_letters_that_can_be_replayed(
    kafka_bootstrap, make_topic, backend
):
    """A crafted binary batch (valid CRC, offsets cutting a UTF-8 character), a blank message and a binary
    batch with one bad row: each costs only its own events, and the dead letter holds what failed."""
    from kafka import KafkaProducer

    from streamgnn.codec import decode_binary

    topic, dlq = make_topic(1), make_topic(1)
    split = bytearray(
        encode_binary(EventBatch.from_columns(src=["é", "a"], dst=["b", "c"], t=[2.0, 2.0], eid=[20, 21]))
    )
    split[56:68] = np.array([0, 1, 3], "<u4").tobytes()  # the src offsets, after header, kind, t and eid
    split[16:20] = zlib.crc32(bytes(split[20:])).to_bytes(4, "little")
    one_bad = EventBatch.from_columns(src=["x", "y"], dst=["y", "z"], t=[4.0, -1.0], eid=[3, 40])

    def event(eid: int) -> bytes:
        return encode_json_event(EventBatch.from_columns(src=["s"], dst=["d"], t=[float(eid)], eid=[eid]), 0)

    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for value, headers in [(event(1), None), (bytes(split), BIN_H), (b" \r\n\t", JSON_H), (event(2), None),
                           (encode_binary(one_bad), BIN_H), (event(5), JSON_H)]:  # fmt: skip
        producer.send(topic, value, headers=headers or [])
    producer.flush()
    producer.close()
    with KafkaSource(
        topic, bootstrap_servers=kafka_bootstrap, backend=backend, dead_letter_topic=dlq
    ) as source:
        assert consume(source, 4) == [1, 2, 3, 5]
        assert source.stats.dead_letters == 3
        source.positions()  # flushes the dead letters
    split_letter, blank, bad_row = read_dead_letters(kafka_bootstrap, dlq, 3)
    assert split_letter.value == bytes(split)
    assert b"splits a UTF-8 character" in dict(split_letter.headers)["reason"]
    assert blank.value == b" \r\n\t" and b"no events" in dict(blank.headers)["reason"]
    assert dict(bad_row.headers)["source-offset"] == b"4"
    assert decode_binary(bad_row.value).eid.tolist() == [40]  # the row itself, ready to fix and resend


def test_dead_letter_too_large_for_its_topic_goes_out_cut_short(kafka_bootstrap, make_topic, backend):
    """A malformed message just under the size limit no longer fits once the dead-letter headers are added;
    resending it could never succeed, and must not hold up the good events behind it."""
    from kafka import KafkaProducer

    from streamgnn.connectors.kafka import TRUNCATED_HEADER

    topic, dlq = make_topic(1), make_topic(1)
    huge = b"{" + b"x" * 1_048_540
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, max_request_size=2**22)
    producer.send(topic, huge)
    producer.send(topic, encode_json_event(EventBatch.from_columns(src=[1], dst=[2], t=[1.0], eid=[1]), 0))
    producer.flush()
    producer.close()
    with KafkaSource(
        topic, bootstrap_servers=kafka_bootstrap, backend=backend, dead_letter_topic=dlq, max_poll_messages=1
    ) as source:
        assert consume(source, 1) == [1]
        source.positions()
    (letter,) = read_dead_letters(kafka_bootstrap, dlq, 1)
    headers = dict(letter.headers)
    assert headers[TRUNCATED_HEADER] == str(len(huge)).encode()
    assert 0 < len(letter.value) < len(huge) and huge.startswith(letter.value)
    assert b"invalid JSON" in headers["reason"] and headers["source-offset"] == b"0"
