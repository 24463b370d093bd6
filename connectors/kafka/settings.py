"""Client choice and client settings: which clients exist, what they accept, and that none is logged.

Settings pass through to the client unchanged, in that client's own spelling (``security_protocol`` for
kafka-python, ``security.protocol`` for confluent). Two rules come first:

* a security setting must be one the client knows, spelt exactly (``check_security``): a mistyped
  ``security_protocol`` is refused, never read as plaintext without authentication, and SASL credentials
  with a protocol that would ignore them are refused too;
* secret values (passwords, tokens, key material) never reach a log (``guard_secrets``): every client we
  create registers them, and a filter on the clients' loggers and ours masks them in any record, at any
  level. Errors about settings name keys only.

>>> available_backends()[0]
'kafka-python'
>>> check_security("kafka-python", {"security_protocol": "sasl_ssl"})  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
streamgnn.errors.ConfigError: security_protocol='sasl_ssl' is not one of (...) (exact spelling); ...
"""

from __future__ import annotations

import importlib.util
import logging
import threading
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


def consumer_settings(backend: str, config: Mapping) -> dict:
    """The settings of a job's client config that a consumer of ``backend`` takes (a kafka-python client
    refuses another client's keys; librdkafka takes every client's)."""
    if backend == "kafka-python":
        from kafka import KafkaConsumer

        return {k: v for k, v in config.items() if k in KafkaConsumer.DEFAULT_CONFIG}
    return dict(config)


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


# ---------------------------------------------------------------------------------------------- security

_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_MECHANISMS = ("GSSAPI", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
# the keys naming the protocol and the SASL mechanism, per spelling (the admin client uses kafka-python's)
SECURITY_KEYS = {
    "kafka-python": ("security_protocol", ("sasl_mechanism",)),
    "confluent": ("security.protocol", ("sasl.mechanism", "sasl.mechanisms")),
}


def _mechanisms(backend: str) -> tuple[str, ...]:
    if backend == "confluent":
        return _MECHANISMS
    from kafka.net.sasl import SASL_MECHANISMS

    return tuple(SASL_MECHANISMS)


def check_security(backend: str, config: Mapping) -> None:
    """Refuse a security protocol or SASL mechanism the client does not know, spelt exactly (confluent also
    takes the protocol in lower case, as librdkafka documents it), and SASL settings under a protocol that
    would ignore them: each would otherwise connect without the security the user asked for."""
    proto_key, mech_keys = SECURITY_KEYS[backend]
    protocols = _PROTOCOLS + (tuple(p.lower() for p in _PROTOCOLS) if backend == "confluent" else ())
    protocol = config.get(proto_key, "PLAINTEXT")
    if not isinstance(protocol, str) or protocol not in protocols:
        raise ConfigError(
            f"{proto_key}={protocol!r} is not one of {_PROTOCOLS} (exact spelling); a mistyped security "
            "setting is refused rather than downgraded to plaintext"
        )
    for key in mech_keys:
        if key in config and config[key] not in _mechanisms(backend):
            raise ConfigError(
                f"{key}={config[key]!r} is not one of {_mechanisms(backend)} (exact spelling); a mistyped "
                "security setting is refused"
            )
    sasl = sorted(k for k in config if k.startswith("sasl") and config[k] is not None)
    if sasl and not protocol.upper().startswith("SASL_"):
        raise ConfigError(
            f"SASL settings {sasl} are given but {proto_key} is {protocol!r}, which ignores them and "
            "connects without authentication; set it to SASL_SSL (or SASL_PLAINTEXT)"
        )


# ---------------------------------------------------------------------------------------------- secrets

_SECRET_WORDS = ("password", "secret", "token", "oauthbearer.config", "key.pem", "credential", "keytab")
_SECRETS: set[str] = set()
_MASK = "[redacted]"
_lock = threading.Lock()
_guarded: set[str] = set()


class _MaskSecrets(logging.Filter):
    """Masks every registered secret in a record's message (and its formatted exception)."""

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = _SECRETS
        if not secrets:
            return True
        text = record.getMessage()
        hit = [s for s in secrets if s in text]
        if hit:
            for secret in hit:
                text = text.replace(secret, _MASK)
            record.msg, record.args = text, ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text and any(s in record.exc_text for s in secrets):
            for secret in secrets:
                record.exc_text = record.exc_text.replace(secret, _MASK)
        return True


_FILTER = _MaskSecrets()


def prepare(backend: str, config: Mapping) -> None:
    """What every client we create goes through first: its security settings checked, its secrets masked
    in every log (``config`` in that client's own spelling; the admin client takes kafka-python's)."""
    check_security(backend, config)
    guard_secrets(config)


def guard_secrets(config: Mapping) -> None:
    """Register the secret values of a client config and make sure every logger of the Kafka clients (and
    of this package) masks them. Call before creating a client: loggers created since the last call (a
    client module imported late) get the filter too."""
    found = {
        v
        for k, v in config.items()
        if isinstance(v, str) and len(v) >= 4 and any(w in k.lower() for w in _SECRET_WORDS)
    }
    with _lock:
        _SECRETS.update(found)
        names = ["kafka", "streamgnn.connectors", "streamgnn.connectors.kafka.librdkafka"]
        names += [
            n for n in logging.root.manager.loggerDict if n.startswith(("kafka.", "streamgnn.connectors."))
        ]
        for name in names:
            if name not in _guarded:
                logging.getLogger(name).addFilter(_FILTER)
                _guarded.add(name)
