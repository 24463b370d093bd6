"""Reading back what a test's writers put in a topic, for assertions on all of it.

The end offsets, taken once the writers flushed, are the positive signal that everything has been read:
no "poll until a count is reached" (which stops before an extra record) and no "wait a while, then nothing
more came" (which races with a slow broker)."""

from __future__ import annotations


def read_topic(bootstrap: str, topic: str, max_bytes: int = 2**22) -> list:
    """Every record of ``topic`` (all partitions, in offset order within each) up to its end offsets now;
    bounded by the test's timeout, not by a guess at the host's speed."""
    from kafka import KafkaConsumer, TopicPartition

    reader = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_bytes=max_bytes)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(reader.partitions_for_topic(topic) or ())]
        ends = reader.end_offsets(parts)
        reader.assign(parts)
        reader.seek_to_beginning()
        out: list = []
        while any(reader.position(tp) < ends[tp] for tp in parts):
            for records in reader.poll(timeout_ms=500).values():
                out += records
        return out
    finally:
        reader.close()


def end_offsets(bootstrap: str, keys) -> dict[str, int]:
    """``{"topic:partition": end offset}`` now, for each of ``keys`` (a source's ``assignment()``)."""
    from kafka import KafkaConsumer, TopicPartition

    tps = {key: TopicPartition(key.rsplit(":", 1)[0], int(key.rsplit(":", 1)[1])) for key in keys}
    reader = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        ends = reader.end_offsets(list(tps.values()))
        return {key: int(ends[tp]) for key, tp in tps.items()}
    finally:
        reader.close()
