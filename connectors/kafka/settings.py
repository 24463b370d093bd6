"""Client choice and client settings: which clients exist, and how one client config becomes another's.

Settings pass through to the client unchanged, in that client's own spelling (``security_protocol`` for
kafka-python, ``security.protocol`` for confluent). Errors about them name keys only, never values, since a
value may be a password.

>>> available_backends()[0]
'kafka-python'
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping

from ...errors import ConfigError

BACKENDS = ("kafka-python", "confluent")


def available_backends() -> list[str]:
    """The installed clients, kafka-python first."""
    return [b for b in BACKENDS if b == "kafka-python" or importlib.util.find_spec("confluent_kafka")]


def check_backend(backend: str) -> None:
    """Refuse an unknown client name, or confluent where confluent-kafka is not installed."""
    if backend not in BACKENDS:
        raise ConfigError(f"unknown Kafka backend {backend!r}; use one of {BACKENDS}")
    if backend not in available_backends():
        raise ConfigError(
            "backend='confluent' needs confluent-kafka: `pip install 'streamgnn[confluent]'`, "
            "or use backend='kafka-python'"
        )


def settings_error(client: str, config: Mapping, known: Mapping | None = None) -> ConfigError:
    """A client rejected its settings. Its own message can quote values, passwords included, so name
    only keys: the unknown ones where the client's setting names are known, else all of them."""
    unknown = sorted(k for k in config if known is not None and k not in known)
    if unknown:
        return ConfigError(f"unknown {client} settings {unknown}; check their spelling")
    return ConfigError(
        f"invalid {client} settings among {sorted(config)}; check their values (not shown: may be secret)"
    )


def producer_settings(backend: str, consumer_config: Mapping) -> dict:
    """The connection and security settings of a consumer config that a producer of the same client takes."""
    if backend == "kafka-python":
        from kafka import KafkaProducer

        return {k: v for k, v in consumer_config.items() if k in KafkaProducer.DEFAULT_CONFIG}
    shared = ("security.", "ssl.", "sasl.", "client.", "socket.", "broker.", "reconnect.", "api.version")
    return {k: v for k, v in consumer_config.items() if k.startswith(shared)}


# librdkafka's connection and security settings in kafka-python's spelling, for create_topic's admin client
_ADMIN_SPELLING = {
    "security.protocol": "security_protocol", "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism", "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password", "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile", "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password", "client.id": "client_id",
}  # fmt: skip


def admin_settings(backend: str, producer_config: Mapping) -> dict:
    """The settings of a producer config that ``create_topic``'s (kafka-python) admin client takes, so it
    reaches a secured cluster the way the producer does."""
    from kafka import KafkaAdminClient

    if backend == "kafka-python":
        return {k: v for k, v in producer_config.items() if k in KafkaAdminClient.DEFAULT_CONFIG}
    out = {_ADMIN_SPELLING[k]: v for k, v in producer_config.items() if k in _ADMIN_SPELLING}
    if "security_protocol" in out:
        out["security_protocol"] = str(out["security_protocol"]).upper()  # librdkafka takes any case
    return out
