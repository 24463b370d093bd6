"""What samplers return: flat arrays per hop, cheap to hand to a model or to PyG."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import ConfigError, EventValidationError
from ..events import to_int64


def int_ids(name: str, values) -> np.ndarray:
    """``values`` (a scalar or 1-D) as a contiguous int64 array of node or event ids. Integral floats and
    Python ints in object arrays are ids as at ingest; fractional floats, bools and strings are refused (a
    float id truncated to an int would sample some other node without a word)."""
    arr = np.asarray(values)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ConfigError(f"{name} must be a scalar or 1-D, got shape {arr.shape}")
    if arr.dtype.kind == "O":  # Python ints become an int array; anything else keeps a refused dtype
        arr = np.array(arr.tolist())
    if arr.size and arr.dtype.kind not in "iuf":
        example = arr.ravel()[:1].tolist()[0]
        raise ConfigError(f"{name} must be integer ids, got {arr.dtype} values such as {example!r}")
    try:
        return np.ascontiguousarray(to_int64(name, arr, "ids must be integers"))
    except EventValidationError as exc:
        raise ConfigError(str(exc)) from None


@dataclass(slots=True)  # not frozen: a frozen init costs ~0.6 us more, a few percent of a small call
class SampledHop:
    """Neighbors of one hop's roots, grouped by root (CSR over roots), ascending edge time within a root.

    ``nbr`` and ``eid`` are internal (dense) node and edge ids of the store; ``dt = query_t[root] - t``.
    """

    ptr: np.ndarray  # int64[n_roots + 1]
    root_index: np.ndarray  # int64[m]
    nbr: np.ndarray  # int64[m]
    eid: np.ndarray  # int64[m]
    t: np.ndarray  # float64[m]
    dt: np.ndarray  # float64[m]
    query_t: np.ndarray  # float64[n_roots]
    edge_features: np.ndarray | None = None  # float32[m, d_e]
    node_features: np.ndarray | None = None  # float32[m, d_n] of nbr at time t

    @property
    def num_roots(self) -> int:
        return len(self.ptr) - 1

    def __len__(self) -> int:
        return len(self.nbr)

    def edge_index(self) -> torch.Tensor:
        """PyG ``edge_index`` (messages flow neighbor -> root): row 0 indexes ``nbr``, row 1 the root."""
        m = len(self.nbr)
        return torch.stack([torch.arange(m, dtype=torch.long), torch.from_numpy(self.root_index)])

    def to_dense(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(nbr, eid, dt, mask)`` as [n_roots, k] arrays, most recent neighbors right-aligned."""
        n = self.num_roots
        nbr = np.zeros((n, k), np.int64)
        eid = np.zeros((n, k), np.int64)
        dt = np.zeros((n, k), np.float64)
        mask = np.zeros((n, k), bool)
        counts = np.diff(self.ptr)
        take = np.minimum(counts, k)
        rows = np.repeat(np.arange(n), take)
        pos_in_root = np.arange(len(rows)) - np.repeat(np.cumsum(take) - take, take)
        src = np.repeat(self.ptr[1:] - take, take) + pos_in_root
        col = np.repeat(k - take, take) + pos_in_root
        nbr[rows, col] = self.nbr[src]
        eid[rows, col] = self.eid[src]
        dt[rows, col] = self.dt[src]
        mask[rows, col] = True
        return nbr, eid, dt, mask


@dataclass(slots=True)
class SampledSubgraph:
    """Multi-hop sample: ``hops[0]`` has the roots as queries; ``hops[h]`` queries ``hops[h-1].nbr``.

    Each entry of ``hops[h-1]`` is one query of ``hops[h]``, at the time of the edge that reached it
    (TGAT), so an edge never brings in a neighborhood from after its own time.
    ``streamgnn.nn.inputs.EmbeddingInput.from_subgraph`` turns this into dense ``[n, k]`` tensors.
    """

    roots: np.ndarray  # int64 internal ids
    root_t: np.ndarray  # float64
    hops: list[SampledHop]
    root_node_features: np.ndarray | None = None  # float32[n_roots, d_n] in force at root_t
