"""Topic administration: ``create_topic`` (through kafka-python's admin client, whichever client reads).

>>> create_topic("localhost:9092", "edges", partitions=4)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import time

from ...errors import ConfigError, ConnectorError
from .reach import DEFAULT_CONNECT_TIMEOUT_S, preflight, starting
from .settings import settings_error


def missing_topic(
    bootstrap_servers: str, topic: str, flag: str = "--topic", what: str = "topic"
) -> ConfigError:
    """The error for a topic that does not exist, naming the command that creates it (``flag``: the option of
    ``streamgnn topics`` that names this kind of topic; ``what``: the kind, e.g. "dead-letter topic")."""
    return ConfigError(
        f"{what} {topic!r} does not exist at {bootstrap_servers}; create it first: "
        f"streamgnn topics --bootstrap {bootstrap_servers} {flag} {topic} (in Python: create_topic)"
    )


def create_topic(
    bootstrap_servers: str,
    topic: str,
    partitions: int | None = 1,
    *,
    compacted: bool = False,
    timeout_s: float = 30.0,
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    **admin_config,
) -> int:
    """Create ``topic`` with ``partitions`` partitions (kafka-python admin settings pass through); returns
    the topic's partition count.

    An existing topic with the same partition count is fine; a different count raises ``ConfigError``,
    since keying by graph partition depends on it. ``partitions=None`` takes an existing topic as it is
    (whatever created it) and creates a missing one with 1. ``compacted`` keeps only the latest value per key.
    No broker answering within ``connect_timeout_s`` is a ``ConnectorError`` naming the addresses tried;
    the topic not appearing within ``timeout_s`` another.
    """
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import KafkaConfigurationError, TopicAlreadyExistsError

    if partitions is not None and partitions < 1:
        raise ConfigError(f"a topic needs at least 1 partition, got {partitions}")
    preflight("kafka-python", bootstrap_servers, admin_config, connect_timeout_s)
    try:
        with starting("kafka-python", bootstrap_servers, admin_config):
            admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, **admin_config)
    except (KafkaConfigurationError, ValueError, TypeError, AssertionError):
        raise settings_error("kafka-python admin", admin_config, KafkaAdminClient.DEFAULT_CONFIG) from None
    try:
        configs = {"cleanup.policy": "compact"} if compacted else {}
        with contextlib.suppress(TopicAlreadyExistsError):
            admin.create_topics([NewTopic(topic, partitions or 1, 1, topic_configs=configs)])
        deadline = time.monotonic() + timeout_s
        while True:
            found = admin.describe_topics([topic])[0]
            have = len(found.get("partitions") or ())
            if found.get("error_code", 0) == 0 and have:
                break
            if time.monotonic() > deadline:
                raise ConnectorError(
                    f"topic {topic!r} did not appear within {timeout_s:g}s; is the broker healthy?"
                )
            time.sleep(0.1)
        if partitions is not None and have != partitions:
            raise ConfigError(
                f"topic {topic!r} exists with {have} partitions, not {partitions}; use another topic name "
                f"or the existing partition count (--partitions {have}, or leave it out)"
            )
        return have
    finally:
        admin.close()
