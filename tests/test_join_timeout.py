"""A rank started without torchrun whose peer never joins (it did not start, or died first) ends within the
join timeout (``STREAMGNN_JOIN_TIMEOUT_S``) with one line saying what it waited for, not gloo's 30 minutes.
Real processes: one rank of a two-rank job, alone (the setting's own check, before any connection, runs in
this process)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from streamgnn.connectors.broker import free_port  # below the ephemeral range: no client takes it first


@pytest.mark.parametrize(("rank", "waited"), [(0, "the other ranks to join"), (1, "rank 0 to listen")])
def test_a_rank_alone_ends_after_the_join_timeout(tmp_path, rank, waited):
    env = dict(
        os.environ, WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()), STREAMGNN_JOIN_TIMEOUT_S="3", OMP_NUM_THREADS="1",
    )  # fmt: skip
    cmd = [sys.executable, "-m", "streamgnn.cli", "train", "--dataset", "jodie_wikipedia", "--events", "10"]
    proc = subprocess.run(
        [*cmd, "--quiet"], env=env, capture_output=True, text=True, cwd=tmp_path, timeout=600
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    said = [line for line in proc.stderr.splitlines() if line.startswith("streamgnn: error:")]
    assert len(said) == 1, proc.stderr
    assert f"rank {rank} of 2 waited 3 s (STREAMGNN_JOIN_TIMEOUT_S) for {waited}" in said[0], said


def test_the_join_timeout_must_be_a_number_of_seconds(monkeypatch):
    """Checked before any connection is tried: in this process, no rank started (the check needs none)."""
    from streamgnn.errors import ConfigError
    from streamgnn.train.distributed import init_distributed

    env = {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)  # (not under torchrun)
    for bad in ("0", "soon", "nan"):
        monkeypatch.setenv("STREAMGNN_JOIN_TIMEOUT_S", bad)
        with pytest.raises(
            ConfigError, match=f"STREAMGNN_JOIN_TIMEOUT_S must be a number of seconds > 0, got '{bad}'"
        ):
            init_distributed()
