"""A raised exception on one rank ends the whole job: every process exits, non-zero, and the output names the
error and the rank. Real ranks: two ``torch.distributed`` (gloo) processes joined by environment as on two
hosts (no ``torchrun`` agent to kill the survivor for us), and ``mpiexec -n 2`` for the agents. Each test
fails instead of hanging when a rank is left waiting (a deadline on the processes, then they are killed).
This file is also the ranks' worker script."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from streamgnn.connectors.broker import free_port  # below the ephemeral range: no client takes it first

MPIEXEC = Path(sys.executable).with_name("mpiexec")
DEADLINE_S = 420  # generous for two cold processes on a loaded 2-core host; a hang never ends at all
ERROR = "injected failure on rank 1"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "passive", "PYTHONWARNINGS": "ignore"}


def fail_on_rank_one(cls, method: str, rank: int, at_call: int = 2) -> None:
    """Make ``cls.method`` raise on ``rank`` at its ``at_call``-th call (the peers are then mid-job)."""
    original, calls = getattr(cls, method), [0]

    def failing(self, *args, **kw):
        calls[0] += 1
        if rank == 1 and calls[0] == at_call:
            raise ValueError(ERROR)
        return original(self, *args, **kw)

    setattr(cls, method, failing)


def torch_worker(mode: str) -> None:
    import torch

    from streamgnn.events import EventBatch
    from streamgnn.jobs import run_online
    from streamgnn.nn import TGNConfig
    from streamgnn.shard import ShardConfig, ShardedTrainer
    from streamgnn.train import OnlineTrainer, TrainConfig

    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    rng = np.random.default_rng(5)
    n = 400
    events = EventBatch.from_columns(
        src=rng.integers(0, 50, n), dst=rng.integers(50, 80, n), t=np.cumsum(rng.exponential(1.0, n)),
        eid=np.arange(n),
    )  # fmt: skip
    model = TGNConfig(
        memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=4, dropout=0.0, pair_features=False
    )
    sharding = ShardConfig(num_partitions=4) if mode == "sharded" else None
    config = TrainConfig(model=model, batch_size=40, eval_negatives=4, serve_every=0, sharding=sharding)
    fail_on_rank_one(ShardedTrainer if sharding else OnlineTrainer, "step", rank)
    run_online(events, None if sharding else _store(), config, progress=False)
    print(f"rank {rank} finished", flush=True)


def _store():
    from streamgnn.store import StoreConfig, TemporalGraphStore

    return TemporalGraphStore(StoreConfig())


def mpi_worker(out: str) -> None:
    from streamgnn.agents.runtime import MPIAgents
    from streamgnn.cli import main

    # rank 1 fails where rank 0 sends it the trained model: rank 0 is left waiting on that message
    original = MPIAgents.share

    def share(self, make):
        if self.rank == 1:
            raise ValueError(ERROR)
        return original(self, make)

    MPIAgents.share = share
    small = "--nodes 16 --communities 4 --train 60 --test 12 --fit-steps 5 --taps 3 --hidden 8 --probs 0"
    sys.exit(main(["agents", "source-loc", *shlex.split(small), "--quiet", "--out", out]))


def spawn(cmd: list[str], env: dict, cwd: Path) -> subprocess.Popen:
    """``cmd`` in a session of its own (so a hung job is killed whole), output captured."""
    return subprocess.Popen(
        cmd,
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def wait_all(procs: list[subprocess.Popen]) -> list[tuple[int, str]]:
    """Each process's exit status and output; fails the test (killing them) if any outlives the deadline."""
    end = time.monotonic() + DEADLINE_S
    try:
        for proc in procs:
            proc.wait(timeout=max(1.0, end - time.monotonic()))
    except subprocess.TimeoutExpired:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGKILL)  # the process and what it started (mpiexec's ranks)
        outs = [proc.communicate()[0] for proc in procs]
        pytest.fail(f"a rank was left waiting after the failure: {[o[-1500:] for o in outs]}")
    return [(proc.returncode, proc.communicate()[0]) for proc in procs]


@pytest.mark.parametrize("mode", ["sharded", "replicated"])
def test_an_exception_on_one_torch_distributed_rank_ends_the_job(mode, tmp_path):
    env = {**ENV, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2"}
    procs = [
        spawn([sys.executable, __file__, "torch", mode], {**env, "RANK": str(rank)}, tmp_path)
        for rank in range(2)
    ]
    (code0, out0), (code1, out1) = wait_all(procs)
    assert code1 == 1 and ERROR in out1 and "rank 1 of 2 failed (ValueError" in out1, out1[-3000:]
    # the survivor's next collective fails on the closed connection, and it ends the same way
    assert code0 != 0 and "rank 0 of 2 failed" in out0, out0[-3000:]
    assert "finished" not in out0 + out1


def test_an_exception_on_one_mpi_agent_rank_ends_the_job(tmp_path):
    cmd = [str(MPIEXEC), "-n", "2", sys.executable, __file__, "mpi", str(tmp_path / "out")]
    proc = spawn(cmd, ENV, tmp_path)
    [(code, out)] = wait_all([proc])
    assert code != 0 and ERROR in out and "rank 1 of 2 failed (ValueError" in out, out[-3000:]
    assert not (tmp_path / "out" / "source_loc.json").exists()  # no report from a job that failed


if __name__ == "__main__":
    if sys.argv[1] == "torch":
        torch_worker(sys.argv[2])
    else:
        mpi_worker(sys.argv[2])
