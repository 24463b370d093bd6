"""Where agents run: all in this process, or spread over the ranks of an MPI job (``mpiexec -n R``).

``LocalAgents`` and ``MPIAgents`` offer the same small surface, so tasks and experiments are written once:
``exchange(...)`` for the rounds (``LocalExchange`` / ``MPIExchange`` over the agents this process hosts),
``share`` to hand the setup (a trained model) from rank 0 to everyone, ``total`` to add up per-rank results
at rank 0, ``all_rows`` for the environment's physics (every rank simulates the world), and ``close``. Run
time has no coordinator: rounds only ever talk to neighbors' ranks.

Fault tolerance. Hydra (MPICH's ``mpiexec``) kills every rank when one dies by a signal, even with
``-disable-auto-cleanup`` (its proxy does so on ``WIFSIGNALED``; a process that *exits* is only reported, with
SIGUSR1 to the process group). So ``supervise`` runs each rank's agent as a child process that inherits the
rank's MPI connection: when the child is killed, the parent exits with ``128 + signal`` and the job goes on;
the survivors declare the dead rank failed after their transport's deadline and finish. Survivors must not
call ``MPI_Finalize`` (it waits for every rank), so a supervised child ends with ``finish()``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import NoReturn, TypeVar

import numpy as np
import torch
from torch import Tensor

from ..nn.exchange import Exchange, LocalExchange
from ..nn.failures import FailureModel

T = TypeVar("T")
CHILD_ENV = "STREAMGNN_AGENT_CHILD"  # a supervised agent's end of a pipe to report its stages on
STARTED, SHARED = b"1", b"2"  # MPI start-up finished; the setup (rank 0's trained models) shared
_NO_SETUP = "rank 0 was killed before it shared the setup (the trained models): nothing to run"


class LocalAgents:
    """Every agent in this process."""

    rank, size, is_root = 0, 1, True

    def __init__(self, num_agents: int):
        self.num_agents = num_agents
        self.nodes = np.arange(num_agents)
        self.failed_ranks: list[int] = []

    def exchange(
        self, failures: FailureModel | None = None, per_lane=False, memory=False, exact=True
    ) -> Exchange:
        ex = LocalExchange(failures, per_lane, memory, exact)
        ex.rows = self.nodes
        return ex

    def share(self, make: Callable[[], T]) -> T:
        return make()

    def gather(self, value: T) -> list[T | None]:
        return [value]

    def total(self, value: np.ndarray) -> np.ndarray:
        return np.asarray(value)

    def all_rows(self, local: Tensor) -> Tensor:
        return local

    @property
    def bytes_sent(self) -> int:
        return 0

    def close(self) -> None:
        pass


class MPIAgents:
    """The agents ``partition(num_agents, size)`` assigns to this rank."""

    def __init__(
        self,
        num_agents: int,
        comm=None,
        deadline_s: float | None = None,
        patience: int = 3,
        die_at_round: int | None = None,
    ):
        from mpi4py import MPI

        from .mpi_exchange import partition
        from .transport import Transport

        _report(STARTED)
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.transport = Transport(self.comm, deadline_s, patience, die_at_round)
        self.rank, self.size = self.transport.rank, self.transport.size
        self.is_root = self.rank == 0
        self.num_agents = num_agents
        self.owner = partition(num_agents, self.size)
        self.nodes = np.flatnonzero(self.owner == self.rank)
        self._env_round = 0
        if os.environ.get(CHILD_ENV):
            signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # hydra's "a peer died" notice; we notice ourselves

    @property
    def failed_ranks(self) -> list[int]:
        return sorted(self.transport.failed)

    @property
    def bytes_sent(self) -> int:
        return self.transport.bytes_sent

    def exchange(
        self, failures: FailureModel | None = None, per_lane=False, memory=False, exact=True
    ) -> Exchange:
        from .mpi_exchange import MPIExchange

        return MPIExchange(self.transport, self.owner, failures, per_lane, memory, exact)

    def share(self, make: Callable[[], T]) -> T:
        """Rank 0 computes ``make()`` and sends it to every rank; the others wait without spinning."""
        from .transport import recv_object, send_object

        if self.is_root:
            value = make()
            reqs = {r: send_object(self.comm, value, r) for r in range(1, self.size)}
            from .transport import poll

            # a rank killed since start-up never takes its copy: wait for it no longer than for a round
            poll(lambda: all(q.Test() for q in reqs.values()), self.transport.deadline_s)
            for r, q in reqs.items():
                self.transport.track(q, r)
            _report(SHARED)
            return value
        value = recv_object(self.comm, 0)
        if isinstance(value, _NoSetup):
            from ..errors import ConfigError

            print(f"rank {self.rank}: {value.reason}", file=sys.stderr)
            if supervised():
                finish(1)
            raise ConfigError(value.reason)
        _report(SHARED)
        return value

    def gather(self, value: T) -> list[T | None] | None:
        """Every rank's ``value`` at rank 0, in rank order (None elsewhere); a rank that does not report
        within the transport's deadline gets None and is recorded as failed."""
        from .transport import poll, recv_object, send_object

        if not self.is_root:
            req = send_object(self.comm, value, 0)
            poll(req.Test, self.transport.deadline_s)
            return None
        out: list = [value]
        for r in range(1, self.size):
            got = None if r in self.transport.failed else recv_object(self.comm, r, self.transport.deadline_s)
            if got is None:
                self.transport.failed.add(r)
            out.append(got)
        return out

    def total(self, value: np.ndarray) -> np.ndarray | None:
        """Sum over the ranks that reported of ``value`` at rank 0 (None elsewhere)."""
        parts = self.gather(np.asarray(value))
        return None if parts is None else sum(p for p in parts if p is not None)

    def all_rows(self, local: Tensor) -> Tensor:
        """The environment step's view of every agent: ``local [B, n, F]`` rows of this rank's agents ->
        ``[B, N, F]`` (sent to every rank; rows of failed ranks are zeros)."""
        rows = torch.from_numpy(self.nodes)
        full = local.new_zeros(local.shape[0], self.num_agents, local.shape[2])
        full[:, rows] = local
        others = [r for r in range(self.size) if r != self.rank]
        sends = dict.fromkeys(others, local.detach().contiguous().numpy())
        sizes = {
            r: local.shape[0] * int((self.owner == r).sum()) * local.shape[2] * local.element_size()
            for r in others
        }
        got = self.transport.exchange(self._env_round, "env", sends, sizes)
        self._env_round += 1
        for r, raw in got.items():
            part = np.frombuffer(raw, local.numpy().dtype).reshape(local.shape[0], -1, local.shape[2])
            full[:, torch.from_numpy(np.flatnonzero(self.owner == r))] = torch.from_numpy(part.copy())
        return full

    def close(self) -> None:
        self.transport.close()


class _NoSetup:
    """What a stand-in for rank 0 sends instead of the setup: the others end instead of waiting for it."""

    def __init__(self, reason: str):
        self.reason = reason


def supervise(argv: list[str]) -> int:
    """Run ``argv`` as this rank's child process (it inherits the MPI connection) and return its exit code,
    ``128 + signal`` when it was killed, so that hydra reports the death instead of killing the job.

    A child killed before its MPI start-up finished would leave the other ranks waiting in theirs forever
    (start-up is collective): a stand-in then starts MPI in its place and ends at once, so that the others
    start and treat this rank as failed (rank 0's stand-in tells them first that no setup will come). Rank 0
    killed after start-up but before it shared the setup leaves nothing the others could run: its supervisor
    then kills itself, hoping hydra ends the other ranks; under ``-disable-auto-cleanup`` it did not always
    (the others then wait for the setup without end: not handled yet)."""
    fds = tuple(int(os.environ[k]) for k in ("PMI_FD", "HYDI_CONTROL_FD") if os.environ.get(k, "").isdigit())
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # inherited by the child: hydra's notice must not kill it
    rc, stages = _run_child(argv, fds)
    if rc < 0 and STARTED not in stages:
        _run_child([sys.executable, "-c", "from streamgnn.agents.runtime import stand_in; stand_in()"], fds)
    elif rc < 0 and SHARED not in stages and os.environ.get("PMI_RANK") == "0":
        print(f"rank 0: {_NO_SETUP}; ending the job", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    return 128 - rc if rc < 0 else rc


def _run_child(argv: list[str], fds: tuple[int, ...]) -> tuple[int, bytes]:
    """Run a supervised child to its end: its exit code and the stages it reported (``_report``)."""
    read, write = os.pipe()
    try:
        proc = subprocess.Popen(argv, pass_fds=(*fds, write), env={**os.environ, CHILD_ENV: str(write)})
    finally:
        os.close(write)
    stages = bytearray()
    with os.fdopen(read, "rb", buffering=0) as pipe:
        while True:
            try:
                while byte := pipe.read(1):  # until the child closed its end or ended
                    stages += byte
                return proc.wait(), bytes(stages)
            except KeyboardInterrupt:  # let the child handle it and report
                continue


def _report(stage: bytes) -> None:
    """Tell the supervisor how far this rank got (``supervise``): ``STARTED``, then ``SHARED`` (the last)."""
    fd = os.environ.get(CHILD_ENV, "")
    if fd.isdigit():
        os.write(int(fd), stage)
        if stage == SHARED:
            os.close(int(fd))
            os.environ[CHILD_ENV] = "reported"


def stand_in() -> NoReturn:
    """Start MPI for a rank whose agent was killed before its start-up finished, then end: the others can
    start, and they treat this rank as failed (rank 0 first tells them that no setup will come)."""
    from mpi4py import MPI

    from .transport import poll, send_object

    comm = MPI.COMM_WORLD
    if comm.Get_rank() == 0:
        notice = _NoSetup(_NO_SETUP)
        reqs = [send_object(comm, notice, r) for r in range(1, comm.Get_size())]
        poll(lambda: all(q.Test() for q in reqs))
    finish(128 + signal.SIGKILL)


def supervised() -> bool:
    """Is this process a supervised agent (started by ``supervise``)?"""
    return bool(os.environ.get(CHILD_ENV))


def finish(code: int = 0) -> NoReturn:
    """End a supervised agent without ``MPI_Finalize`` (which would wait for dead ranks forever)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
