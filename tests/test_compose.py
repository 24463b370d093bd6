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
from streamgnn.cli._config import load_config

ROOT = Path(__file__).resolve().parent.parent


def test_docker_compose_validates_the_file():
    exe = shutil.which("docker-compose")
    if exe is None:
        assert not os.environ.get("CI"), "CI must install docker-compose (.ci/run does: apt-get install)"
        pytest.skip("docker-compose is not installed here (apt-get install docker-compose); CI runs this")
    for profile in ([], ["--profile", "nccl"]):
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
    assert {"topics", "producer", "trainer-0", "trainer-1", "serve", "trainer-gpu-0", "trainer-gpu-1"} <= set(
        services
    )
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
    assert checked == 7
    gpu = services["trainer-gpu-0"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert gpu["capabilities"] == ["gpu"] and services["trainer-gpu-0"]["profiles"] == ["nccl"]


def test_the_cluster_config_loads_with_the_compose_environment():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    env = {k: str(v) for k, v in compose["services"]["trainer-gpu-0"]["environment"].items()}
    cfg = load_config(ROOT / "config" / "cluster.yaml", env=env)
    assert cfg.kafka.bootstrap == "kafka:9092" and cfg.kafka.partitions == 4
    assert cfg.train.device == "cuda" and cfg.train.checkpoint_dir == "/checkpoints/gpu"
    assert cfg.train.model.memory_dim == 100 and cfg.serve.host == "0.0.0.0"
