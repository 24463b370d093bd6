"""Per-node memory with TGN's delayed message passing, growing as unseen nodes arrive mid-stream.

A batch is predicted first, then its interactions are stored as *raw* pending messages (ids, time, edge
features: no memory snapshot, so the store stays small and checkpointable). They reach a node's memory the
next time the node is read: ``get`` applies them inside the reader's autograd graph (which is how the message
function and GRU receive gradients), and the next ``store_messages`` touching the node commits them. So a
batch never sees its own events, and every node holds pending messages from its latest batch only.

Applying a node's pending messages is the same computation every time until something it reads changes, and
a stream job that does not learn on a batch repeats it: the served rows' refresh applies a batch's messages
to embed its nodes, the next batch's commit applies them again. Reads without autograd keep what they
computed (``UpdateCache``), and later reads and commits take it, for as long as the node's inputs stay the
same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import ConfigError, EventValidationError, UnknownNodeError
from ..growth import grown_size
from .gather import gather_rows
from .time import TimeEncoder

MessageFunction = Literal["identity", "mlp"]
Aggregator = Literal["last", "mean"]


def last_messages(index: Tensor, t: Tensor, dim_size: int) -> Tensor:
    """Position of each node's most recent message (time ties: the one stored later), -1 where none."""
    t_max = t.new_full((dim_size,), float("-inf")).scatter_reduce(0, index, t, "amax")
    pos = torch.arange(len(index), device=index.device)
    candidate = torch.where(t == t_max.index_select(0, index), pos, -1)
    last = torch.full((dim_size,), -1, dtype=torch.long, device=index.device)
    return last.scatter_reduce(0, index, candidate, "amax")


def aggregate_last(msg: Tensor, index: Tensor, t: Tensor, dim_size: int) -> tuple[Tensor, Tensor]:
    """Most recent message per node (time ties: the one stored later); ``has`` marks nodes with a message."""
    last = last_messages(index, t, dim_size)
    has = last >= 0
    out = msg.new_zeros(dim_size, msg.size(1))
    out[has] = msg[last[has]]
    return out, has


def aggregate_mean(msg: Tensor, index: Tensor, t: Tensor, dim_size: int) -> tuple[Tensor, Tensor]:
    """Mean message per node; ``has`` marks nodes with a message."""
    count = torch.bincount(index, minlength=dim_size)
    total = msg.new_zeros(dim_size, msg.size(1)).index_add(0, index, msg)
    return total / count.clamp(min=1).unsqueeze(1).to(msg.dtype), count > 0


AGGREGATORS: dict[str, Callable[[Tensor, Tensor, Tensor, int], tuple[Tensor, Tensor]]] = {
    "last": aggregate_last,
    "mean": aggregate_mean,
}
MESSAGE_FUNCTIONS = ("identity", "mlp")
_MESSAGE_STATE = ("msg_node", "msg_other", "msg_t", "msg_feat", "msg_from_src")
_STATE = ("memory", "last_update", *_MESSAGE_STATE)
# Rows a message or GRU update without autograd is computed with at least, and one more than it has: a CPU
# GEMM of up to 15 rows rounds a row otherwise than a larger one does, and elementwise kernels (tanh, cos) run
# a tensor's last elements through scalar code, which rounds otherwise than the vector code. Padded, a row has
# the same bits whichever rows it is computed with, so a cached row equals its recomputation.
MIN_ROWS = 32


def padded(index: Tensor, rows: int) -> Tensor:
    """``index`` with its first entry repeated to at least ``rows`` entries and one more than it has (as it
    is for ``rows`` 0 or no entries): for rows that must not depend on how many are computed (MIN_ROWS)."""
    n = len(index)
    return torch.cat([index, index[:1].expand(max(rows - n, 1))]) if rows and n else index


class NodeMemory(nn.Module):
    """TGN memory: a state vector and last-update time per node, a pending-message store and a GRU updater.

    Rows are internal (dense) node ids; the tables grow by doubling when a larger id shows up, new rows zero.
    Times are float64 so that Δt stays exact for epoch-second timestamps. All state is registered as buffers,
    so ``state_dict``/``load_state_dict`` restore memory, last-update times and pending messages exactly.

    The message of node ``u`` for event ``(u, v, t, e)`` is ``[mem_u, mem_v, time_enc(t - last_u), e]``
    (``message="identity"``) or that passed through an MLP of width ``message_dim`` (``"mlp"``), with
    separate functions for the source and destination side as in the paper.
    """

    def __init__(
        self,
        memory_dim: int,
        edge_dim: int,
        time_encoder: TimeEncoder,
        *,
        message: MessageFunction = "identity",
        message_dim: int | None = None,
        aggregator: Aggregator = "last",
        capacity: int = 0,
    ) -> None:
        super().__init__()
        if message not in MESSAGE_FUNCTIONS:
            raise ConfigError(f"message function must be one of {MESSAGE_FUNCTIONS}, got {message!r}")
        if aggregator not in AGGREGATORS:
            raise ConfigError(f"aggregator must be one of {sorted(AGGREGATORS)}, got {aggregator!r}")
        self.memory_dim = memory_dim
        self.edge_dim = edge_dim
        self.time_enc = time_encoder
        self.aggregate = AGGREGATORS[aggregator]
        raw_dim = 2 * memory_dim + time_encoder.dim + edge_dim
        if message == "identity":
            self.message_dim = raw_dim
            self.msg_src: nn.Module | None = None  # the raw message is the message
            self.msg_dst: nn.Module | None = None
        else:
            self.message_dim = message_dim or memory_dim
            self.msg_src = _mlp(raw_dim, self.message_dim)
            self.msg_dst = _mlp(raw_dim, self.message_dim)
        self.gru = nn.GRUCell(self.message_dim, memory_dim)
        self.register_buffer("memory", torch.zeros(capacity, memory_dim))
        self.register_buffer("last_update", torch.zeros(capacity, dtype=torch.float64))
        # Pending messages, one row per (receiving node, event): flat so that every operation is a scatter.
        self.register_buffer("msg_node", torch.zeros(0, dtype=torch.long))
        self.register_buffer("msg_other", torch.zeros(0, dtype=torch.long))
        self.register_buffer("msg_t", torch.zeros(0, dtype=torch.float64))
        self.register_buffer("msg_feat", torch.zeros(0, edge_dim))
        self.register_buffer("msg_from_src", torch.zeros(0, dtype=torch.bool))
        self.cache = UpdateCache()

    @property
    def capacity(self) -> int:
        return self.memory.size(0)

    @property
    def num_pending(self) -> int:
        return self.msg_node.numel()

    def ensure_capacity(self, n: int) -> None:
        """Make rows ``0..n-1`` addressable; grows by the shared policy (``streamgnn.growth``), so a stream of
        new ids costs amortized O(1)."""
        old = self.capacity
        if n <= old:
            return
        new = grown_size(old, n)
        memory = self.memory.new_zeros(new, self.memory_dim)
        memory[:old] = self.memory
        last_update = self.last_update.new_zeros(new)
        last_update[:old] = self.last_update
        kept = self.cache.valid_for(self)
        self.memory, self.last_update = memory, last_update
        if kept:
            self.cache.grow(self)

    def get(self, nodes: Tensor) -> tuple[Tensor, Tensor]:
        """``(memory [n, memory_dim], last_update float64 [n])`` of ``nodes``, pending messages applied.

        Differentiable w.r.t. the message function, time encoder and GRU; leaves the stored state unchanged
        (apart from growing for unseen ids, which read as zero memory).
        """
        uniq, inverse = torch.unique(self._ids(nodes), return_inverse=True)
        memory, last_update = self._updated(uniq)
        return gather_rows(memory, inverse), last_update[inverse]

    def get_unique(self, uniq: Tensor) -> tuple[Tensor, Tensor]:
        """``get`` of distinct ids (e.g. ``torch.unique``'s output), without the gather."""
        return self._updated(self._ids(uniq))

    def store_messages(self, src: Tensor, dst: Tensor, t: Tensor, edge_feat: Tensor | None = None) -> None:
        """Queue a batch's interactions for both endpoints; call only after the batch has been predicted.

        Older pending messages of the endpoints are committed first. Runs under the caller's grad mode:
        ``torch.no_grad()`` for one-batch truncation, or grad on and a later ``detach()`` for longer windows.
        """
        src, dst = self._ids(src), self._ids(dst)
        t = torch.as_tensor(t, dtype=torch.float64, device=self.memory.device)
        n = len(src)
        if edge_feat is None:
            edge_feat = self.msg_feat.new_zeros(n, 0)
        edge_feat = torch.as_tensor(edge_feat, dtype=self.msg_feat.dtype, device=self.memory.device)
        if not len(dst) == len(t) == len(edge_feat) == n:
            raise EventValidationError(
                f"store_messages got {n} src, {len(dst)} dst, {len(t)} t and {len(edge_feat)} edge_feat rows"
            )
        if edge_feat.dim() != 2 or edge_feat.size(1) != self.edge_dim:
            raise ConfigError(f"edge_feat must be [n, {self.edge_dim}], got {tuple(edge_feat.shape)}")
        if n == 0:
            return
        self.flush(torch.cat([src, dst]))
        kept = self.cache.valid_for(self)  # (messages go to the endpoints just flushed: the cache holds none)
        # Interleave (src side, dst side) per event so that storage order is arrival order ("last" tie-break).
        self.msg_node = torch.cat([self.msg_node, torch.stack([src, dst], 1).reshape(-1)])
        self.msg_other = torch.cat([self.msg_other, torch.stack([dst, src], 1).reshape(-1)])
        self.msg_t = torch.cat([self.msg_t, t.repeat_interleave(2)])
        self.msg_feat = torch.cat([self.msg_feat, edge_feat.repeat_interleave(2, 0)])
        side = torch.tensor([True, False], device=src.device).repeat(n)
        self.msg_from_src = torch.cat([self.msg_from_src, side])
        if kept:
            self.cache.adopt(self)

    def flush(self, nodes: Tensor | None = None) -> None:
        """Commit and drop the pending messages of ``nodes`` (default: all), e.g. before serving."""
        uniq = torch.unique(self.msg_node if nodes is None else self._ids(nodes))
        memory, last_update = self._updated(uniq)
        kept = self.cache.valid_for(self)
        self.memory[uniq] = memory
        self.last_update[uniq] = last_update
        pos = self._positions(uniq)
        keep = pos.index_select(0, self.msg_node) < 0
        if kept:  # committed rows change the messages of the pending entries that name them as the other end
            self.cache.forget(uniq, self.msg_node[keep & (pos.index_select(0, self.msg_other) >= 0)])
        for name in _MESSAGE_STATE:
            setattr(self, name, getattr(self, name)[keep])
        if kept:
            self.cache.adopt(self)

    def detach(self) -> None:
        """Cut the autograd history carried by memory committed with grad enabled (truncated BPTT)."""
        self.memory = self.memory.detach()

    def reset_state(self) -> None:
        """Forget everything learned from the stream (zero memory, no pending messages); keeps parameters."""
        self.memory = torch.zeros_like(self.memory)
        self.last_update = torch.zeros_like(self.last_update)
        for name in _MESSAGE_STATE:
            setattr(self, name, getattr(self, name)[:0])

    def _ids(self, nodes) -> Tensor:
        nodes = torch.as_tensor(nodes, dtype=torch.long, device=self.memory.device).reshape(-1)
        if nodes.numel():
            if int(nodes.min()) < 0:
                raise UnknownNodeError(f"memory rows are internal node ids >= 0, got {int(nodes.min())}")
            self.ensure_capacity(int(nodes.max()) + 1)
        return nodes

    def _positions(self, uniq: Tensor) -> Tensor:
        """Each row's position in the distinct ``uniq``, -1 for rows not in it: a table over all rows, linear
        in the store, where ``isin`` would sort it."""
        pos = torch.full((self.capacity,), -1, dtype=torch.long, device=uniq.device)
        pos[uniq] = torch.arange(len(uniq), device=uniq.device)
        return pos

    def _pending(self, uniq: Tensor) -> tuple[Tensor, Tensor]:
        """Pending entries addressed to the distinct ``uniq``, and each one's position in ``uniq``."""
        index = self._positions(uniq).index_select(0, self.msg_node)
        sel = (index >= 0).nonzero().squeeze(1)
        return sel, index.index_select(0, sel)

    def _updated(self, uniq: Tensor) -> tuple[Tensor, Tensor]:
        """Memory and last update of the distinct ``uniq`` after applying their pending messages. Without
        autograd, rows the cache holds come from it, and the rows computed go into it. (Rows are read by
        ``index_select``, ``gather_rows``: a quarter of the time of advanced indexing on the CPU.)"""
        memory, last_update = gather_rows(self.memory, uniq), self.last_update.index_select(0, uniq)
        sel, index = self._pending(uniq)
        if sel.numel() == 0:
            return memory, last_update
        t = self.msg_t.index_select(0, sel)
        last_update = last_update.scatter_reduce(0, index, t, "amax")
        pad, cache = (0, None) if torch.is_grad_enabled() else (MIN_ROWS, self.cache.ready(self))
        if cache is not None:
            hit = cache.held.index_select(0, uniq)
            rows = hit.nonzero().squeeze(1)
            memory = memory.index_put((rows,), gather_rows(cache.rows, uniq.index_select(0, rows)))
            fresh = (~hit.index_select(0, index)).nonzero().squeeze(1)
            sel, index, t = (x.index_select(0, fresh) for x in (sel, index, t))
        if self.aggregate is aggregate_last:
            # Only each node's latest message counts: build just those (the same values, far less work).
            last = last_messages(index, t, len(uniq))
            rows = (last >= 0).nonzero().squeeze(1)
            parts = self._messages(padded(sel.index_select(0, last.index_select(0, rows)), pad))
        else:
            msg = torch.cat(self._messages(padded(sel, pad)), 1)[: len(sel)]
            aggregated, has = self.aggregate(msg, index, t, len(uniq))
            rows = has.nonzero().squeeze(1)
            parts = [aggregated[padded(rows, pad)]]
        if rows.numel():
            # Only nodes with messages step the GRU: GRU(0, h) != h, so stepping all would drift idle nodes.
            updated = self._gru(parts, gather_rows(memory, padded(rows, pad)))[: len(rows)]
            memory = memory.index_put((rows,), updated)
            if cache is not None:
                cache.put(uniq.index_select(0, rows), updated)
        return memory, last_update

    def _messages(self, sel: Tensor) -> list[Tensor]:
        """Messages of the pending entries ``sel`` from committed memory, as column blocks of one message."""
        node = self.msg_node.index_select(0, sel)
        raw = [  # (the two memory rows as two blocks: one copy less than a concatenated block)
            gather_rows(self.memory, node),
            gather_rows(self.memory, self.msg_other.index_select(0, sel)),
            self.time_enc(self.msg_t.index_select(0, sel) - self.last_update.index_select(0, node)),
            gather_rows(self.msg_feat, sel),
        ]
        if self.msg_src is None:
            return [part for part in raw if part.size(1)]
        raw = torch.cat(raw, 1)
        from_src = self.msg_from_src[sel]
        if not torch.is_grad_enabled():  # one product per side over every row: see ``MIN_ROWS``
            return [torch.where(from_src.unsqueeze(1), self.msg_src(raw), self.msg_dst(raw))]
        msg = raw.new_empty(len(sel), self.message_dim)
        msg[from_src] = self.msg_src(raw[from_src])
        msg[~from_src] = self.msg_dst(raw[~from_src])
        return [msg]

    def _gru(self, parts: list[Tensor], h: Tensor) -> Tensor:
        """``GRUCell(cat(parts), h)`` with each block through its own columns of the input weights: autograd
        then computes input gradients only for blocks that need them (the time encoding, not memory rows)."""
        gru = self.gru
        gi, col = gru.bias_ih, 0
        for part in parts:
            gi = gi + F.linear(part, gru.weight_ih[:, col : col + part.size(1)])
            col += part.size(1)
        i_r, i_z, i_n = gi.chunk(3, 1)
        h_r, h_z, h_n = F.linear(h, gru.weight_hh, gru.bias_hh).chunk(3, 1)
        reset = torch.sigmoid(i_r + h_r)
        update = torch.sigmoid(i_z + h_z)
        new = torch.tanh(i_n + reset * h_n)
        return new + update * (h - new)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        # State is sized by the stream, not the constructor: adopt the checkpoint's shapes before the copy.
        for name in _STATE:
            saved = state_dict.get(prefix + name)
            if saved is not None:
                setattr(self, name, getattr(self, name).new_empty(saved.shape))
        self.cache.clear()  # (the parameters loaded may equal the old ones, the state rows not)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class UpdateCache:
    """Rows of a ``NodeMemory`` with their pending messages applied (``rows`` where ``held``), computed by
    reads without autograd, for later reads and commits to take instead of computing them again.

    A node's applied row depends on its committed row and last update, its pending messages, the committed
    rows of their other ends, and the message, time and GRU parameters. The memory's own mutations keep the
    cache true: a commit (``flush``) forgets the rows it commits and those whose pending messages name one
    of them, and new messages go only to rows just committed. Everything else is checked before each use
    (``ready``): the state tensors must be those the cache was built on (``reset_state``,
    ``load_state_dict``, ``detach`` and a state lent by ``shard.memory.lend_state`` replace them) and the
    parameters equal, value for value, those it was built with (an optimizer step changes them in place,
    and a fused one leaves no version mark). Rows are computed at least ``MIN_ROWS`` at a time, so a cached
    row has the bits its recomputation would have."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.held: Tensor | None = None
        self.rows: Tensor | None = None
        self._state: tuple[Tensor, ...] = ()
        self._params: list[Tensor] = []

    def valid_for(self, memory: NodeMemory) -> bool:
        """Whether the cache was built on ``memory``'s state tensors as they are (parameters unchecked)."""
        state = _state_tensors(memory)
        return len(self._state) == len(state) and all(a is b for a, b in zip(self._state, state, strict=True))

    def ready(self, memory: NodeMemory) -> UpdateCache:
        """The cache, emptied first unless it is still true of ``memory``'s state and parameters."""
        params = [p.detach() for p in memory.parameters()]
        same = len(params) == len(self._params) and all(
            _equal(a, b) for a, b in zip(params, self._params, strict=True)
        )
        if not (same and self.valid_for(memory)):
            self.held = torch.zeros(memory.capacity, dtype=torch.bool, device=memory.memory.device)
            shape = (memory.capacity, memory.memory_dim)
            like = (shape, memory.memory.dtype, memory.memory.device)
            if self.rows is None or (self.rows.shape, self.rows.dtype, self.rows.device) != like:
                self.rows = memory.memory.new_empty(shape)  # (read only where ``held``: never zeroed)
            self._params = [p.clone() for p in params]
            self.adopt(memory)
        return self

    def put(self, nodes: Tensor, rows: Tensor) -> None:
        self.held[nodes] = True
        self.rows[nodes] = rows

    def forget(self, *nodes: Tensor) -> None:
        for part in nodes:
            self.held[part] = False

    def adopt(self, memory: NodeMemory) -> None:
        """Follow ``memory``'s state tensors after one of its own mutations replaced some."""
        self._state = _state_tensors(memory)

    def grow(self, memory: NodeMemory) -> None:
        """Follow ``memory``'s growth (new rows hold nothing)."""
        more = memory.capacity - len(self.held)
        self.held = torch.cat([self.held, self.held.new_zeros(more)])
        self.rows = torch.cat([self.rows, self.rows.new_zeros(more, self.rows.size(1))])
        self.adopt(memory)


def _equal(a: Tensor, b: Tensor) -> bool:
    """``torch.equal`` (NaN never equal), by numpy on the CPU: a sixth of its time on a GRU's weights,
    checked twice in every step that reads memory without autograd."""
    if a.device.type != "cpu" or b.device.type != "cpu" or a.dtype == torch.bfloat16:
        return torch.equal(a, b)
    return a.dtype == b.dtype and np.array_equal(a.numpy(), b.numpy())


def _state_tensors(memory: NodeMemory) -> tuple[Tensor, ...]:
    return tuple(getattr(memory, name) for name in _STATE)


def _mlp(in_dim: int, out_dim: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(in_dim, out_dim), nn.ReLU(), nn.Linear(out_dim, out_dim))
