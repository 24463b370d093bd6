"""The partition router fed what a raw topic can hold: among good events (single JSON lines, binary batches
and one huge batch) every malformed record ``test_kafka_fuzz`` makes (empty, tombstones, truncated, wrong
codec, NaN/inf times, ids of the wrong type or another stream's, bad kinds, deep nesting, not UTF-8). On the
real broker the router must keep running, publish every good event once and send each bad record to the
dead-letter topic, with its reason and origin: nothing lost silently, nothing crashes the stream."""

from __future__ import annotations

import numpy as np
from test_kafka_fuzz import BIN_H, JSON_H, fuzzed
from test_partition_router import _dead_letters, _read

from streamgnn.codec import encode_binary, encode_json_event
from streamgnn.events import EventBatch

HUGE = 20_000  # events in one binary message: more than the router's batch and checkpoint spans


def good_stream(n: int) -> EventBatch:
    rng = np.random.default_rng(2)
    return EventBatch.from_columns(
        src=rng.integers(0, 500, n),
        dst=rng.integers(500, 900, n),
        t=np.arange(n, dtype=float),
        eid=np.arange(n),
    )


def test_hostile_records_are_dead_letters_and_every_good_event_is_routed_once(kafka_bootstrap, make_topic):
    from kafka import KafkaProducer

    from streamgnn.jobs.router import PartitionRouter, RouterConfig

    good = good_stream(HUGE + 400)
    rng = np.random.default_rng(3)
    messages: list[tuple] = []  # (value, headers), in time order for the good ones
    i, k, bad = 0, 0, set()
    while i < len(good):
        if i == 200:  # the huge batch, in the middle of the stream
            messages.append((encode_binary(good[i : i + HUGE]), BIN_H))
            i += HUGE
        elif rng.random() < 0.5:
            messages.append((encode_json_event(good, i), JSON_H))
            i += 1
        else:
            messages.append((encode_binary(good[i : i + 7]), BIN_H))
            i += 7
        if rng.random() < 0.3 and k < 60:  # every kind of bad record, three times each
            bad.add(len(messages))  # its offset
            messages.append(fuzzed(rng, k))
            k += 1
    assert k == 60
    raw, out, dlq = make_topic(1), make_topic(4), make_topic(1)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, max_request_size=2**21)
    for value, headers in messages:
        producer.send(raw, value=value, key=b"tombstone" if value is None else None, headers=headers or [])
    producer.flush()
    producer.close()

    router = PartitionRouter(
        kafka_bootstrap, raw, out, 4, RouterConfig(checkpoint_every=5000), dead_letter_topic=dlq
    )
    end = {f"{raw}:0": len(messages)}
    while router.positions != end:  # wait for the event (every record read), not for time
        report = router.run(idle_timeout_s=1.0, flush=True)
    assert report.dead_letter_count == 60  # counted once each, whichever run read them
    letters = _dead_letters(kafka_bootstrap, dlq)
    # each bad record, named by where it was, with a reason; a run that stopped before handing out what it
    # had read sends those letters again after its restart (at least once, as ``KafkaSource`` documents)
    assert {offset for offset, _, _ in letters} == bad and all(reason for _, _, reason in letters)
    routed = [eid for rows in _read(kafka_bootstrap, out, 4).values() for eid, *_ in rows]
    assert sorted(routed) == good.eid.tolist()  # every good event once
