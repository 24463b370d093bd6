"""The contract between graph layers and communication: one ``receive`` call is one round of messages.

A graph filter never indexes a graph itself. For every shift it hands the exchange its rows' current values
and gets back what each row's in-neighbors delivered this round (``Received``). ``LocalExchange`` computes
every node in one process (training and the centralized simulation); ``streamgnn.agents.MPIExchange``
computes the rows of the agents on one MPI rank and moves the values by point-to-point messages. Both number
their rounds the same way and ask the same seeded ``FailureModel`` which links deliver, so under the same
model they deliver the same messages, and both sum in the same order (``sum_slots``), forward and backward:
a decentralized run equals the centralized one bit for bit.

Between steps (a time step of a controller, a repeated inference) an exchange can keep each row's last
delivered value per neighbor and its age in steps (``memory=True``), for aggregations that reuse stale
messages. Memory follows neighbors by id, so it survives graphs that change between steps.

>>> import numpy as np, torch
>>> from streamgnn.nn.shift import ShiftOperator
>>> S = ShiftOperator.from_adjacency(np.array([[0, 1], [1, 0]]), normalize="none")
>>> ex = LocalExchange()
>>> ex.begin_step(S)
>>> got = ex.receive(torch.tensor([[[1.0], [2.0]]]))  # one lane, two nodes, one feature
>>> got.values[0, :, 0, 0].tolist(), ex.round
([2.0, 1.0], 1)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError
from .failures import FailureModel, NoFailures
from .shift import ShiftOperator

NEVER = 1 << 30  # the age of a slot that never delivered


def sum_slots(parts: Tensor) -> Tensor:
    """``[..., S, F] -> [..., F]`` summed slot by slot in order: the same bits for a row wherever it runs
    (a library reduction may reassociate differently for different shapes)."""
    out = parts[..., 0, :]
    for s in range(1, parts.shape[-2]):
        out = out + parts[..., s, :]
    return out


@dataclass
class Received:
    """What the computed rows got in one round. ``values [B, n, D, F]`` (zeros where nothing arrived),
    ``fresh [B|1, n, D]`` delivered now, ``memory``/``age`` the last delivered value per slot and its age in
    steps (None without memory), and the rows' slice of the shift operator."""

    values: Tensor
    fresh: Tensor
    weights: Tensor
    self_weights: Tensor
    valid: Tensor
    memory: Tensor | None = None
    age: Tensor | None = None


def lane_take(table: Tensor, lanes: int) -> Tensor:
    """Broadcast a ``[1, ...]`` per-graph table to ``lanes`` lanes (per-lane tables pass through)."""
    return table.expand(lanes, *table.shape[1:]) if table.shape[0] == 1 else table


def gather_lanes(values: Tensor, index: Tensor) -> Tensor:
    """``values [B, N, F]`` at ``index [1|B, n, S]`` -> ``[B, n, S, F]``."""
    if index.shape[0] == 1:
        return values[:, index[0]]
    return values[torch.arange(values.shape[0]).view(-1, 1, 1), index]


class Exchange:
    """Base: round numbering, failure masks and the per-slot memory; subclasses move the values."""

    def __init__(
        self,
        rows: np.ndarray,
        failures: FailureModel | None = None,
        per_lane: bool = False,
        memory: bool = False,
    ):
        self.rows = np.asarray(rows, np.int64)
        self.failures = failures if failures is not None else NoFailures()
        self.per_lane = per_lane
        self.memory = memory
        self.round = 0
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

    def reset(self) -> None:
        """Forget memory (rounds keep counting, so failures stay fresh)."""
        self._mem.clear()
        self.failures.reset()

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
        got = torch.where(fresh.unsqueeze(-1), got, torch.zeros((), dtype=got.dtype))
        rec = Received(got, fresh, shift.weights[:, rows], shift.self_weights[:, rows], shift.valid[:, rows])
        if self.memory:
            self._remember(rec, shift.neighbors[:, self.rows])
        self._slot += 1
        return rec

    def _deliver(self, values: Tensor, keep: Tensor) -> tuple[Tensor, Tensor]:
        """``(values [B, n, D, F], delivered [B|1, n, D])`` for the computed rows; ``keep`` is the failure
        model's mask over the whole graph."""
        raise NotImplementedError

    def _remember(self, rec: Received, ids: np.ndarray) -> None:
        lanes, n, d = rec.values.shape[0], rec.values.shape[1], rec.values.shape[2]
        prev = self._mem.get(self._slot)
        if prev is None or prev[1].shape[0] != lanes:
            mem = torch.zeros_like(rec.values)
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
            torch.where(fresh.unsqueeze(-1), rec.values.detach(), mem),
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


class _Gather(torch.autograd.Function):
    """Neighbor values, with a backward that sums each sender's gradients over its receivers in ascending
    order (``ShiftOperator.reverse``), as an MPI run does with the gradients it gets back."""

    @staticmethod
    def forward(ctx, values, index, rev_node, rev_slot):
        ctx.save_for_backward(rev_node, rev_slot)
        return gather_lanes(values, index)

    @staticmethod
    def backward(ctx, grad):
        rev_node, rev_slot = ctx.saved_tensors
        return reverse_sum(grad, rev_node, rev_slot), None, None, None


def reverse_sum(grad: Tensor, rev_node: Tensor, rev_slot: Tensor) -> Tensor:
    """``grad [B, N, D, F]`` per receiving slot -> ``[B, N, F]`` per sender, summed in receiver order."""
    lanes = grad.shape[0]
    if rev_node.shape[-1] == 0:
        return grad.new_zeros(lanes, grad.shape[1], grad.shape[-1])
    node, slot = lane_take(rev_node, lanes), lane_take(rev_slot, lanes)
    lane = torch.arange(lanes).view(-1, 1, 1)
    parts = grad[lane, node.clamp(min=0), slot.clamp(min=0)]
    parts = torch.where((node >= 0).unsqueeze(-1), parts, torch.zeros((), dtype=grad.dtype))
    return sum_slots(parts)


class LocalExchange(Exchange):
    """Every node in one process: the centralized computation, the simulation under failures, training."""

    def __init__(self, failures: FailureModel | None = None, per_lane: bool = False, memory: bool = False):
        super().__init__(np.zeros(0, np.int64), failures, per_lane, memory)

    def begin_step(self, shift: ShiftOperator) -> None:
        self.rows = np.arange(shift.num_nodes)
        super().begin_step(shift)

    def _deliver(self, values, keep):
        shift = self.shift
        if values.shape[1] != shift.num_nodes:
            raise ConfigError(f"values for {values.shape[1]} nodes on a graph of {shift.num_nodes}")
        node, slot = shift.reverse
        got = _Gather.apply(values, shift.gather_index, torch.from_numpy(node), torch.from_numpy(slot))
        return got, keep
