"""TGN memory, sharded: each rank holds the rows of the vertices it owns; a step works on a gathered copy.

``OwnedMemory`` keeps, for this rank's vertices only, what ``NodeMemory`` keeps for all: the memory row, the
last-update time and the pending (not yet committed) messages, whose other endpoint is named by global id,
plus a version per row that changes whenever the row or its pending messages do. A step gathers the rows
it needs from their owners (``Collectives``), lays them out as a ``WorkingSet`` (dense ids, the other
endpoints' committed rows appended, a zero row last), and runs the model's own ``NodeMemory`` over it by
lending it that state for the duration (``NodeMemory`` holds its state in buffers by design). The arithmetic
is then the single-process arithmetic on the same rows, and gradients reach the GRU and message function as
there.

>>> import numpy as np, torch
>>> owned = OwnedMemory(memory_dim=4, edge_dim=0)
>>> owned.add_rows(np.array([5, 9]))
>>> owned.append_messages(np.array([5]), np.array([9]), np.array([1.0]), None, np.array([True]))
>>> rows = owned.export(np.array([9, 5]))
>>> rows.memory.shape, rows.msg_owner.tolist(), rows.msg_other.tolist()
((2, 4), [1], [9])
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import ConfigError
from ..growth import grow
from ..nn.memory import NodeMemory

_ROWS = ("gid", "memory", "last_update", "version", "replicas", "synced")
_MESSAGES = ("msg_slot", "msg_other", "msg_t", "msg_feat", "msg_from_src")


@dataclass
class Rows:
    """Rows of some vertices (``gids``), as an owner exports them: committed memory and last update, version,
    and their pending messages (``msg_owner`` indexes ``gids``; ``msg_other`` is a global id)."""

    memory: np.ndarray  # float32 [n, d]
    last_update: np.ndarray  # float64 [n]
    version: np.ndarray  # int64 [n]
    msg_owner: np.ndarray  # int64 [m]
    msg_other: np.ndarray  # int64 [m]
    msg_t: np.ndarray  # float64 [m]
    msg_feat: np.ndarray  # float32 [m, d_e]
    msg_from_src: np.ndarray  # bool [m]

    def arrays(self) -> tuple[np.ndarray, ...]:
        return (self.memory, self.last_update, self.version, self.msg_owner, self.msg_other, self.msg_t,
                self.msg_feat, self.msg_from_src)  # fmt: skip


class OwnedMemory:
    """Memory rows, versions and pending messages of the vertices this rank owns, keyed by global id."""

    def __init__(self, memory_dim: int, edge_dim: int) -> None:
        self.memory_dim, self.edge_dim = memory_dim, edge_dim
        self.slot = np.zeros(0, np.int32)  # per global id: its row here, -1 if not owned (or not yet)
        self.gid = np.zeros(0, np.int64)  # per row: its global id
        self.size = 0
        self.memory = np.zeros((0, memory_dim), np.float32)
        self.last_update = np.zeros(0, np.float64)
        self.version = np.zeros(0, np.int64)
        self.replicas = np.zeros(0, np.int64)  # per row: bit s set when rank s holds the vertex as halo
        self.synced = np.zeros(0, np.int64)  # per row: the version last sent to the halo holders
        self.msg_slot = np.zeros(0, np.int64)
        self.msg_other = np.zeros(0, np.int64)
        self.msg_t = np.zeros(0, np.float64)
        self.msg_feat = np.zeros((0, edge_dim), np.float32)
        self.msg_from_src = np.zeros(0, bool)

    def add_rows(self, gids: np.ndarray) -> None:
        """Blank rows for newly owned global ids (ids already held are left alone)."""
        gids = np.asarray(gids, np.int64)
        if len(gids) and gids.max() >= len(self.slot):
            self.slot = grow(self.slot, int(gids.max()) + 1, -1)
        new = np.unique(gids[self.slot[gids] < 0]) if len(gids) else gids
        if not len(new):
            return
        need = self.size + len(new)
        if need > len(self.gid):
            self.gid, self.memory, self.last_update, self.version, self.replicas, self.synced = (
                grow(a, need)
                for a in (self.gid, self.memory, self.last_update, self.version, self.replicas, self.synced)
            )
        self.slot[new] = np.arange(self.size, need, dtype=np.int32)
        self.gid[self.size : need] = new
        self.size = need

    def slots(self, gids: np.ndarray) -> np.ndarray:
        gids = np.asarray(gids, np.int64)
        inside = (gids >= 0) & (gids < len(self.slot))
        out = np.full(len(gids), -1, np.int64)
        out[inside] = self.slot[gids[inside]]
        if (out < 0).any():
            raise ConfigError(f"global ids {gids[out < 0][:5].tolist()} are not owned by this rank")
        return out

    def export(self, gids: np.ndarray, pending: bool = True) -> Rows:
        """Committed rows of owned ``gids`` and (``pending``) their pending messages, in storage order."""
        s = self.slots(gids)
        msg = np.zeros(0, np.int64)
        owner = np.zeros(0, np.int64)
        if pending and len(s) and len(self.msg_slot):
            pos = np.full(self.size, -1, np.int64)
            pos[s] = np.arange(len(s))
            at = pos[self.msg_slot]
            msg = np.flatnonzero(at >= 0)
            owner = at[msg]
        return Rows(self.memory[s], self.last_update[s], self.version[s], owner, self.msg_other[msg],
                    self.msg_t[msg], self.msg_feat[msg], self.msg_from_src[msg])  # fmt: skip

    def commit(self, gids: np.ndarray, memory: np.ndarray, last_update: np.ndarray) -> None:
        """Write updated rows of owned ``gids`` and drop their pending messages (they are now in the rows)."""
        s = self.slots(gids)
        self.memory[s], self.last_update[s] = memory, last_update
        self.version[s] += 1
        drop = np.isin(self.msg_slot, s)
        self._keep_messages(~drop)

    def append_messages(self, gids, others, t, feat, from_src) -> None:
        """Queue messages for owned ``gids`` (in arrival order), from events with ``others``."""
        s = self.slots(gids)
        n = len(s)
        feat = np.zeros((n, self.edge_dim), np.float32) if feat is None else np.asarray(feat, np.float32)
        self.msg_slot = np.concatenate([self.msg_slot, s])
        self.msg_other = np.concatenate([self.msg_other, np.asarray(others, np.int64)])
        self.msg_t = np.concatenate([self.msg_t, np.asarray(t, np.float64)])
        self.msg_feat = np.concatenate([self.msg_feat, feat.reshape(n, self.edge_dim)])
        self.msg_from_src = np.concatenate([self.msg_from_src, np.asarray(from_src, bool)])
        np.add.at(self.version, s, 1)

    def mark_replicas(self, gids: np.ndarray, ranks: np.ndarray) -> None:
        """Owned ``gids`` now have an edge to a vertex of rank ``ranks``: that rank holds them as halo."""
        slots, bits = self.slots(gids), np.left_shift(1, np.asarray(ranks, np.int64))
        new = (self.replicas[slots] & bits) == 0
        np.bitwise_or.at(self.replicas, slots, bits)
        self.synced[slots[new]] = -1  # a new holder gets the row at the next sync, changed or not

    def changed_halo(self, rank: int) -> np.ndarray:
        """Rows held as halo by ``rank`` whose version moved since the last ``mark_synced``."""
        n = self.size
        held = ((self.replicas[:n] >> rank) & 1).astype(bool)
        return np.flatnonzero(held & (self.version[:n] != self.synced[:n]))

    def mark_synced(self) -> None:
        self.synced[: self.size] = self.version[: self.size]

    def _keep_messages(self, keep: np.ndarray) -> None:
        for name in _MESSAGES:
            setattr(self, name, getattr(self, name)[keep])

    def nbytes(self) -> int:
        """Bytes held (allocated rows included)."""
        rows = (self.slot, self.gid, self.memory, self.last_update, self.version, self.replicas, self.synced)
        return sum(a.nbytes for a in rows) + sum(getattr(self, name).nbytes for name in _MESSAGES)

    def state(self) -> dict[str, np.ndarray]:
        n = self.size
        rows = {name: getattr(self, name)[:n] for name in _ROWS}
        return rows | {name: getattr(self, name) for name in _MESSAGES}

    def load_state(self, arrays: dict[str, np.ndarray]) -> None:
        """``state()``'s rows back, in place: the embedder holds this object (``compute.Embedder``)."""
        self.__init__(self.memory_dim, self.edge_dim)
        self.add_rows(arrays["gid"])
        n = self.size
        self.memory[:n], self.last_update[:n] = arrays["memory"], arrays["last_update"]
        for name in ("version", "replicas", "synced"):
            getattr(self, name)[:n] = arrays[name]
        for name in _MESSAGES:
            setattr(self, name, arrays[name].copy())


class HaloCache:
    """Communication-free mode: copies of other ranks' committed memory rows, as their owners last pushed
    them (at most ``staleness`` batches old); a vertex never pushed reads a zero row."""

    def __init__(self, memory_dim: int) -> None:
        self.slot = np.zeros(0, np.int32)  # per global id: its row here, -1 if none
        self.memory = np.zeros((0, memory_dim), np.float32)
        self.last_update = np.zeros(0, np.float64)
        self.size = 0

    def update(self, gids: np.ndarray, memory: np.ndarray, last_update: np.ndarray) -> None:
        gids = np.asarray(gids, np.int64)
        if not len(gids):
            return
        if gids.max() >= len(self.slot):
            self.slot = grow(self.slot, int(gids.max()) + 1, -1)
        new = gids[self.slot[gids] < 0]
        if len(new):
            need = self.size + len(new)
            if need > len(self.last_update):
                self.memory, self.last_update = grow(self.memory, need), grow(self.last_update, need)
            self.slot[new] = np.arange(self.size, need, dtype=np.int32)
            self.size = need
        s = self.slot[gids]
        self.memory[s], self.last_update[s] = memory, last_update

    def rows(self, gids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        gids = np.asarray(gids, np.int64)
        s = np.full(len(gids), -1, np.int64)
        inside = gids < len(self.slot)
        s[inside] = self.slot[gids[inside]]
        have = s >= 0
        memory = np.zeros((len(gids), self.memory.shape[1]), np.float32)
        last = np.zeros(len(gids))
        memory[have], last[have] = self.memory[s[have]], self.last_update[s[have]]
        return memory, last

    def nbytes(self) -> int:
        return self.slot.nbytes + self.memory.nbytes + self.last_update.nbytes

    def state(self) -> dict[str, np.ndarray]:
        gid = np.flatnonzero(self.slot >= 0)
        s = self.slot[gid]
        return {"gid": gid, "memory": self.memory[s], "last_update": self.last_update[s]}

    def load_state(self, arrays: dict[str, np.ndarray]) -> None:
        """``state()``'s rows back, in place: the embedder holds this object (``compute.Embedder``)."""
        self.__init__(self.memory.shape[1])
        self.update(arrays["gid"], arrays["memory"], arrays["last_update"])


@dataclass
class WorkingSet:
    """A step's vertices in dense ids: ``gids[i]`` is working id ``i``; rows after ``len(gids)`` hold the
    other endpoints of pending messages (committed rows only); the last row is zero (unknown vertices and
    padding read it)."""

    gids: np.ndarray
    state: dict[str, torch.Tensor]

    @property
    def blank(self) -> int:
        return self.state["memory"].size(0) - 1

    def ids(self, gids: np.ndarray) -> np.ndarray:
        """Working ids of global ids (``gids`` must be in the set; -1 maps to the zero row)."""
        gids = np.asarray(gids, np.int64)
        out = np.searchsorted(self.gids, gids)
        return np.where(gids < 0, self.blank, out)


def working_set(gids: np.ndarray, rows: Rows, others: np.ndarray, other_rows: Rows) -> WorkingSet:
    """Lay out sorted unique ``gids`` with their ``rows`` and the committed ``other_rows`` of ``others``
    (the pending messages' other endpoints not among ``gids``), then one zero row."""
    n, k = len(gids), len(others)
    memory = np.concatenate([rows.memory, other_rows.memory, np.zeros((1, rows.memory.shape[1]), np.float32)])
    last = np.concatenate([rows.last_update, other_rows.last_update, np.zeros(1)])
    every = np.concatenate([gids, others])
    order = np.argsort(every, kind="stable")
    other_ids = (
        order[np.searchsorted(every[order], rows.msg_other)] if len(rows.msg_other) else rows.msg_owner
    )
    assert n + k + 1 == len(memory)
    state = {
        "memory": torch.from_numpy(memory),
        "last_update": torch.from_numpy(last),
        "msg_node": torch.from_numpy(rows.msg_owner.astype(np.int64)),
        "msg_other": torch.from_numpy(np.asarray(other_ids, np.int64)),
        "msg_t": torch.from_numpy(rows.msg_t),
        "msg_feat": torch.from_numpy(rows.msg_feat),
        "msg_from_src": torch.from_numpy(rows.msg_from_src),
    }
    return WorkingSet(gids, state)


@contextmanager
def lend_state(memory: NodeMemory, state: dict[str, torch.Tensor]):
    """Run ``memory`` (its GRU, message and time functions) over ``state`` instead of its own buffers; the
    state's tensors are updated in place by ``flush`` and are read back by the caller."""
    buffers = memory._buffers  # registered buffers, set directly: Module.__setattr__ costs ~50 us per call
    device = buffers["memory"].device
    saved = {name: buffers[name] for name in state}
    buffers.update({name: value.to(device) for name, value in state.items()})
    try:
        yield memory
    finally:
        state.update({name: buffers[name] for name in state})
        buffers.update(saved)
