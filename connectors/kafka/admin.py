"""Topic administration: ``create_topic`` (through kafka-python's admin client, whichever client reads).

>>> create_topic("localhost:9092", "edges", partitions=4)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import time

from ...errors import ConfigError, ConnectorError
from .reach import DEFAULT_CONNECT_TIMEOUT_S, preflight, starting
from .settings import settings_error


def create_topic(
    bootstrap_servers: str,
    topic: str,
    partitions: int = 1,
    *,
    compacted: bool = False,
    timeout_s: float = 30.0,
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    **admin_config,
) -> None:
    """Create ``topic`` with ``partitions`` partitions (kafka-python admin settings pass through).

    An existing topic with the same partition count is fine; a different count raises ``ConfigError``,
    since keying by graph partition depends on it. ``compacted`` keeps only the latest value per key.
    No broker answering within ``connect_timeout_s`` is a ``ConnectorError`` naming the addresses tried;
    the topic not appearing within ``timeout_s`` another.
    """
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import KafkaConfigurationError, TopicAlreadyExistsError

    if partitions < 1:
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
            admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs)])
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
        if have != partitions:
            raise ConfigError(
                f"topic {topic!r} exists with {have} partitions, not {partitions}; use another topic name "
                "or the existing partition count"
            )
    finally:
        admin.close()
