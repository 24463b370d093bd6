"""Topic administration: ``create_topic`` (through kafka-python's admin client, whichever client reads).

>>> create_topic("localhost:9092", "edges", partitions=4)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import time

from ...errors import ConfigError, ConnectorError


def create_topic(
    bootstrap_servers: str,
    topic: str,
    partitions: int = 1,
    *,
    compacted: bool = False,
    timeout_s: float = 30.0,
    **admin_config,
) -> None:
    """Create ``topic`` with ``partitions`` partitions (kafka-python admin settings pass through).

    An existing topic with the same partition count is fine; a different count raises ``ConfigError``,
    since keying by graph partition depends on it. ``compacted`` keeps only the latest value per key.
    """
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    if partitions < 1:
        raise ConfigError(f"a topic needs at least 1 partition, got {partitions}")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, **admin_config)
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
