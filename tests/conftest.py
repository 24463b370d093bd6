"""Shared fixtures. Kafka tests run against a real broker: a local Tansu started once per session, or
the Kafka named by ``STREAMGNN_KAFKA_BOOTSTRAP`` (e.g. the docker-compose one) when that is set."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import IO

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


# Test modules marked ``integration``, by what makes them slow: a real broker, several real processes (MPI
# ranks, torch.distributed groups, CLI subprocesses), or a benchmark or document run end to end. The rest is
# the fast inner loop (``make test-fast``: ``-m "not integration"``); ``make test`` runs everything.
INTEGRATION = {
    # a Kafka broker (Tansu, started once per session) and its clients
    "test_interval_logs", "test_kafka_bench", "test_kafka_fuzz", "test_kafka_group", "test_kafka_order",
    "test_kafka_recovery", "test_kafka_security", "test_kafka_sink", "test_kafka_source",
    "test_partition_router", "test_router_hostile", "test_serve_hostile", "test_serve_http",
    "test_snapshots_live", "test_tasks_kafka", "test_train_kafka",
    # several real processes: MPI ranks, torch.distributed groups, commands killed and restarted
    "test_agents_mpi", "test_rank_failure", "test_shard_dygformer", "test_shard_faults", "test_shard_job",
    "test_shard_letters", "test_shard_router", "test_shard_train", "test_shard_walks",
    "test_train_distributed", "test_train_resume", "test_compose", "test_topology", "test_collective_count",
    # benchmarks, examples, the demo and the README's blocks, each run end to end
    "test_bench_agents", "test_bench_distributed", "test_bench_partition", "test_bench_quality",
    "test_bench_sampler", "test_bench_serve", "test_bench_snapshots", "test_bench_train",
    "test_agents_examples", "test_examples", "test_demo", "test_readme_blocks", "test_readme_serve",
    "test_snapshots_docs",
}  # fmt: skip


def pytest_configure(config):
    # A suite started in the background of a non-interactive shell (`make test &`, nohup) inherits SIGINT
    # ignored, and so would every job the tests start: the Ctrl-C tests would then see no Ctrl-C. Python's
    # own handler here means each child starts with SIGINT at its default, as from a terminal.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # kafka-python 3.0 loads its protocol schemas through a deprecated importlib.resources call
    config.addinivalue_line("filterwarnings", "ignore:(read|open)_text is deprecated:DeprecationWarning")
    missing = sorted(name for name in INTEGRATION if not (Path(__file__).parent / f"{name}.py").exists())
    if missing:
        raise pytest.UsageError(f"tests/conftest.py INTEGRATION names modules that do not exist: {missing}")


# The kernel warm-up (tests/warm_kernels.py says why): started by the xdist controller before the workers,
# waited for before the first test goes out (the workers collect meanwhile).
_WARMING: list[tuple[subprocess.Popen, IO[bytes]]] = []


def pytest_sessionstart(session):
    config = session.config
    if hasattr(config, "workerinput") or config.getoption("dist", "no") == "no":
        return  # a worker, or no xdist: one process compiles what its tests call, as a user's would
    out = tempfile.TemporaryFile()  # noqa: SIM115 (closed once the warm-up ended, below)
    cmd = [sys.executable, str(Path(__file__).with_name("warm_kernels.py"))]
    _WARMING.append((subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT), out))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    while _WARMING:
        proc, out = _WARMING.pop()
        with out:
            if proc.wait() != 0:  # the tests that call these kernels will say what is wrong: the run goes on
                out.seek(0)
                tail = out.read().decode(errors="replace")[-1500:]
                node.config.get_terminal_writer().line(f"tests/warm_kernels.py failed:\n{tail}")


# Seconds the 120 slowest tests of a full `make test` took together by module (2026-12-06, two busy loops
# beside it, `--durations=120`; the modules with 15 s or more of them; each other test took under 3.4 s). The
# suite runs them first, costliest first: `make test` hands out tests one at a time (`--dist load
# --maxschedchunk 1`), so each worker takes the next test when it is free and the run ends on short tests, not
# with one worker idle while the other is in a module of minutes. Within a module the order is kept (its
# module fixtures are built once per worker). The figures only order the run: a module not named runs last.
SLOW_MODULES = {
    "test_readme_blocks": 186, "test_agents_mpi": 144, "test_checkpoint_resume": 124,
    "test_interval_logs": 116, "test_bench_distributed": 72, "test_join_timeout": 72, "test_kafka_order": 62,
    "test_kafka_recovery": 59, "test_shard_decay": 52, "test_kafka_source": 48, "test_shard_job": 45,
    "test_shard_train": 44, "test_topology": 42, "test_demo_interrupt": 41, "test_bench_tasks": 36,
    "test_bench_soak": 35, "test_kafka_group": 34, "test_shard_router": 33, "test_shard_walks": 29,
    "test_partition_count": 29, "test_shard_faults": 27, "test_examples": 26, "test_kafka_sink": 26,
    "test_partition_router": 26, "test_shard_dygformer": 25, "test_demo": 23, "test_bench_follow": 23,
    "test_train_resume": 22, "test_train_distributed": 22, "test_bench_sampler": 22, "test_cli_broker": 22,
    "test_dist_exit": 21, "test_kafka_fuzz": 21, "test_bench_partition": 20, "test_agents_examples": 20,
    "test_kafka_security": 18, "test_shard_letters": 16, "test_kafka_bench": 16, "test_bench_pairs": 16,
    "test_collective_count": 15,
}  # fmt: skip


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.stem in INTEGRATION:
            item.add_marker(pytest.mark.integration)
    # (a stable sort: each module's tests stay together and in order; every worker sorts the same collection)
    items.sort(key=lambda item: -SLOW_MODULES.get(item.path.stem, 0))


def _spawn_ranks(script: str, world: int, tmp: Path, processes: int | None = None, tries: int = 3) -> list:
    """Run ``script RANK WORLD PORT OUT`` as ``processes`` (default ``world``) real processes to the end (one
    failing stops the rest) and load what each saved to OUT with ``torch.save``; a new master port when
    another program took the last one first."""
    import torch

    from streamgnn.connectors.broker import free_port

    env = {**os.environ, "OMP_WAIT_POLICY": "passive", "PYTHONWARNINGS": "ignore"}
    port = free_port() if world > 1 else 0
    n = processes or world
    logs = [tmp / f"w{world}r{r}.err" for r in range(n)]
    procs = []
    for r, log in enumerate(logs):
        with log.open("w") as err:
            cmd = [sys.executable, script, str(r), str(world), str(port), str(tmp / f"w{world}r{r}.pt")]
            procs.append(subprocess.Popen(cmd, stderr=err, env=env))
    deadline = time.monotonic() + 300
    while any(p.poll() is None for p in procs) and not any(p.returncode for p in procs):
        assert time.monotonic() < deadline, "the ranks did not finish within 300 s"
        time.sleep(0.1)
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    failed = [log.read_text() for p, log in zip(procs, logs, strict=True) if p.returncode != 0]
    if failed and tries > 1 and any("ddress already in use" in err for err in failed):
        return _spawn_ranks(script, world, tmp, processes, tries - 1)
    assert not failed, failed[0][-3000:]
    return [torch.load(tmp / f"w{world}r{r}.pt", weights_only=False) for r in range(n)]


@pytest.fixture(scope="session")
def spawn_ranks():
    """``spawn_ranks(script, world, tmp, processes=None) -> [what each rank saved]``: real rank processes."""
    return _spawn_ranks
