"""Fail fast and clearly when no broker can be reached, before a client retries for half a minute.

Every client we create first opens a plain TCP connection to the bootstrap servers, each in turn, within
``connect_timeout_s`` in all; with a TLS protocol it also starts a TLS handshake there (a probe only: no
certificate is checked and nothing is sent after it). The first server that answers is enough; if none does,
one ``ConnectorError`` names every address tried and what happened, e.g. "connection refused", "unknown
host", or a handshake that got no answer from a broker that does not speak TLS on that port.

>>> check_reachable("127.0.0.1:1", 1.0, tls=False)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
streamgnn.errors.ConnectorError: no Kafka broker reachable at 127.0.0.1:1 within 1s: ... connection refused...
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from collections.abc import Iterator, Mapping

from ...errors import ConfigError, ConnectorError
from .settings import SECURITY_KEYS, prepare

DEFAULT_CONNECT_TIMEOUT_S = 10.0


def parse_bootstrap(bootstrap_servers: str) -> list[tuple[str, int]]:
    """``"host:port,host:port"`` as pairs; a malformed entry is a ``ConfigError`` naming it."""
    if not isinstance(bootstrap_servers, str) or not bootstrap_servers.strip():
        raise ConfigError(f"bootstrap_servers must be 'host:port[,host:port...]', got {bootstrap_servers!r}")
    out = []
    for entry in bootstrap_servers.split(","):
        entry = entry.strip()
        host, sep, port = entry.rpartition(":")
        host = host.strip("[]")  # [::1]:9092
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(
                f"bootstrap server {entry!r} is not 'host:port' with a port in 1-65535 (e.g. 'broker:9092')"
            )
        out.append((host, int(port)))
    return out


def check_reachable(bootstrap_servers: str, timeout_s: float, *, tls: bool) -> None:
    """Return once one bootstrap server accepts a connection (and a TLS handshake, with ``tls``); raise a
    ``ConnectorError`` naming each address and its failure after ``timeout_s`` otherwise."""
    if not timeout_s > 0:
        raise ConfigError(f"connect_timeout_s must be > 0, got {timeout_s}")
    servers = parse_bootstrap(bootstrap_servers)
    deadline = time.monotonic() + timeout_s
    failures = []
    while True:
        for host, port in servers:
            failure = _try(host, port, max(0.05, deadline - time.monotonic()), tls)
            if failure is None:
                return
            failures.append(f"{host}:{port} ({failure})")
        if time.monotonic() >= deadline:
            break
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))  # a broker still starting: try again
        failures.clear()
    hint = (
        "; a TLS handshake without answer usually means the broker does not speak TLS on that port (a "
        "PLAINTEXT listener?): check security_protocol and the port"
        if tls and any("TLS" in f for f in failures)
        else "; check the address and that the broker runs"
    )
    tried = ", ".join(failures)
    raise ConnectorError(
        f"no Kafka broker reachable at {bootstrap_servers} within {timeout_s:g}s: {tried}{hint} "
        "(connect_timeout_s, or --connect-timeout, sets how long to try)"
    )


def _try(host: str, port: int, timeout_s: float, tls: bool) -> str | None:
    """None if ``host:port`` answers, else what went wrong, in a few words."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            if tls:
                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE  # a probe: the client checks certificates itself
                try:
                    with context.wrap_socket(sock, server_hostname=host):
                        pass
                except TimeoutError:
                    return f"TLS handshake got no answer within {timeout_s:.1f}s"
                except (ssl.SSLError, ConnectionError, OSError) as exc:
                    return f"TLS handshake failed: {type(exc).__name__}"
        return None
    except socket.gaierror:
        return "unknown host"
    except ConnectionRefusedError:
        return "connection refused"
    except TimeoutError:
        return f"no answer within {timeout_s:.1f}s"
    except OSError as exc:
        return exc.strerror or type(exc).__name__


def preflight(backend: str, bootstrap_servers: str, config: dict, connect_timeout_s: float) -> None:
    """What every client we create goes through first: its security settings checked, its secrets masked
    in every log, and a broker reached (``config`` in that client's own spelling). A kafka-python client
    also gets ``connect_timeout_s`` as its bootstrap timeout, unless the config names one."""
    prepare(backend, config)
    check_reachable(
        bootstrap_servers, connect_timeout_s, tls=_protocol(backend, config) in ("SSL", "SASL_SSL")
    )
    if backend == "kafka-python":
        config.setdefault("bootstrap_timeout_ms", int(connect_timeout_s * 1000))


def _protocol(backend: str, config: Mapping) -> str:
    return str(config.get(SECURITY_KEYS[backend][0], "PLAINTEXT")).upper()


def startup_failed(
    backend: str, bootstrap_servers: str, config: Mapping, exc: BaseException
) -> ConnectorError:
    """A client reached the broker's port but could not start talking Kafka with it: say so, with the
    likely cause for the security settings in use (the client's own message is not repeated: it may
    quote settings)."""
    protocol = _protocol(backend, config)
    cause = {
        "SASL_PLAINTEXT": "the SASL handshake failed or got no answer: does that listener take SASL, with "
        "this sasl_mechanism and these credentials?",
        "SASL_SSL": "the TLS or SASL handshake failed: check the CA, the SASL mechanism and the credentials",
        "SSL": "the TLS handshake failed: check the CA and client certificate settings",
    }.get(protocol, "is it a Kafka broker, and is it overloaded?")
    return ConnectorError(
        f"the broker at {bootstrap_servers} accepts connections but the {backend} client could not start "
        f"({type(exc).__name__}) with security protocol {protocol}: {cause}"
    )


@contextlib.contextmanager
def starting(backend: str, bootstrap_servers: str, config: Mapping) -> Iterator[None]:
    """Turn a client's failure to start talking to a broker it could reach (its bootstrap or first
    metadata request timing out) into one ``ConnectorError`` from ``startup_failed``."""
    try:
        yield
    except Exception as exc:
        from kafka.errors import KafkaConnectionError, KafkaTimeoutError

        confluent = type(exc).__name__ == "KafkaException"
        if confluent or isinstance(exc, KafkaTimeoutError | KafkaConnectionError):
            raise startup_failed(backend, bootstrap_servers, config, exc) from None
        raise
