"""Data-parallel training over ``torch.distributed`` (gloo on CPU, NCCL on GPU), launched by ``torchrun``.

Every rank reads the whole global batch, keeps a full replica of the store, memory and negative history and
updates them identically; only the scoring and the loss are split, each rank taking one contiguous slice of
the batch. Gradients are summed over ranks and divided by the world size, as DDP does, so a rank's loss is
scaled by ``world_size / global count``: the averaged gradient is then exactly the single-rank full-batch
gradient, and a W-rank run follows the same trajectory as one rank with the same global batch.

Every ``torch.distributed`` collective of the package goes through ``collective``, which counts it: so
``entered()`` is what this process (a rank) entered, whichever part of a run called it (a sharded
exchange, a reduction here, a barrier, a broadcast of the source), and the benchmarks report that count.

A group this module joined is released when the process exits normally (``_release_group``): left to the
interpreter's teardown, gloo's worker threads abort a rank that finished its work now and then.
"""

from __future__ import annotations

import atexit
import importlib
import math
import os
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from .. import rankfail
from ..errors import ConfigError, RankEndedError

JOIN_TIMEOUT_ENV = "STREAMGNN_JOIN_TIMEOUT_S"
DEFAULT_JOIN_TIMEOUT_S = 300.0  # gloo's own default is 30 minutes of silence for a peer that never comes
_ENTERED: Counter[str] = Counter()  # this process's collectives by operation (``collective`` counts them)


def collective(op: str, *args, **kwargs):
    """Enter the ``torch.distributed`` collective named ``op`` (``"all_reduce"``, ``"barrier"``, ...) with
    its arguments, and count it: the one door the package's collectives go through."""
    _ENTERED[op] += 1
    return getattr(dist, op)(*args, **kwargs)


def entered() -> Counter[str]:
    """The collectives this process has entered so far, by operation (a copy; take differences to count a
    stretch of a run).

    >>> before = entered()
    >>> DistContext().all_sum([2.0], torch.device("cpu"))  # a lone process sums without a collective
    [2.0]
    >>> entered() - before
    Counter()
    """
    return Counter(_ENTERED)


@dataclass(frozen=True)
class DistContext:
    """This process's place in the job; the default is a single process."""

    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1

    def bounds(self, n: int) -> tuple[int, int]:
        """This rank's contiguous slice ``[lo, hi)`` of ``n`` rows (sizes differ by at most one)."""
        base, extra = divmod(n, self.world_size)
        lo = self.rank * base + min(self.rank, extra)
        return lo, lo + base + (self.rank < extra)

    def scorers(self, n: int) -> np.ndarray:
        """The rank of each of ``n`` rows: rank ``r`` takes its ``bounds(n)`` slice (``StepInput.scorer``)."""
        return np.repeat(np.arange(self.world_size), [self._size(r, n) for r in range(self.world_size)])

    def all_sum(self, values: list[float], device: torch.device) -> list[float]:
        """Sum of each value over ranks (float64)."""
        if not self.active:
            return list(values)
        buf = torch.tensor(values, dtype=torch.float64, device=device)
        collective("all_reduce", buf)
        return buf.tolist()

    def gather_rows(self, rows: np.ndarray, n: int, device: torch.device) -> np.ndarray:
        """All ranks' slices in rank order; ``rows`` is this rank's ``bounds(n)`` part (float64)."""
        if not self.active:
            return rows
        sizes = [self._size(r, n) for r in range(self.world_size)]
        width = max(sizes)
        padded = torch.zeros((width, *rows.shape[1:]), dtype=torch.float64, device=device)
        padded[: len(rows)] = torch.from_numpy(np.ascontiguousarray(rows, np.float64)).to(device)
        parts = [torch.empty_like(padded) for _ in range(self.world_size)]
        collective("all_gather", parts, padded)
        return np.concatenate([p[:s].cpu().numpy() for p, s in zip(parts, sizes, strict=True)])

    def _size(self, rank: int, n: int) -> int:
        lo, hi = DistContext(rank, self.world_size).bounds(n)
        return hi - lo

    def average_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """Mean gradient over ranks; a parameter no rank produced a gradient for keeps ``grad=None``.

        The "used somewhere" flag travels with the gradients, so Adam skips exactly the parameters a
        single-rank run would skip (a zero gradient would still advance its step count).
        """
        if not self.active or not params:
            return
        device = params[0].device
        flat = torch.cat(
            [p.grad.reshape(-1) if p.grad is not None else p.new_zeros(p.numel()) for p in params]
            + [torch.tensor([float(p.grad is not None) for p in params], device=device)]
        )
        collective("all_reduce", flat)
        used = flat[-len(params) :]
        offset = 0
        for p, u in zip(params, used.tolist(), strict=True):
            n = p.numel()
            p.grad = flat[offset : offset + n].view_as(p) / self.world_size if u > 0 else None
            offset += n

    def broadcast_module(self, module: torch.nn.Module) -> None:
        """Make every rank start from rank 0's parameters and buffers."""
        if not self.active:
            return
        for tensor in list(module.parameters()) + list(module.buffers()):
            collective("broadcast", tensor.data, 0)


def init_distributed(backend: str | None = None) -> DistContext:
    """Join the ``torchrun`` job named by the environment (``WORLD_SIZE`` > 1), or run alone.

    ``backend`` defaults to NCCL when CUDA is available, else gloo. A rank that joins a group ends the whole
    job when an exception escapes it (``rankfail``), so its peers do not wait for it in a collective.
    """
    if dist.is_available() and dist.is_initialized():
        rankfail.install()
        return DistContext(dist.get_rank(), dist.get_world_size())
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistContext()
    if not dist.is_available():
        raise ConfigError("WORLD_SIZE > 1 but this torch build has no torch.distributed")
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    store = _attempt_store(world) or _own_store(world)
    # imported while no group exists: this module's functions take ``group=group.WORLD`` as a default, which
    # is evaluated at import, and an import after the group exists (``torch.optim`` imports it through
    # ``torch._dynamo``) would hold the group for ever, so ``_release_group`` could not release it
    importlib.import_module("torch.distributed.nn.functional")
    dist.init_process_group(backend, store=store, rank=int(os.environ["RANK"]), world_size=world)
    atexit.register(_release_group)
    rankfail.install()
    return DistContext(dist.get_rank(), dist.get_world_size())


def _release_group() -> None:
    """Release the process group at a normal exit, while the interpreter still runs (an exit handler).

    Each gloo collective is a work object that one of the group's worker threads runs and then drops; when
    that drop is the last reference to a tensor Python created, the thread must take the GIL to free it.
    Once the interpreter is finalizing, a thread that asks for the GIL is ended by ``pthread_exit``, whose
    unwinding through the work's destructor (``noexcept``) calls ``std::terminate``: "terminate called
    without an active exception" and SIGABRT, in a rank that had finished its work. Only a collective's
    last moments are exposed (its caller already returned while the worker drops the work), so it happens
    now and then, more often on a loaded host. Destroying the group here joins its worker threads while the
    GIL can still be taken. The release is local (no message to the peers, so no wait for a rank that is
    slower or gone); a failed rank leaves by ``os._exit`` (``rankfail``), which runs no exit handler.
    """
    if dist.is_initialized():
        dist.destroy_process_group()


def _attempt_store(world: int):
    """Under ``torchrun``, the rendezvous store with a prefix per restart attempt, or None elsewhere.

    torchrun keeps one store across ``--max-restarts`` attempts, and the process group's keys (each rank's
    listening address) are not namespaced by attempt: a restarted rank could read the address of a peer
    killed in the previous attempt and fail with "connection refused" (pytorch/pytorch#167288). A prefix
    per attempt makes every attempt start from empty keys.
    """
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if attempt is None:
        return None
    rank = int(os.environ["RANK"])
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=not agent and rank == 0
    )
    return dist.PrefixStore(f"streamgnn/attempt-{attempt}/", store)


def _own_store(world: int):
    """Without ``torchrun``: the job's rendezvous store at ``MASTER_ADDR:MASTER_PORT`` (rank 0 hosts it),
    joined within ``STREAMGNN_JOIN_TIMEOUT_S`` seconds (300 by default). Rank 0 waits for every other rank to
    connect, the others for rank 0 to listen; a rank whose peer never started, or died before joining, ends
    with an error saying so instead of waiting out gloo's 30 minutes."""
    text = os.environ.get(JOIN_TIMEOUT_ENV, str(DEFAULT_JOIN_TIMEOUT_S))
    try:
        timeout = float(text)
    except ValueError:
        timeout = math.nan
    if not (0 < timeout < math.inf):
        raise ConfigError(f"{JOIN_TIMEOUT_ENV} must be a number of seconds > 0, got {text!r}")
    missing = [k for k in ("RANK", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise ConfigError(f"WORLD_SIZE={world} without {', '.join(missing)}: start the ranks with torchrun")
    rank, addr, port = int(os.environ["RANK"]), os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    try:
        return dist.TCPStore(
            addr, port, world, is_master=rank == 0, timeout=timedelta(seconds=timeout), multi_tenant=True
        )
    except RuntimeError as exc:  # torch.distributed.DistStoreError included
        waited = "the other ranks to join" if rank == 0 else f"rank 0 to listen at {addr}:{port}"
        raise RankEndedError(
            f"rank {rank} of {world} waited {timeout:g} s ({JOIN_TIMEOUT_ENV}) for {waited}: a rank did not "
            f"start, or ended before joining ({' '.join(str(exc).split())[:200]})"
        ) from None


def local_device(requested: str) -> torch.device:
    """``requested``, with "cuda" pinned to this process's GPU (``LOCAL_RANK``) in a multi-GPU job."""
    device = torch.device(requested)
    if device.type == "cuda" and device.index is None:
        if not torch.cuda.is_available():
            raise ConfigError("device 'cuda' requested but CUDA is not available")
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    return device
