"""``MPIExchange``: the rows of the agents one MPI rank hosts, fed by point-to-point bundles.

Per round, the rank sends each neighbor rank one bundle with the values of its agents that rank's agents
hear from over links the failure mask keeps (``[B, m, F]``, agents in id order), and receives one bundle per
rank its agents hear from. Backward (decentralized training) runs the same round in reverse: each receiving
slot's gradient goes back to the sender's rank, one entry per (sender, receiver) pair, and the sender sums
them in ascending receiver order, exactly as ``LocalExchange`` does in one process. Both sides derive every
bundle's layout from the shared graph and mask, so nothing but the values travels.

A bundle that misses the transport's deadline (or comes from a failed rank) leaves its slots undelivered for
that round: the aggregation then treats those neighbors as lost links.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError
from ..filters.exchange import Exchange, sum_slots
from ..filters.failures import FailureModel
from ..filters.shift import ShiftOperator
from .transport import Transport


def partition(num_nodes: int, ranks: int) -> np.ndarray:
    """Rank of each node: contiguous blocks of (nearly) equal size, every rank at least one agent."""
    if num_nodes < ranks:
        raise ConfigError(f"{num_nodes} agents cannot fill {ranks} MPI ranks (each needs one)")
    owner = np.empty(num_nodes, np.int64)
    for r, block in enumerate(np.array_split(np.arange(num_nodes), ranks)):
        owner[block] = r
    return owner


class _Plan:
    """Slot bookkeeping of one graph on one rank: what it receives (``in_*``: its rows' slots), what others
    receive from it (``out_*``), and its rows' out-neighbor entries (``rev_*``, for backward)."""

    def __init__(self, shift: ShiftOperator, owner: np.ndarray, rank: int):
        nbr = shift.neighbors
        self.lanes, self.n_total = shift.lanes, shift.num_nodes
        self.rows = np.flatnonzero(owner == rank)
        self.pos = np.full(shift.num_nodes, -1, np.int64)
        self.pos[self.rows] = np.arange(len(self.rows))
        self.in_l, self.in_r, self.in_d = np.nonzero(nbr[:, self.rows] >= 0)
        self.in_i = self.rows[self.in_r]
        self.in_j = nbr[self.in_l, self.in_i, self.in_d]
        self.in_src = owner[self.in_j]
        l, i, d = np.nonzero(nbr >= 0)
        j = nbr[l, i, d]
        out = (owner[j] == rank) & (owner[i] != rank)
        self.out_l, self.out_i, self.out_d, self.out_j = l[out], i[out], d[out], j[out]
        self.out_dst = owner[self.out_i]
        rev_node, rev_slot = shift.reverse
        self.rev_width = rev_node.shape[2]
        self.rev_l, self.rev_r, self.rev_e = np.nonzero(rev_node[:, self.rows] >= 0)
        self.rev_i = rev_node[self.rev_l, self.rows[self.rev_r], self.rev_e]
        self.rev_d = rev_slot[self.rev_l, self.rows[self.rev_r], self.rev_e]
        self.rev_src = owner[self.rev_i]

    def kept(self, keep: Tensor) -> np.ndarray:
        """``[L, N, D]``: a slot carries a message if its link is kept in any lane it serves."""
        k = keep.numpy()
        return k.any(axis=0, keepdims=True) if self.lanes == 1 else k


def _ix(lanes: np.ndarray, per_lane: bool, *idx: np.ndarray) -> tuple:
    """Advanced index ``[(lane,) *idx]``: per-lane graphs pick each entry's own lane, a shared graph all."""
    head = torch.from_numpy(lanes) if per_lane else slice(None)
    return (head, *(torch.from_numpy(i) for i in idx))


class MPIExchange(Exchange):
    """The exchange of the agents ``owner == rank``; all ranks must run the same rounds in the same order."""

    def __init__(
        self,
        transport: Transport,
        owner: np.ndarray,
        failures: FailureModel | None = None,
        per_lane: bool = False,
        memory: bool = False,
        exact: bool = True,
    ):
        self.transport = transport
        self.owner = np.asarray(owner, np.int64)
        super().__init__(np.flatnonzero(self.owner == transport.rank), failures, per_lane, memory, exact)
        self._plan: tuple[ShiftOperator, _Plan] | None = None

    def plan(self) -> _Plan:
        if self._plan is None or self._plan[0] is not self.shift:
            if len(self.owner) != self.shift.num_nodes:
                raise ConfigError(
                    f"owner lists {len(self.owner)} agents, the graph has {self.shift.num_nodes}"
                )
            self._plan = (self.shift, _Plan(self.shift, self.owner, self.transport.rank))
        return self._plan[1]

    def _deliver(self, values: Tensor, keep: Tensor) -> tuple[Tensor, Tensor]:
        if values.shape[1] != len(self.rows):
            raise ConfigError(
                f"values for {values.shape[1]} agents; rank {self.transport.rank} hosts {len(self.rows)}"
            )
        plan = self.plan()
        kk = plan.kept(keep)
        got = _Exchange.apply(values, self, plan, kk, self.round).unbind(-2)
        arrived = np.zeros((plan.lanes, len(self.rows), self.shift.max_degree), bool)
        ok = np.isin(plan.in_src, [self.transport.rank, *self._arrived])
        arrived[plan.in_l[ok], plan.in_r[ok], plan.in_d[ok]] = True
        return got, keep[:, torch.from_numpy(self.rows)] & torch.from_numpy(arrived)

    def forward_round(self, values: Tensor, plan: _Plan, kk: np.ndarray, round_: int) -> Tensor:
        """Send this rank's values where needed, receive the neighbors': ``[B, n, D, F]``."""
        rank, lanes, feats = self.transport.rank, values.shape[0], values.shape[2]
        per_lane = plan.lanes > 1
        out_kept = kk[plan.out_l, plan.out_i, plan.out_d]
        sends = {}
        for q in np.unique(plan.out_dst[out_kept]):
            js = np.unique(plan.out_j[out_kept & (plan.out_dst == q)])
            sends[int(q)] = values[:, torch.from_numpy(plan.pos[js])].numpy()
        in_kept = kk[plan.in_l, plan.in_i, plan.in_d]
        expected = {}
        for q in np.unique(plan.in_src[in_kept & (plan.in_src != rank)]):
            expected[int(q)] = np.unique(plan.in_j[in_kept & (plan.in_src == q)])
        itemsize = values.element_size()
        bundles = self.transport.exchange(
            round_, "forward", sends, {q: lanes * len(js) * feats * itemsize for q, js in expected.items()}
        )
        self._arrived = list(bundles)
        got = values.new_zeros(lanes, len(self.rows), self.shift.max_degree, feats)
        sel = in_kept & (plan.in_src == rank)
        l = plan.in_l[sel]
        got[_ix(l, per_lane, plan.in_r[sel], plan.in_d[sel])] = values[
            _ix(l, per_lane, plan.pos[plan.in_j[sel]])
        ]
        for q, raw in bundles.items():
            arr = torch.from_numpy(np.frombuffer(raw, values.numpy().dtype).reshape(lanes, -1, feats).copy())
            sel = in_kept & (plan.in_src == q)
            l, p = plan.in_l[sel], np.searchsorted(expected[q], plan.in_j[sel])
            got[_ix(l, per_lane, plan.in_r[sel], plan.in_d[sel])] = arr[_ix(l, per_lane, p)]
        return got

    def backward_round(self, grad: Tensor, plan: _Plan, kk: np.ndarray, round_: int) -> Tensor:
        """Gradients of received slots back to their senders; each of this rank's agents sums what it gets
        in ascending receiver order: ``[B, n, F]``."""
        rank, lanes, feats, n = self.transport.rank, grad.shape[0], grad.shape[3], self.shift.num_nodes
        per_lane = plan.lanes > 1
        in_kept = kk[plan.in_l, plan.in_i, plan.in_d]
        sends = {}
        for q in np.unique(plan.in_src[in_kept & (plan.in_src != rank)]):
            sel = in_kept & (plan.in_src == q)
            key = plan.in_j[sel] * n + plan.in_i[sel]
            keys = np.unique(key)
            payload = grad.new_zeros(lanes, len(keys), feats)
            l = plan.in_l[sel]
            payload[_ix(l, per_lane, np.searchsorted(keys, key))] = grad[
                _ix(l, per_lane, plan.in_r[sel], plan.in_d[sel])
            ]
            sends[int(q)] = payload.numpy()
        out_kept = kk[plan.out_l, plan.out_i, plan.out_d]
        expected = {}
        for s in np.unique(plan.out_dst[out_kept]):
            sel = out_kept & (plan.out_dst == s)
            expected[int(s)] = np.unique(plan.out_j[sel] * n + plan.out_i[sel])
        itemsize = grad.element_size()
        bundles = self.transport.exchange(
            round_, "backward", sends, {s: lanes * len(k) * feats * itemsize for s, k in expected.items()}
        )
        if plan.rev_width == 0:
            return grad.new_zeros(lanes, len(self.rows), feats)
        parts = grad.new_zeros(lanes, len(self.rows), plan.rev_width, feats)
        rev_kept = kk[plan.rev_l, plan.rev_i, plan.rev_d]
        sel = rev_kept & (plan.rev_src == rank)
        l = plan.rev_l[sel]
        parts[_ix(l, per_lane, plan.rev_r[sel], plan.rev_e[sel])] = grad[
            _ix(l, per_lane, plan.pos[plan.rev_i[sel]], plan.rev_d[sel])
        ]
        for s, raw in bundles.items():
            arr = torch.from_numpy(np.frombuffer(raw, grad.numpy().dtype).reshape(lanes, -1, feats).copy())
            sel = rev_kept & (plan.rev_src == s)
            l, p = (
                plan.rev_l[sel],
                np.searchsorted(expected[s], self.rows[plan.rev_r[sel]] * n + plan.rev_i[sel]),
            )
            parts[_ix(l, per_lane, plan.rev_r[sel], plan.rev_e[sel])] = arr[_ix(l, per_lane, p)]
        return sum_slots(parts)


class _Exchange(torch.autograd.Function):
    @staticmethod
    def forward(ctx, values, exchange, plan, kk, round_):
        ctx.exchange, ctx.plan, ctx.kk, ctx.round = exchange, plan, kk, round_
        return exchange.forward_round(values.detach(), plan, kk, round_)

    @staticmethod
    def backward(ctx, grad):
        return (
            ctx.exchange.backward_round(grad.contiguous(), ctx.plan, ctx.kk, ctx.round),
            None,
            None,
            None,
            None,
        )
