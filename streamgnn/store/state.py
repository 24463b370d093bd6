"""Checks and pieces for rebuilding a store from its ``state()`` (``TemporalGraphStore.from_state``): plain
functions of the saved arrays, apart from the store so that its module stays about the graph itself."""

from __future__ import annotations

import numpy as np


def check_structure(store, a: dict[str, np.ndarray]) -> None:
    """Raise ValueError unless every index in the arrays points inside what it indexes: the kernels that
    rebuild and hash the store do no bounds checks, so a forged checkpoint must stop here, not crash them."""
    n, e, u = store.num_nodes, len(store.edge_t), len(store.upd_t)
    if not (e == 0 or store.watermark >= store.edge_t.max()):  # samplers trust it as an upper bound
        raise ValueError(f"watermark {store.watermark} is below the newest edge time {store.edge_t.max()}")

    def need(ok, what: str) -> None:
        if not ok:
            raise ValueError(f"{what} ({n} nodes, {e} edges, {u} node updates)")

    for name, ptr, rows in (
        ("adj", a["adj_indptr"], len(store.pool)),
        ("upd_adj", a["upd_indptr"], len(store.upool)),
    ):
        need(ptr.ndim == 1 and len(ptr) == n + 1, f"{name}: its indptr must hold one entry per node plus one")
        need(ptr[0] == 0 and ptr[-1] == rows and (np.diff(ptr) >= 0).all(), f"{name}: indptr is not a CSR")
    codes = store.pool[:, 1].astype(np.int64)
    need((store.pool[:, 0] >= 0).all() and (store.pool[:, 0] < n).all(), "adj: a neighbor is not a node")
    need(
        ((codes >= 0) & (codes < e) | (codes < 0) & (-codes - 1 < e)).all(), "adj: an edge id is out of range"
    )
    need(((store.upool[:, 1] >= 0) & (store.upool[:, 1] < u)).all(), "upd_adj: an update id is out of range")
    need(len(store.partition) == n and len(store.upd_node) == u, "partition or upd_node has the wrong length")
    need(((store.upd_node >= 0) & (store.upd_node < n)).all(), "upd_node: a node id is out of range")
    d = len(store.del_t)
    need(len(store.edge_del) == (e if d else 0), "edge_del must hold one time per edge once a delete applied")
    need(len(store.del_src) == d and len(store.del_dst) == d, "the deletion log's columns differ in length")
    for col, rows in (("edge_weight", e), ("edge_feat", e), ("node_feat", u)):
        need(getattr(store, col) is None or len(getattr(store, col)) == rows, f"{col} has the wrong length")


def blocks(indptr: np.ndarray, adj: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    start = indptr[:-1].astype(np.int64)
    deg = np.diff(indptr).astype(np.int64)
    return start, deg, adj.astype(np.int32).reshape(-1, 2).copy()
