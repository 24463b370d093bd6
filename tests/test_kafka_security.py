"""Security settings: a mistyped one is refused (never read as plaintext), TLS against a plaintext listener
fails in bounded time with the likely cause, no secret reaches a log at any level from any client we create
(consumer, producer, admin), and no secret reaches a dead letter."""

from __future__ import annotations

import logging
import time

import pytest
from topic_records import read_topic

from streamgnn.codec import encode_json_event
from streamgnn.connectors.kafka import EventProducer, KafkaSource, create_topic, produce_dataset
from streamgnn.connectors.sink import KafkaSink
from streamgnn.errors import ConfigError, ConnectorError
from streamgnn.events import EventBatch

SECRET = "hunter2-d0-not-leak"


def creds(backend: str, protocol: str) -> dict:
    if backend == "kafka-python":
        return {"security_protocol": protocol, "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice",
                "sasl_plain_password": SECRET}  # fmt: skip
    return {"security.protocol": protocol, "sasl.mechanism": "PLAIN", "sasl.username": "alice",
            "sasl.password": SECRET}  # fmt: skip


MISTYPED = {
    "kafka-python": [
        {"security_protocol": "BOGUS"},
        {"security_protocol": "sasl_plaintext"},  # kafka-python's spelling is upper case
        {"security_protocol": "SASL_PLAINTEXT "},
        {"security_protocol": "SASL_SSL", "sasl_mechanism": "plain"},
        {"sasl_plain_username": "alice", "sasl_plain_password": SECRET},  # SASL, but PLAINTEXT by default
    ],
    "confluent": [
        {"security.protocol": "BOGUS"},
        {"security.protocol": "Sasl_Ssl"},
        {"security.protocol": " sasl_ssl"},
        {"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-1"},
        {"security.protocol": "ssl", "sasl.password": SECRET},
    ],
}


def test_mistyped_security_settings_are_refused_by_every_client(kafka_bootstrap, make_topic, backend):
    topic = make_topic(1)
    for settings in MISTYPED[backend]:
        attempts = [
            lambda s=settings: KafkaSource(topic, bootstrap_servers=kafka_bootstrap, backend=backend, **s),
            lambda s=settings: EventProducer(kafka_bootstrap, topic, backend=backend, **s),
            lambda s=settings: KafkaSink(kafka_bootstrap, embeddings_topic=topic, backend=backend, **s),
            lambda s=settings: produce_dataset(kafka_bootstrap, topic, "collegemsg", 1, backend=backend, **s),
        ]
        for attempt in attempts:
            with pytest.raises(ConfigError, match="security_protocol|security.protocol|sasl") as info:
                attempt()
            assert SECRET not in str(info.value)
    with pytest.raises(ConfigError, match="security_protocol='SASL_SSL '"):
        create_topic(kafka_bootstrap, topic, 1, security_protocol="SASL_SSL ")


def test_tls_against_a_plaintext_listener_fails_in_bounded_time_naming_the_cause(
    kafka_bootstrap, make_topic, backend
):
    topic = make_topic(1)
    began = time.monotonic()
    with pytest.raises(ConnectorError, match="does not speak TLS on that port") as info:
        KafkaSource(
            topic, bootstrap_servers=kafka_bootstrap, backend=backend, connect_timeout_s=2,
            **creds(backend, "SASL_SSL"),
        )  # fmt: skip
    assert time.monotonic() - began < 2 + 20  # a bounded wait, then one clear error
    assert kafka_bootstrap in str(info.value) and SECRET not in str(info.value)


def test_no_secret_in_any_log_at_debug_from_consumer_producer_or_admin(
    kafka_bootstrap, make_topic, backend, caplog
):
    """SASL credentials against a listener without SASL: every client we create fails to start, with a
    clear error, after logging at DEBUG what it tried (kafka-python's admin client logs its whole config)."""
    topic = make_topic(1)
    caplog.set_level(logging.DEBUG)
    attempts = [
        lambda: KafkaSource(
            topic,
            bootstrap_servers=kafka_bootstrap,
            backend=backend,
            connect_timeout_s=3,
            **creds(backend, "SASL_PLAINTEXT"),
        ).start(),  # fmt: skip
        lambda: produce_dataset(
            kafka_bootstrap,
            f"{topic}-new",
            "collegemsg",
            1,
            backend=backend,
            connect_timeout_s=3,
            **creds(backend, "SASL_PLAINTEXT"),
        ),  # fmt: skip
        lambda: KafkaSink(
            kafka_bootstrap,
            embeddings_topic=topic,
            backend=backend,
            connect_timeout_s=3,
            **creds(backend, "SASL_PLAINTEXT"),
        ),  # fmt: skip
    ]
    for attempt in attempts:
        with pytest.raises(ConnectorError, match="SASL handshake") as info:
            attempt()
        assert SECRET not in str(info.value)
    assert any(r.name.startswith("kafka") or "librdkafka" in r.name for r in caplog.records), "nothing logged"
    assert any("alice" in r.getMessage() for r in caplog.records), (
        "no settings logged: the check proves little"
    )
    leaked = [r for r in caplog.records if SECRET in r.getMessage() or SECRET in (r.exc_text or "")]
    assert not leaked, leaked[0].getMessage()


def test_no_secret_in_dead_letters(kafka_bootstrap, make_topic, backend, caplog):
    """A dead letter carries the reason and the origin, never a client setting."""
    from kafka import KafkaProducer

    topic, dlq = make_topic(1), make_topic(1)
    caplog.set_level(logging.DEBUG)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    producer.send(topic, b"not json at all")
    producer.send(topic, encode_json_event(EventBatch.from_columns(src=[1], dst=[2], t=[1.0], eid=[1]), 0))
    producer.flush()
    producer.close()
    client_id = {"client_id": SECRET} if backend == "kafka-python" else {"client.id": SECRET}
    with KafkaSource(
        topic, bootstrap_servers=kafka_bootstrap, backend=backend, dead_letter_topic=dlq, **client_id
    ) as source:
        while source.poll(0.5) is None:  # the good event, after the bad one (the test's timeout bounds it)
            pass
        assert source.stats.dead_letters == 1
        source.positions()  # flushes the dead letter
    letters = read_topic(kafka_bootstrap, dlq)
    assert len(letters) == 1
    dumped = repr(letters[0].headers) + repr(letters[0].value)
    assert "not json" in dumped and SECRET not in dumped
