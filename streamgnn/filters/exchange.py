"""The contract between graph layers and communication: one ``receive`` call is one round of messages.

A graph filter never indexes a graph itself. For every shift it hands the exchange its rows' current values
and gets back what each row's in-neighbors delivered this round (``Received``). ``LocalExchange`` computes
every node in one process (training and the centralized simulation); ``streamgnn.agents.MPIExchange``
computes the rows of the agents on one MPI rank and moves the values by point-to-point messages. Both number
their rounds the same way and ask the same seeded ``FailureModel`` which links deliver, so under the same
model they deliver the same messages, and both sum in the same order (``sum_slots``):
a decentralized run computes the values the centralized one computes (the backward pass of training
sums gradients in another order here than over MPI: equal up to rounding).

Between steps (a time step of a controller, a repeated inference) an exchange can keep each row's last
delivered value per neighbor and its age in steps (``memory=True``), for aggregations that reuse stale
messages. Memory follows neighbors by id, so it survives graphs that change between steps.

>>> import numpy as np, torch
>>> from streamgnn.filters.shift import ShiftOperator
>>> S = ShiftOperator.from_adjacency(np.array([[0, 1], [1, 0]]), normalize="none")
>>> ex = LocalExchange()
>>> ex.begin_step(S)
>>> got = ex.receive(torch.tensor([[[1.0], [2.0]]]))  # one lane, two nodes, one feature
>>> got.values[0][0, :, 0].tolist(), ex.round
([2.0, 1.0], 1)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError
from .failures import FailureModel, NoFailures
from .shift import ShiftOperator

NEVER = 1 << 30  # the age of a slot that never delivered


def sum_slots(parts: Tensor | Sequence[Tensor]) -> Tensor:
    """``[..., S, F]`` (or ``S`` tensors ``[..., F]``) -> ``[..., F]`` summed slot by slot in order: the
    same bits for a row wherever it runs (a library reduction may reassociate for other shapes)."""
    slots = parts.unbind(-2) if isinstance(parts, Tensor) else parts  # unbind: one backward op for all slots
    out = slots[0]
    for part in slots[1:]:
        out = out + part
    return out


@dataclass
class Received:
    """What the computed rows got in one round: ``values``, one ``[B, n, F]`` tensor per neighbor slot (only
    where ``fresh`` do they hold a message; elsewhere anything finite), ``fresh [B|1, n, D]`` delivered now,
    ``memory [B, n, D, F]``/``age [B, n, D]`` the last delivered value per slot and its age in steps (None
    without memory), and the rows' slice of the shift operator."""

    values: tuple[Tensor, ...]
    fresh: Tensor
    weights: Tensor
    self_weights: Tensor
    valid: Tensor
    memory: Tensor | None = None
    age: Tensor | None = None


class Exchange:
    """Base: round numbering, failure masks and the per-slot memory; subclasses move the values."""

    def __init__(
        self,
        rows: np.ndarray,
        failures: FailureModel | None = None,
        per_lane: bool = False,
        memory: bool = False,
        exact: bool = True,
    ):
        self.rows = np.asarray(rows, np.int64)
        self.failures = failures if failures is not None else NoFailures()
        self.per_lane = per_lane
        self.memory = memory
        self.exact = exact
        self.round = 0
        self.message_bytes = 0  # values delivered to the rows here, counted per link and lane
        self.shift: ShiftOperator | None = None
        self._slot = 0
        self._mem: dict[int, tuple[np.ndarray, Tensor, Tensor]] = {}

    def begin_step(self, shift: ShiftOperator) -> None:
        """Start a step on ``shift`` (the graph of this time step); memory, if kept, ages by one step."""
        if self.rows.size and self.rows.max() >= shift.num_nodes:
            raise ConfigError(f"rows up to {self.rows.max()} on a graph of {shift.num_nodes} nodes")
        self.shift = shift
        self._slot = 0
        if not self.memory:
            self._mem.clear()

    def clear_memory(self) -> None:
        """Forget every remembered message (new lanes: other signals); rounds keep counting."""
        self._mem.clear()

    def receive(self, values: Tensor) -> Received:
        """One communication round: ``values [B, n, F]`` of the rows computed here -> what they received."""
        shift = self.shift
        if shift is None:
            raise ConfigError("call begin_step(shift) before receive()")
        lanes = values.shape[0]
        if shift.lanes not in (1, lanes):
            raise ConfigError(f"a graph with {shift.lanes} lanes cannot serve a batch of {lanes}")
        keep = self.failures.keep(shift, self.round, lanes if self.per_lane else None)
        got, delivered = self._deliver(values, keep)
        self.round += 1
        rows = torch.from_numpy(self.rows)
        fresh = delivered & shift.valid[:, rows]
        self.message_bytes += (
            int(fresh.sum()) * (lanes // fresh.shape[0]) * values.shape[2] * values.element_size()
        )
        rec = Received(got, fresh, shift.weights[:, rows], shift.self_weights[:, rows], shift.valid[:, rows])
        if self.memory:
            self._remember(rec, shift.neighbors[:, self.rows])
        self._slot += 1
        return rec

    def _deliver(self, values: Tensor, keep: Tensor) -> tuple[tuple[Tensor, ...], Tensor]:
        """``(one [B, n, F] tensor per slot, delivered [B|1, n, D])`` for the computed rows; ``keep`` is the
        failure model's mask over the whole graph."""
        raise NotImplementedError

    def _remember(self, rec: Received, ids: np.ndarray) -> None:
        values = torch.stack(rec.values, dim=-2).detach()
        lanes, n, d = values.shape[0], values.shape[1], values.shape[2]
        prev = self._mem.get(self._slot)
        if prev is None or prev[1].shape[0] != lanes:
            mem = torch.zeros_like(values)
            age = torch.full((lanes, n, d), NEVER, dtype=torch.long)
        else:
            prev_ids, mem, age = prev
            if prev_ids.shape != ids.shape or not np.array_equal(prev_ids, ids):
                mem, age = _align(prev_ids, mem, age, ids)
            age = torch.where(age >= NEVER, age, age + 1)
        rec.memory, rec.age = mem, age
        fresh = rec.fresh.expand(lanes, n, d)
        self._mem[self._slot] = (
            ids,
            torch.where(fresh.unsqueeze(-1), values, mem),
            torch.where(fresh, 0, age),
        )


def _align(prev_ids: np.ndarray, mem: Tensor, age: Tensor, ids: np.ndarray) -> tuple[Tensor, Tensor]:
    """Move memory from the previous step's neighbor slots to this step's, matching neighbors by id."""
    lanes, n, d_new = mem.shape[0], ids.shape[1], ids.shape[2]
    big = max(int(prev_ids.max(initial=0)), int(ids.max(initial=0))) + 2
    prev_ids = np.broadcast_to(prev_ids, (lanes, *prev_ids.shape[1:]))
    ids = np.broadcast_to(ids, (lanes, n, d_new))
    row = np.arange(lanes * n).reshape(lanes, n, 1)
    prev_key = np.where(prev_ids >= 0, row * big + prev_ids, -1).ravel()
    order = np.argsort(prev_key, kind="stable")
    key = row * big + ids
    pos = np.clip(np.searchsorted(prev_key[order], key), 0, len(order) - 1)
    src = order[pos]
    found = (prev_key[src] == key) & (ids >= 0)
    flat_mem = mem.reshape(-1, mem.shape[-1])
    flat_age = age.reshape(-1)
    src_t, found_t = torch.from_numpy(src), torch.from_numpy(found)
    new_mem = torch.where(found_t.unsqueeze(-1), flat_mem[src_t], torch.zeros((), dtype=mem.dtype))
    new_age = torch.where(found_t, flat_age[src_t], NEVER)
    return new_mem, new_age


class LocalExchange(Exchange):
    """Every node in one process: the centralized computation, the simulation under failures, training."""

    def __init__(
        self,
        failures: FailureModel | None = None,
        per_lane: bool = False,
        memory: bool = False,
        exact: bool = True,
    ):
        super().__init__(np.zeros(0, np.int64), failures, per_lane, memory, exact)

    def begin_step(self, shift: ShiftOperator) -> None:
        self.rows = np.arange(shift.num_nodes)
        super().begin_step(shift)

    def _deliver(self, values, keep):
        shift = self.shift
        if values.shape[1] != shift.num_nodes:
            raise ConfigError(f"values for {values.shape[1]} nodes on a graph of {shift.num_nodes}")
        index = shift.gather_index
        if index.shape[0] == 1:  # slot by slot: [B, N, F] each, small and cache-friendly
            return tuple(values[:, i] for i in index[0].unbind(-1)), keep
        lane = torch.arange(values.shape[0]).view(-1, 1)
        return tuple(values[lane, i] for i in index.unbind(-1)), keep
