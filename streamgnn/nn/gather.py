"""``gather_rows``: ``x[index]`` along dim 0 with a backward that gives the same bits on every run.

The backward of a gather adds the gradients of repeated rows together. For ``x[index]`` PyTorch does that
on CPU with parallel atomic float adds once the gradient has 32768 elements or more and more than one
thread runs, so the sum's order, and its last bits, change from run to run: at TGN's usual sizes (dims
100, a neighbor or candidate row repeated across a batch) two resumes of one checkpoint drifted apart from
their first steps. ``index_select``'s backward adds on CPU in index order. On CUDA it is the other way
round (``index_select`` adds with atomics, ``x[index]`` sorts first), so each device gets its stable form.

>>> import torch
>>> x = torch.arange(6.0).view(3, 2)
>>> gather_rows(x, torch.tensor([[2, 0], [2, 2]])).shape
torch.Size([2, 2, 2])
"""

from __future__ import annotations

from torch import Tensor


def gather_rows(x: Tensor, index: Tensor) -> Tensor:
    """``x[index]`` for an integer ``index`` of any shape: shape ``[*index.shape, *x.shape[1:]]``."""
    if x.device.type != "cpu":
        return x[index]
    return x.index_select(0, index.reshape(-1)).view(*index.shape, *x.shape[1:])
