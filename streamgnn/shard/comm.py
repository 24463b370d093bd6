"""The collectives of a sharded run, over ``torch.distributed`` (gloo on CPU, NCCL on GPU), with byte counts.

Every exchange is a collective every rank enters in the same order: no RPC layer, no sockets of our own. A
rank's arrays for each destination are packed into one byte buffer (a header of row counts, then each
array's bytes), so one exchange of several arrays costs two ``all_to_all_single`` calls: the sizes, then
the bytes. With one rank nothing is sent. ``sent`` counts the bytes this rank put on the wire per purpose
(its own part excluded), which is what the benchmarks report as exchanged bytes.

>>> ex = Collectives()  # a single process: parts come straight back
>>> [p[0].tolist() for p in ex.all_to_all([(np.arange(3),)], "demo")]
[[0, 1, 2]]
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import torch
import torch.distributed as dist

from ..errors import ConfigError
from ..train.distributed import collective


class Collectives:
    """Collectives among ``world_size`` ranks of the default process group (``DistContext``'s)."""

    def __init__(self, rank: int = 0, world_size: int = 1, device: torch.device | str = "cpu") -> None:
        if world_size > 1 and not (dist.is_available() and dist.is_initialized()):
            raise ConfigError("a sharded run with world_size > 1 needs torch.distributed initialized first")
        self.rank, self.world_size = rank, world_size
        # NCCL moves only device tensors; gloo only host ones
        self.device = torch.device(device) if dist.is_initialized() and dist.get_backend() == "nccl" else None
        self.sent: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()

    @property
    def active(self) -> bool:
        return self.world_size > 1

    def all_to_all(
        self, parts: list[tuple[np.ndarray, ...]], purpose: str, expect: list[list[int]] | None = None
    ) -> list[tuple[np.ndarray, ...]]:
        """``parts[d]`` goes to rank ``d``; returns what each rank sent here, in rank order. Every rank passes
        the same number of arrays with the same dtypes and trailing shapes (rows may differ). ``expect[s]``:
        the row counts of each array rank ``s`` sends, when the receiver knows them (a reply of a known
        size): the exchange of sizes is then skipped."""
        if len(parts) != self.world_size:
            raise ConfigError(f"all_to_all needs one part per rank ({self.world_size}), got {len(parts)}")
        self.calls[purpose] += 1
        if not self.active:
            return list(parts)
        templates = parts[self.rank]
        buffers = [_pack(p) for p in parts]
        sizes = torch.tensor([len(b) for b in buffers], dtype=torch.int64)
        if expect is None:
            got_sizes = self._a2a(sizes, [1] * self.world_size, [1] * self.world_size)
        else:
            got_sizes = torch.tensor([_packed_size(rows, templates) for rows in expect], dtype=torch.int64)
        send = torch.from_numpy(np.concatenate(buffers)) if buffers else torch.zeros(0, dtype=torch.uint8)
        recv = self._a2a(send, sizes.tolist(), got_sizes.tolist())
        self.sent[purpose] += int(sizes.sum()) - int(sizes[self.rank])
        out, offset = [], 0
        for n in got_sizes.tolist():
            out.append(_unpack(recv[offset : offset + n], templates))
            offset += n
        return out

    def all_gather(self, arrays: tuple[np.ndarray, ...], purpose: str) -> list[tuple[np.ndarray, ...]]:
        """Every rank's ``arrays`` (same dtypes and trailing shapes everywhere), in rank order."""
        return self.all_to_all([arrays] * self.world_size, purpose)

    def all_gather_bytes(self, payload: bytes, purpose: str) -> list[bytes]:
        """Every rank's ``payload`` in rank order."""
        got = self.all_gather((np.frombuffer(payload, np.uint8),), purpose)
        return [p[0].tobytes() for p in got]

    def _a2a(self, send: torch.Tensor, send_splits: list[int], recv_splits: list[int]) -> torch.Tensor:
        recv = torch.empty(sum(recv_splits), dtype=send.dtype)
        if self.device is not None:
            send, recv = send.to(self.device), recv.to(self.device)
        collective("all_to_all_single", recv, send, recv_splits, send_splits)  # counted there
        return recv.cpu()


def _pack(arrays: tuple[np.ndarray, ...]) -> np.ndarray:
    """Row counts (int64 each), then each array's bytes, padded to 8 bytes."""
    header = np.array([len(a) for a in arrays], np.int64).view(np.uint8)
    pieces = [header]
    for a in arrays:
        raw = np.ascontiguousarray(a).view(np.uint8).reshape(-1)
        pieces.append(raw)
        if len(raw) % 8:
            pieces.append(np.zeros(8 - len(raw) % 8, np.uint8))
    return np.concatenate(pieces)


def _packed_size(rows: list[int], templates: tuple[np.ndarray, ...]) -> int:
    size = 8 * len(templates)
    for n, like in zip(rows, templates, strict=True):
        raw = n * like.dtype.itemsize * int(np.prod(like.shape[1:], dtype=np.int64))
        size += raw + (-raw) % 8
    return size


def _unpack(buf: torch.Tensor, templates: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    raw = buf.numpy()
    k = len(templates)
    counts = raw[: 8 * k].view(np.int64)
    offset, out = 8 * k, []
    for n, like in zip(counts.tolist(), templates, strict=True):
        row = like.dtype.itemsize * int(np.prod(like.shape[1:], dtype=np.int64))
        size = n * row
        out.append(
            raw[offset : offset + size].view(like.dtype).reshape(n, *like.shape[1:])
        )  # views: a fresh buffer
        offset += size + (-size) % 8
    return tuple(out)
