"""Which ranks of this MPI job have ended, from the launcher's own record: a rank waiting on another notices
that it is gone, without a timeout.

Why this signal. Under hydra (MPICH's ``mpiexec``) with ``-disable-auto-cleanup``, a rank's process that
exits is reported by hydra's proxy on its host to the launcher, which records the rank in the job's
key-value space (``PMI_dead_processes``) and sends SIGUSR1 to every remaining rank, on every host the job
spans. A killed agent cannot keep that record from being written: its supervisor exits the moment it dies
(``runtime.supervise``; a rank's process killed outright makes hydra end the whole job instead). So a
waiting rank reacts to the signal and asks the launcher, over its own PMI connection (``PMI_FD``, the one
MPI start-up used), which ranks ended. A pid check sees only its own host, a pipe only its parent, and a
heartbeat is a timeout that a loaded host trips; the launcher's record is exact and reaches every host.
(MPICH's own ``MPIX_Comm_get_failed`` reads the same record, but needs ``MPIR_CVAR_ENABLE_FT``, with which
the wheel's ch4 device fails its start-up.)

The signal is only a hint to ask now; it is not what a wait relies on. A wait on a rank asks the launcher
again every ``RECHECK_S`` seconds even when no signal came, so a notice that never reached this process (a
library that installed its own SIGUSR1 handler after ours, a signal lost on a loaded host, a launcher that
signals only some of its processes) costs a second, not the job: without it a rank waiting with no deadline
(the setup, rank 0's answer to its report) waited forever for a rank that had ended.

Elsewhere (no ``PMI_FD``: another launcher, or one process) nothing is ever reported dead, and waits fall
back to the transport's deadline.
"""

from __future__ import annotations

import os
import signal
import time

KEY = "PMI_dead_processes"
RECHECK_S = 1.0  # a wait asks the launcher at least this often, signal or not


class Liveness:
    """``dead()``: the ranks the launcher saw end. Asked at once when SIGUSR1 said something changed (and at
    the start, for a death before the handler was installed), else at most every ``recheck_s`` seconds, so a
    wait costs one round trip a second and still ends when a notice was lost."""

    def __init__(self, recheck_s: float = RECHECK_S) -> None:
        fd = os.environ.get("PMI_FD", "")
        self._fd = int(fd) if fd.isdigit() else None
        self._kvs: str | None = None
        self._changed = self._fd is not None
        self._dead: frozenset[int] = frozenset()
        self._recheck_s = recheck_s
        self._asked = time.monotonic()
        if self._fd is not None:
            signal.signal(signal.SIGUSR1, self._notice)

    def _notice(self, signum, frame) -> None:
        self._changed = True

    def dead(self) -> frozenset[int]:
        if self._fd is None:
            return self._dead
        now = time.monotonic()
        if self._changed or now - self._asked >= self._recheck_s:
            self._changed = False  # a notice arriving while we ask sets it again
            self._dead = frozenset(parse_ranks(self._get(KEY)))
            self._asked = time.monotonic()
        return self._dead

    def _get(self, key: str) -> str:
        if self._kvs is None:
            self._kvs = _field(self._ask("cmd=get_my_kvsname"), "kvsname")
        reply = self._ask(f"cmd=get kvsname={self._kvs} key={key}")
        return _field(reply, "value") if " rc=0" in reply else ""  # rc != 0: nobody ended yet

    def _ask(self, line: str) -> str:
        """One PMI-1 request and its reply line. Only called between MPI calls of this single-threaded rank,
        so it never interleaves with the MPI library's own use of the connection."""
        assert self._fd is not None
        os.write(self._fd, f"{line}\n".encode())
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = os.read(self._fd, 4096)
            if not chunk:
                raise ConnectionError("the launcher closed this rank's PMI connection")
            reply += chunk
        return reply.decode()


def _field(reply: str, name: str) -> str:
    for part in reply.split():
        key, _, value = part.partition("=")
        if key == name:
            return value
    return ""


def parse_ranks(text: str) -> list[int]:
    """Hydra's rank list: ``"0"``, ``"1,3"`` or ranges ``"0-2,5"``; empty for none."""
    out: list[int] = []
    for part in text.split(","):
        if not part.strip():
            continue
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out
