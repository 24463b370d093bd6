"""What a ``KafkaSource`` checks and opens as it is made: its options, where it starts, its client adapter."""

from __future__ import annotations

from collections.abc import Mapping

from ...errors import ConfigError
from .consumer import START_POLICIES, Consumer, OnCommit, OnFailure, split_key
from .reach import preflight


def open_consumer(
    backend: str, bootstrap: str, group: str | None, config: dict, connect_timeout_s: float,
    acknowledged: OnCommit, failed: OnFailure,
) -> Consumer:  # fmt: skip
    """The adapter of ``backend``, checked to reach a broker (``reach.preflight``), with auto-commit off (the
    source commits what it delivered) and the start policy taken out of ``config``."""
    reset_key = "auto_offset_reset" if backend == "kafka-python" else "auto.offset.reset"
    start = config.pop(reset_key, "earliest")
    if start not in START_POLICIES:
        raise ConfigError(
            f"{reset_key}={start!r}: use one of {START_POLICIES} (where a partition with no saved or "
            "committed offset starts; an offset outside the log is always an error, never a reset)"
        )
    preflight(backend, bootstrap, config, connect_timeout_s)
    if backend == "kafka-python":
        from .kafka_python import KafkaPythonConsumer

        if config.get("enable_auto_commit"):
            raise ConfigError("enable_auto_commit must stay False: KafkaSource commits what it has delivered")
        config["enable_auto_commit"] = False
        return KafkaPythonConsumer(bootstrap, group, config, start, acknowledged, failed)
    from .confluent import ConfluentConsumer

    if str(config.get("enable.auto.commit", "false")).lower() == "true":
        raise ConfigError("enable.auto.commit must stay false: KafkaSource commits what it has delivered")
    config["enable.auto.commit"] = False
    return ConfluentConsumer(bootstrap, group, config, start, acknowledged, failed, connect_timeout_s)


def check_sizes(
    topics: list[str], partitions, buffered: int, batch: int, poll: int, idle_s: float, linger_s: float | None
) -> None:
    """Refuse a source that names nothing to read, or sizes and waits out of range."""
    if not topics and not partitions:
        raise ConfigError("name what to read: topics=['edges'] or partitions=['edges:0', 'edges:1']")
    if min(buffered, batch, poll) < 1:
        raise ConfigError("max_buffered_events, max_batch_events and max_poll_messages must be >= 1")
    if not idle_s >= 0 or (linger_s is not None and not linger_s > 0):
        raise ConfigError(f"idle_partition_s must be >= 0 and linger_s > 0 or None; got {idle_s}, {linger_s}")


def start_offsets_of(store, start_offsets: Mapping[str, int] | None) -> dict[str, int]:
    """Where to resume each partition: ``start_offsets``, else the ``store``'s checkpointed offsets."""
    offsets = dict(store.source_offsets) if store is not None and start_offsets is None else {}
    offsets.update(start_offsets or {})
    for key, off in offsets.items():
        split_key(key)
        if int(off) < 0:
            raise ConfigError(f"start offset for {key} is {off}; offsets are >= 0")
    return {k: int(v) for k, v in offsets.items()}
