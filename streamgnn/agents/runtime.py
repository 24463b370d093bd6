"""Where agents run: all in this process, or spread over the ranks of an MPI job (``mpiexec -n R``).

``LocalAgents`` and ``MPIAgents`` offer the same small surface, so tasks and experiments are written once:
``exchange(...)`` for the rounds (``LocalExchange`` / ``MPIExchange`` over the agents this process hosts),
``share`` to hand the setup (a trained model) from rank 0 to everyone, ``total`` to add up per-rank results
at rank 0, ``all_rows`` for the environment's physics (every rank simulates the world), and ``close``. Run
time has no coordinator: rounds only ever talk to neighbors' ranks.

Fault tolerance. Hydra (MPICH's ``mpiexec``) kills every rank when one dies by a signal, even with
``-disable-auto-cleanup`` (its proxy does so on ``WIFSIGNALED``; a process that *exits* is only reported, with
SIGUSR1 to the process group). So ``supervise`` runs each rank's agent as a child process that inherits the
rank's MPI connection: when the child is killed, the parent exits with ``128 + signal`` and the job goes on.
Hydra records that exit and tells every other rank (``liveness``), so no rank waits for a dead one: rounds
treat it as failed at once, and a rank that cannot go on without it (the setup or the report needs rank 0)
ends with one line naming it and exit status 1. Survivors must not call ``MPI_Finalize`` (it waits for every
rank), so a supervised child ends with ``finish()``.
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

from ..errors import RankEndedError
from ..filters.exchange import Exchange, LocalExchange
from ..filters.failures import FailureModel

T = TypeVar("T")
CHILD_ENV = "STREAMGNN_AGENT_CHILD"  # a supervised agent's end of a pipe to report its start-up on
STARTED = b"1"  # MPI start-up finished


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
        die_at_gather: bool = False,
    ):
        from mpi4py import MPI

        from .mpi_exchange import partition
        from .transport import Transport

        _report_started()
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.transport = Transport(self.comm, deadline_s, patience, die_at_round)
        self.rank, self.size = self.transport.rank, self.transport.size
        self.is_root = self.rank == 0
        self.num_agents = num_agents
        self.owner = partition(num_agents, self.size)
        self.nodes = np.flatnonzero(self.owner == self.rank)
        self._env_round = 0
        self.die_at_gather = die_at_gather  # fault injection: SIGKILL ourselves when the results are gathered

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
        """Rank 0 computes ``make()`` and sends it to every rank; the others wait without spinning, until it
        comes or rank 0 ended (then this rank ends: there is nothing to run)."""
        from .transport import poll, recv_object, send_object

        gone = self.transport.gone
        if self.is_root:
            value = make()
            reqs = {r: send_object(self.comm, value, r) for r in range(1, self.size)}
            # a rank that ended never takes its copy; a silent one is waited for no longer than for a round
            poll(lambda: all(gone(r) or q.Test() for r, q in reqs.items()), self.transport.deadline_s)
            for r, q in reqs.items():
                self.transport.track(q, r)
            return value
        value = recv_object(self.comm, 0, gone=gone)
        if value is None:
            self._root_ended("it shared the setup (the trained models): nothing to run")
        return value

    def gather(self, value: T) -> list[T | None] | None:
        """Every rank's ``value`` at rank 0, in rank order (None elsewhere); a rank that does not report
        within the transport's deadline, or that ended, gets None and is recorded as failed. Rank 0 answers
        each rank that reported, so that a rank whose results went nowhere (rank 0 ended) ends saying so."""
        from .transport import recv_object, send_object

        if self.die_at_gather:
            os.kill(os.getpid(), signal.SIGKILL)
        gone, deadline = self.transport.gone, self.transport.deadline_s
        if not self.is_root:
            self.transport.track(send_object(self.comm, value, 0), 0)
            if recv_object(self.comm, 0, gone=gone) is None:
                self._root_ended("it gathered the results: no report")
            return None
        out: list = [value]
        for r in range(1, self.size):
            got = None if gone(r) else recv_object(self.comm, r, deadline, gone)
            if got is None:
                self.transport.failed.add(r)
            else:
                self.transport.track(send_object(self.comm, True, r), r)
            out.append(got)
        return out

    def _root_ended(self, before: str) -> NoReturn:
        """End this rank because rank 0 ended ``before`` something this rank cannot go on without."""
        error = RankEndedError(f"rank {self.rank}: rank 0 ended before {before}")
        if supervised():
            print(f"streamgnn: error: {error}", file=sys.stderr, flush=True)
            finish(1)
        raise error

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


def supervise(argv: list[str]) -> int:
    """Run ``argv`` as this rank's child process (it inherits the MPI connection) and return its exit code,
    ``128 + signal`` when it was killed, so that hydra reports the death instead of killing the job.

    A child killed before its MPI start-up finished would leave the other ranks waiting in theirs forever
    (start-up is collective): a stand-in then starts MPI in its place and ends at once, so that the others
    start. Either way this process then exits, hydra records the rank as ended, and the others stop waiting
    for it (``liveness``)."""
    fds = tuple(int(os.environ[k]) for k in ("PMI_FD", "HYDI_CONTROL_FD") if os.environ.get(k, "").isdigit())
    # inherited by the child until it listens for it (``liveness``): hydra's notice must not kill it
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    rc, started = _run_child(argv, fds)
    if rc < 0 and not started:
        _run_child([sys.executable, "-c", "from streamgnn.agents.runtime import stand_in; stand_in()"], fds)
    return 128 - rc if rc < 0 else rc


def _run_child(argv: list[str], fds: tuple[int, ...]) -> tuple[int, bool]:
    """Run a supervised child to its end: its exit code and whether it reported its MPI start-up."""
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
                return proc.wait(), STARTED in stages
            except KeyboardInterrupt:  # let the child handle it and report
                continue


def _report_started() -> None:
    """Tell the supervisor that this rank's MPI start-up finished (``supervise``)."""
    fd = os.environ.get(CHILD_ENV, "")
    if fd.isdigit():
        os.write(int(fd), STARTED)
        os.close(int(fd))
        os.environ[CHILD_ENV] = "reported"


def stand_in() -> NoReturn:
    """Start MPI for a rank whose agent was killed before its start-up finished, then end: the others can
    start, and treat this rank as ended once hydra reports it."""
    import mpi4py.MPI  # noqa: F401  (importing it is the start-up)

    finish(128 + signal.SIGKILL)


def supervised() -> bool:
    """Is this process a supervised agent (started by ``supervise``)?"""
    return bool(os.environ.get(CHILD_ENV))


def finish(code: int = 0) -> NoReturn:
    """End a supervised agent without ``MPI_Finalize`` (which would wait for dead ranks forever)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
