"""Shared fixtures. Kafka tests run against a real broker: a local Tansu started once per session, or
the Kafka named by ``STREAMGNN_KAFKA_BOOTSTRAP`` (e.g. the docker-compose one) when that is set."""

from __future__ import annotations

import itertools
import os
import uuid

import numpy as np
import pytest


def _kafka_backends() -> list[str]:
    from streamgnn.connectors.kafka import available_backends

    return available_backends()


# A consumer group's first join waits out the rebalance timeout (max.poll.interval) on Tansu, and a
# crashed member is noticed after the session timeout: keep both short so group tests stay fast.
FAST_GROUP = {
    "kafka-python": {"session_timeout_ms": 3000, "heartbeat_interval_ms": 500, "max_poll_interval_ms": 3000},
    "confluent": {"session.timeout.ms": 3000, "heartbeat.interval.ms": 500, "max.poll.interval.ms": 3000},
}


@pytest.fixture(scope="session")
def kafka_bootstrap():
    """``host:port`` of a broker for the whole session."""
    external = os.environ.get("STREAMGNN_KAFKA_BOOTSTRAP")
    if external:
        yield external
        return
    from streamgnn.connectors.broker import LocalBroker

    with LocalBroker() as broker:
        yield broker.bootstrap


@pytest.fixture
def make_topic(kafka_bootstrap):
    """``make_topic(partitions=1, compacted=False) -> name``: a fresh, uniquely named topic per call."""
    from streamgnn.connectors.kafka import create_topic

    counter = itertools.count()

    def make(partitions: int = 1, compacted: bool = False) -> str:
        name = f"t{next(counter)}-{uuid.uuid4().hex[:10]}"
        create_topic(kafka_bootstrap, name, partitions, compacted=compacted)
        return name

    return make


@pytest.fixture(params=_kafka_backends())
def backend(request) -> str:
    """Each Kafka test runs once per installed client."""
    return request.param


@pytest.fixture
def group_config(backend) -> dict:
    """Client settings for a consumer group that joins and fails over within seconds."""
    return dict(FAST_GROUP[backend])


@pytest.fixture
def make_events():
    """``make_events(n, first_eid=0, num_nodes=300) -> EventBatch``: edge adds, time-ordered, t == eid."""
    from streamgnn.events import EventBatch

    def make(n: int, first_eid: int = 0, num_nodes: int = 300, seed: int = 0) -> EventBatch:
        rng = np.random.default_rng(seed + first_eid)
        eid = np.arange(first_eid, first_eid + n)
        return EventBatch.from_columns(
            src=rng.integers(0, num_nodes, n), dst=rng.integers(0, num_nodes, n), t=eid.astype(float), eid=eid
        )

    return make


def pytest_configure(config):
    # kafka-python 3.0 loads its protocol schemas through a deprecated importlib.resources call
    config.addinivalue_line("filterwarnings", "ignore:(read|open)_text is deprecated:DeprecationWarning")
