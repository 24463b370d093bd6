"""A failure on one rank ends the whole job, with the error named, so ``torchrun`` or compose restarts it.

A rank of an MPI or ``torch.distributed`` job that raises must not leave its peers waiting. Left to the
interpreter it can: mpi4py runs ``MPI_Finalize`` at exit, which under MPICH waits for every rank, so the
failed rank hangs there and its peers in their next receive, for ever; and any exit handler, client close
or non-daemon thread can keep a failed ``torch.distributed`` rank alive with its connections open, its peers
blocked in a collective until the group's timeout (30 minutes). So a failed rank ends the job itself: it
prints the error and one line naming its rank, then calls ``MPI_Abort`` (``mpiexec`` ends every rank) or,
in a ``torch.distributed`` group, leaves at once (``os._exit``), which closes its connections: each peer's
next collective fails, and the peer ends the same way. A process that is not one rank of several is left
alone: its exceptions propagate as usual.

``install()`` covers exceptions nobody catches (``init_distributed`` calls it when it joins a group);
``ends_job_on_error()`` covers code that catches errors to report them, such as the CLI.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

from .errors import StreamGNNError

_previous_hook = sys.excepthook


def install() -> None:
    """Make an exception no one catches end the job when this process is one rank of several (idempotent)."""
    global _previous_hook
    if sys.excepthook is not _excepthook:
        _previous_hook, sys.excepthook = sys.excepthook, _excepthook


@contextmanager
def ends_job_on_error(enabled: bool = True) -> Iterator[None]:
    """Any exception (or non-zero ``SystemExit``) leaving the block ends the job when this process is one
    rank of several; otherwise, or when not ``enabled`` (a fault-tolerant run handles its own), it
    propagates unchanged."""
    try:
        yield
    except BaseException as exc:
        if not enabled or _job() is None or (isinstance(exc, SystemExit) and not exc.code):
            raise
        end_job(exc)


def end_job(exc: BaseException) -> NoReturn:
    """Print ``exc`` and which rank failed, then end every rank of this process's job (exit status 2 for a
    ``StreamGNNError``, the CLI's status for a user's mistake, else 1)."""
    job = _job()
    code = 2 if isinstance(exc, StreamGNNError) else 1
    if isinstance(exc, SystemExit):
        code = exc.code if isinstance(exc.code, int) else 1
        what = f"exit status {exc.code}"
    else:
        what = f"{type(exc).__name__}: {exc}"
    rank, size = _place(job)
    # the one line that names the failure first: MPI_Abort can end the launcher's forwarding of this rank's
    # output before a long traceback has passed through it
    print(f"streamgnn: rank {rank} of {size} failed ({what}): ending the job", file=sys.stderr, flush=True)
    if isinstance(exc, StreamGNNError):
        print(f"streamgnn: error: {exc}", file=sys.stderr)
    elif not isinstance(exc, SystemExit):
        traceback.print_exception(type(exc), exc, exc.__traceback__)
    sys.stdout.flush()
    sys.stderr.flush()
    if job == "mpi":
        time.sleep(0.5)  # grace for the launcher to forward what was printed (not a wait for an event)
        sys.modules["mpi4py.MPI"].COMM_WORLD.Abort(code)
    os._exit(code)


def _excepthook(kind, value, tb) -> None:
    if _job() is None or not isinstance(value, BaseException):
        _previous_hook(kind, value, tb)
        return
    end_job(value.with_traceback(tb))


def _job() -> str | None:
    """ "mpi" or "torch" when this process is one rank of a job of several, else None. Only modules already
    imported are asked: a process that never joined a job does not load MPI to find out."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.Get_size() > 1:
        return "mpi"
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return "torch"
    return None


def _place(job: str | None) -> tuple[int, int]:
    if job == "mpi":
        world = sys.modules["mpi4py.MPI"].COMM_WORLD
        return world.Get_rank(), world.Get_size()
    if job == "torch":
        dist = sys.modules["torch.distributed"]
        return dist.get_rank(), dist.get_world_size()
    return 0, 1
