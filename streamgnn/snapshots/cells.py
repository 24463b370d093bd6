"""RecurrentCell: one calling convention over PyTorch Geometric Temporal's recurrent layers.

PGT's recurrent layers differ in how they carry state: GConvGRU, T-GCN, DCRNN and A3T-GCN take and return a
hidden state ``H``; GConvLSTM, GC-LSTM and LRGCN take ``H`` and ``C`` and return both (DyGrEncoder returns
an output before them); EvolveGCN-H/O evolve their own weights inside the module between calls. The
trainer needs three things from all of them: a step, a reset at the start of a pass, and a cut of the
autograd history for truncated backpropagation through time. This adapter reads the layer's ``forward``
signature once and provides those, plus zero rows of state for nodes that join a growing graph.

    >>> import torch
    >>> from torch_geometric_temporal.nn.recurrent import GConvLSTM
    >>> cell = RecurrentCell(GConvLSTM(2, 8, 1))
    >>> x, ei = torch.ones(3, 2), torch.tensor([[0, 1], [1, 2]])
    >>> h, state = cell(x, ei, None, None)
    >>> h.shape, len(state), cell.hidden
    (torch.Size([3, 8]), 2, 8)
"""

from __future__ import annotations

import inspect

import torch

from ..errors import ConfigError

State = tuple[torch.Tensor, ...] | None


class RecurrentCell:
    def __init__(self, module: torch.nn.Module, hidden: int | None = None) -> None:
        params = inspect.signature(module.forward).parameters
        if "edge_index" not in params:
            raise ConfigError(
                f"{type(module).__name__} does not take (X, edge_index, edge_weight, ...): the snapshot "
                "trainer drives PGT's graph-recurrent layers (GConvGRU, GConvLSTM, TGCN, DCRNN, EvolveGCN...)"
            )
        if "edge_type" in params:
            raise ConfigError(
                f"{type(module).__name__} takes relation types, not edge weights: snapshots have weights"
            )
        self.module = module
        self.states = 2 if "C" in params else 1 if "H" in params else 0
        self.evolving = callable(getattr(module, "reinitialize_weight", None))  # EvolveGCN's inner weights
        self.periods = getattr(module, "periods", None)  # A3T-GCN wants X as [nodes, features, periods]
        self.hidden = hidden or getattr(module, "out_channels", None) or getattr(module, "in_channels", None)
        if not isinstance(self.hidden, int):
            raise ConfigError(f"cannot tell the output width of {type(module).__name__}: pass hidden=")

    def __call__(self, x: torch.Tensor, edge_index, edge_weight, state: State) -> tuple[torch.Tensor, State]:
        if self.periods is not None and x.dim() == 2:
            x = x.reshape(x.shape[0], -1, self.periods)
        if self.states == 0:
            return self.module(x, edge_index, edge_weight), None
        state = _pad(state, x.shape[0])
        args = () if state is None else state
        out = self.module(x, edge_index, edge_weight, *args)
        if self.states == 1:
            return out, (out,)
        return out[0], tuple(out[-2:])

    def reset(self) -> None:
        if self.evolving:
            self.module.reinitialize_weight()

    def detach(self, state: State) -> State:
        """Cut the autograd history (the state's values stay): the next backward stops here."""
        if self.evolving and getattr(self.module, "weight", None) is not None:
            self.module.weight = self.module.weight.detach()
        return None if state is None else tuple(s.detach() for s in state)

    def state(self) -> torch.Tensor | None:
        """EvolveGCN's evolved weights, which a checkpoint must hold besides the parameters (None: a layer
        that evolves none)."""
        return getattr(self.module, "weight", None) if self.evolving else None

    def load_state(self, weight: torch.Tensor | None) -> None:
        """In place: the cell wraps the caller's layer, which the trainer's model holds."""
        if self.evolving:
            self.module.weight = weight


def _pad(state: State, n: int) -> State:
    """State rows for ``n`` nodes: nodes that joined since the last snapshot start from zeros."""
    if state is None or state[0].shape[0] == n:
        return state
    if state[0].shape[0] > n:
        raise ConfigError(f"the graph shrank from {state[0].shape[0]} to {n} nodes; node ids must stay put")
    return tuple(torch.cat([s, s.new_zeros(n - s.shape[0], *s.shape[1:])]) for s in state)
