"""docker-compose.yml is a valid cluster definition: docker-compose accepts it (CI installs Debian's, which
needs no engine), every streamgnn command in it parses with the real CLI, and the shared config file loads
with the variables the file sets."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from streamgnn.cli import build_parser
from streamgnn.cli._config import config_from_args, load_config

ROOT = Path(__file__).resolve().parent.parent


def test_docker_compose_validates_the_file():
    exe = shutil.which("docker-compose")
    if exe is None:
        assert not os.environ.get("CI"), "CI must install docker-compose (.ci/run does: apt-get install)"
        pytest.skip("docker-compose is not installed here (apt-get install docker-compose); CI runs this")
    for profile in ([], ["--profile", "nccl"], ["--profile", "sharded"]):
        proc = subprocess.run(
            [exe, "-f", "docker-compose.yml", *profile, "config", "-q"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr


def test_every_service_command_is_a_valid_streamgnn_command():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert services["kafka"]["image"].startswith("apache/kafka:") and "healthcheck" in services["kafka"]
    assert {
        "topics", "producer", "router", "trainer-0", "trainer-1", "serve", "trainer-gpu-0", "trainer-gpu-1",
        "trainer-sharded-0", "trainer-sharded-1",
    } <= set(services)  # fmt: skip
    parser = build_parser()
    checked = 0
    for name, service in services.items():
        command = service.get("command")
        if command is None:
            continue
        argv = shlex.split(command) if isinstance(command, str) else list(command)
        argv = [a.replace("${REPLAY_RATE:-1000}", "1000") for a in argv]
        if argv[0] == "torchrun":
            argv = argv[argv.index("streamgnn.cli") + 1 :]
            assert service["restart"] == "unless-stopped" and "checkpoints:/checkpoints" in service["volumes"]
        else:
            assert argv[0] == "streamgnn", name
            argv = argv[1:]
        args, rest = parser.parse_known_args(argv)
        assert not rest, (name, rest)
        if getattr(args, "config", None):
            assert args.config == "/config/cluster.yaml" and "./config:/config:ro" in service["volumes"]
        checked += 1
    assert checked == 10
    gpu = services["trainer-gpu-0"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert gpu["capabilities"] == ["gpu"] and services["trainer-gpu-0"]["profiles"] == ["nccl"]


def test_the_router_sits_between_the_producer_and_the_trainers():
    """The producer writes kafka.raw_topic, the router reads it and writes kafka.events_topic (the trainers'
    topic) with kafka.partitions partitions; it restarts, and keeps its checkpoint on a named volume."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services, parser = compose["services"], build_parser()
    cfg = load_config(ROOT / "config" / "cluster.yaml", env={})

    def resolved(argv):  # what the command runs with: its flags over the shared file
        args = parser.parse_args(argv)
        if getattr(args, "config", None) == "/config/cluster.yaml":
            args.config = str(ROOT / "config" / "cluster.yaml")
        return args, config_from_args(args)

    _, produced = resolved(
        shlex.split(services["producer"]["command"].replace("${REPLAY_RATE:-1000}", "1"))[1:]
    )
    assert produced.kafka.events_topic == cfg.kafka.raw_topic != cfg.kafka.events_topic
    assert produced.kafka.partitions == cfg.kafka.raw_partitions == 1  # one raw partition: in time order
    router = services["router"]
    args, routed = resolved(shlex.split(router["command"])[1:])
    assert (
        routed.kafka.raw_topic == cfg.kafka.raw_topic and routed.kafka.events_topic == cfg.kafka.events_topic
    )
    assert (
        routed.kafka.format == "binary" and routed.partition.partitioner.name == "fennel"
    )  # placement travels
    volume = next(v for v in router["volumes"] if v.split(":")[1] == routed.partition.checkpoint_dir)
    assert volume.split(":")[0] in compose["volumes"] and router["restart"] == "unless-stopped"
    assert router["depends_on"]["topics"]["condition"] == "service_completed_successfully"
    for name in ("trainer-0", "trainer-1"):
        argv = shlex.split(services[name]["command"])
        trainer = parser.parse_args(argv[argv.index("streamgnn.cli") + 1 :])
        assert trainer.kafka and getattr(trainer, "cfg:kafka.events_topic") is None  # the router's output


def test_the_compose_router_command_routes_against_a_broker(
    kafka_bootstrap, tmp_path, monkeypatch, make_events
):
    """The router service's command, as written (config path and volume mapped here), after the topic-init
    job's: it reads what the producer wrote and publishes every event once, placed, into the events topic."""
    import uuid

    from streamgnn.cli import main
    from streamgnn.connectors.kafka import EventProducer

    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    raw, events = f"raw-{uuid.uuid4().hex[:8]}", f"events-{uuid.uuid4().hex[:8]}"
    for key, value in (("BOOTSTRAP", kafka_bootstrap), ("RAW_TOPIC", raw), ("EVENTS_TOPIC", events)):
        monkeypatch.setenv(f"STREAMGNN_KAFKA__{key}", value)
    config = str(ROOT / "config" / "cluster.yaml")
    topics = shlex.split(" ".join(compose["services"]["topics"]["command"]))[1:]
    assert main([a.replace("/config/cluster.yaml", config) for a in topics]) == 0  # creates raw too
    stream = make_events(300)
    with EventProducer(kafka_bootstrap, raw, fmt="binary", batch_size=50) as producer:
        producer.send(stream)
        producer.flush()
    argv = shlex.split(compose["services"]["router"]["command"])[1:]
    argv = [
        a.replace("/config/cluster.yaml", config).replace("/router", str(tmp_path / "router")) for a in argv
    ]
    assert main([*argv, "--max-events", "300", "--flush"]) == 0
    assert (tmp_path / "router" / "LATEST").exists()
    got = read_all(kafka_bootstrap, events, len(stream))
    assert sorted(got.eid.tolist()) == stream.eid.tolist()  # every event once
    assert set(got.placement[:, 0].tolist()) == {0, 1, 2, 3}  # at its source's partition of the config's 4


def read_all(bootstrap: str, topic: str, n: int):
    """The first ``n`` events of ``topic`` (waits for them; the bound only turns a hang into a failure)."""
    import time

    from streamgnn.connectors.kafka import KafkaSource
    from streamgnn.events import concat

    got, deadline = [], time.monotonic() + 300
    with KafkaSource(topic, bootstrap_servers=bootstrap) as source:
        while sum(map(len, got)) < n:
            assert time.monotonic() < deadline, f"{sum(map(len, got))} of {n} events arrived"
            batch = source.poll(1.0)
            if batch is not None:
                got.append(batch)
    return concat(got)


def test_the_cluster_config_loads_with_the_compose_environment():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    env = {k: str(v) for k, v in compose["services"]["trainer-gpu-0"]["environment"].items()}
    cfg = load_config(ROOT / "config" / "cluster.yaml", env=env)
    assert cfg.kafka.bootstrap == "kafka:9092" and cfg.kafka.partitions == 4
    assert cfg.train.device == "cuda" and cfg.train.checkpoint_dir == "/checkpoints/gpu"
    assert cfg.train.model.memory_dim == 100 and cfg.serve.host == "0.0.0.0"


def test_the_sharded_profile_runs_a_sharded_job_that_publishes():
    """Its two ranks form one torchrun job of ``streamgnn train`` that publishes, with a sharded config
    owning the router's partitions (as many as the events topic has), checkpointing apart from the
    replicated job, with the default model (pair features on)."""
    from streamgnn.shard import ShardedTrainer

    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services, parser = compose["services"], build_parser()
    ranks = [services[f"trainer-sharded-{r}"] for r in range(2)]
    assert all(s["profiles"] == ["sharded"] and s["restart"] == "unless-stopped" for s in ranks)
    assert ranks[0]["environment"] == ranks[1]["environment"]
    env = {k: str(v) for k, v in ranks[0]["environment"].items()}
    cfg = load_config(ROOT / "config" / "cluster.yaml", env=env)
    sharding = cfg.train.sharding
    assert sharding.placement == "stream" and sharding.num_partitions == cfg.kafka.partitions == 4
    assert cfg.train.checkpoint_dir == "/checkpoints/sharded" and cfg.train.model.pair_features
    for service in ranks:
        argv = shlex.split(service["command"])
        assert "--rdzv-endpoint" in argv and argv[argv.index("--rdzv-endpoint") + 1].startswith(
            "trainer-sharded-0:"
        )
        args = parser.parse_args(argv[argv.index("streamgnn.cli") + 1 :])
        assert args.kafka and args.publish
    trainer = ShardedTrainer(cfg.train)  # what the job builds on each rank (alone here: it owns all)
    assert trainer.table is not None and trainer.ownership.partitions() == [0, 1, 2, 3]  # it serves
