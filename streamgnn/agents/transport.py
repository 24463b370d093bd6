"""Point-to-point message bundles between MPI ranks, with deadlines, loss accounting and failure detection.

Each round, a rank sends one bundle to every rank hosting a neighbor of its agents (``Isend``) and posts one
receive per rank it expects a bundle from (``Irecv``); both sides compute who sends what from the shared graph
and failure mask, so every buffer size is known in advance and no coordinator is asked anything.

Deadlines are for real faults. With ``deadline_s=None`` a rank waits until every expected bundle
arrived, so a run's outcome never depends on timing (the mode tests use). With a deadline, a bundle that
misses it is lost for that round (its receive stays posted, and when it arrives late it is dropped); a rank
that misses ``patience`` rounds in a row is declared failed: nobody waits for it or sends to it again, as for
an agent whose process was killed.

A rank that ends is noticed at once where the launcher reports it (``liveness``): nobody waits for it
any longer, whatever the deadline.

Waiting never spins: requests are tested between short sleeps, so on an oversubscribed host (4 ranks on 2
cores) a waiting rank yields its core to the rank it waits for. Blocking MPI calls busy-poll in MPICH, so the
collective-free helpers ``send_object``/``recv_object`` carry the few setup messages (a model, results).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

from ..errors import ConfigError
from .liveness import Liveness

KINDS = {"forward": 0, "backward": 1, "mix": 2, "env": 3, "done": 4, "object": 5}


def poll(test: Callable[[], bool], deadline_s: float | None = None) -> bool:
    """Call ``test`` until it returns True (-> True) or ``deadline_s`` passed (-> False), sleeping between
    tries (20 us growing to 1 ms) so waiting ranks give their core away."""
    start = time.monotonic()
    delay = 2e-5
    while not test():
        if deadline_s is not None and time.monotonic() - start > deadline_s:
            return False
        time.sleep(delay)
        delay = min(delay * 1.5, 1e-3)
    return True


def send_object(comm: MPI.Comm, obj, dest: int) -> MPI.Request:
    """Pickled ``obj`` to ``dest`` (setup and results only: agents' rounds use raw buffers)."""
    return comm.isend(obj, dest=dest, tag=KINDS["object"])


def recv_object(
    comm: MPI.Comm,
    source: int,
    deadline_s: float | None = None,
    gone: Callable[[int], bool] = lambda rank: False,
):
    """The next object ``source`` sent with ``send_object``; None if nothing came before the deadline or
    before ``source`` was ``gone`` (a message it sent before it ended is still taken)."""
    msg: list = []

    def arrived() -> bool:
        m = comm.improbe(source=source, tag=KINDS["object"])
        if m is not None:
            msg.append(m)
        return bool(msg)

    poll(lambda: arrived() or gone(source), deadline_s)
    return msg[0].recv() if msg or arrived() else None


class Transport:
    """Bundles between this rank and its neighbors' ranks; counts bytes, losses and failed ranks."""

    def __init__(
        self,
        comm: MPI.Comm | None = None,
        deadline_s: float | None = None,
        patience: int = 3,
        die_at_round: int | None = None,
    ):
        if deadline_s is not None and deadline_s <= 0:
            raise ConfigError(f"deadline_s must be positive or None, got {deadline_s}")
        if patience < 1:
            raise ConfigError(f"patience must be >= 1, got {patience}")
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.deadline_s, self.patience = deadline_s, patience
        self.die_at_round = die_at_round  # fault injection: SIGKILL ourselves at this forward round
        self.forward_rounds = 0
        self._tag_ub = int(self.comm.Get_attr(MPI.TAG_UB))
        self.failed: set[int] = set()
        self.liveness = Liveness()
        self.peers: set[int] = set()
        self.bytes_sent = 0
        self.bundles_lost = 0
        self._misses: dict[int, int] = {}
        self._sends: list[tuple[MPI.Request, np.ndarray, int]] = []
        self._late: list[tuple[MPI.Request, np.ndarray, int]] = []

    def tag(self, round_: int, kind: str) -> int:
        return (round_ * len(KINDS) + KINDS[kind]) % (self._tag_ub + 1)

    def exchange(
        self, round_: int, kind: str, sends: dict[int, np.ndarray], recv_nbytes: dict[int, int]
    ) -> dict[int, np.ndarray]:
        """Send ``sends[dest]`` (any dtype, sent as bytes) and receive ``recv_nbytes[src]`` bytes from each
        source; returns the raw bytes of every bundle that arrived in time (failed ranks are skipped)."""
        if kind == "forward":
            if self.die_at_round is not None and self.forward_rounds >= self.die_at_round:
                os.kill(os.getpid(), signal.SIGKILL)
            self.forward_rounds += 1
        tag = self.tag(round_, kind)
        recvs: dict[int, tuple[MPI.Request, np.ndarray]] = {}
        for src, nbytes in recv_nbytes.items():
            if src in self.failed or src == self.rank:
                continue
            buf = np.empty(nbytes, np.uint8)
            recvs[src] = (self.comm.Irecv([buf, MPI.BYTE], source=src, tag=tag), buf)
            self.peers.add(src)
        for dest, payload in sends.items():
            if dest in self.failed or dest == self.rank:
                continue
            data = np.ascontiguousarray(payload).reshape(-1).view(np.uint8)
            self._sends.append((self.comm.Isend([data, MPI.BYTE], dest=dest, tag=tag), data, dest))
            self.bytes_sent += data.nbytes
            self.peers.add(dest)
        pending = dict(recvs)

        def all_arrived() -> bool:
            for src in [s for s, (req, _) in pending.items() if req.Test()]:
                del pending[src]
            return all(self.gone(s) for s in pending)  # an ended rank's bundle will never come

        poll(all_arrived, self.deadline_s)
        out = {}
        for src, (req, buf) in recvs.items():
            if src in pending:
                self.bundles_lost += 1
                if src in self.failed:
                    req.Cancel()
                    continue
                self._late.append((req, buf, src))
                self._misses[src] = self._misses.get(src, 0) + 1
                if self._misses[src] >= self.patience:
                    self._declare_failed(src)
            else:
                self._misses[src] = 0
                out[src] = buf
        self._progress()
        return out

    def gone(self, rank: int) -> bool:
        """Has ``rank`` failed, or has the launcher seen it end?"""
        if rank not in self.failed and rank in self.liveness.dead():
            self._declare_failed(rank)
        return rank in self.failed

    def track(self, req: MPI.Request, dest: int) -> None:
        """Keep a send that may still be taken (its buffer lives in ``req``); ``close`` waits for it as for
        the bundles, up to the deadline unless ``dest`` failed."""
        if not req.Test():
            self._sends.append((req, None, dest))

    def _progress(self) -> None:
        self._sends = [s for s in self._sends if s[2] not in self.failed and not s[0].Test()]
        self._late = [r for r in self._late if not r[0].Test()]

    def _declare_failed(self, src: int) -> None:
        self.failed.add(src)
        for req, _, s in self._late:
            if s == src:
                req.Cancel()
        self._late = [r for r in self._late if r[2] != src]

    def close(self) -> None:
        """Tell every live peer we are done and wait for theirs: a peer that said done has received all it
        needed from us, so our pending sends can be abandoned and the process may exit."""
        live = sorted(self.peers - self.failed)
        token = np.zeros(1, np.uint8)
        got = self.exchange(0, "done", dict.fromkeys(live, token), dict.fromkeys(live, 1))
        for src in live:
            if src not in got:
                self.failed.add(src)
        poll(
            lambda: all(self.gone(dest) or req.Test() for req, _, dest in self._sends),
            self.deadline_s,
        )
        for req, _, _ in self._late:
            req.Cancel()
        self._late = []
