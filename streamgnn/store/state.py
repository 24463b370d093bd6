"""A store's persistence: its content as plain arrays (``logical_arrays``), their hash, its ``state()`` and
the rebuild from it (``TemporalGraphStore.from_state``), with the checks that come first. Plain functions of
a store and the saved arrays, apart from the store so that its module stays about the graph itself."""

from __future__ import annotations

import hashlib

import numpy as np

from ..configs import stamp
from . import kernels as K
from .admission import Admission


def logical_arrays(store) -> dict[str, np.ndarray]:
    """The content, free of layout (slack, garbage, pool order): what checkpoints and hashes hold."""
    n, e, u, d = store.num_nodes, store.num_edges, store.num_node_updates, int(store.counters[K.DELETIONS])
    indptr = np.empty(n + 1, np.int64)
    adj = np.empty((int(store.deg[:n].sum()), 2), np.int32)
    K.gather_csr(store.start, store.deg, store.pool, n, indptr, adj)
    uindptr = np.empty(n + 1, np.int64)
    uadj = np.empty((int(store.udeg[:n].sum()), 2), np.int32)
    K.gather_csr(store.ustart, store.udeg, store.upool, n, uindptr, uadj)
    out = {
        "partition": store.partition[:n],
        "adj_indptr": indptr,
        "adj": adj,
        "edge_t": store.edge_t[:e],
        # empty until a delete applies: whether a batch's unmatched delete made room is no content
        "edge_del": store.edge_del[:e] if store.counters[K.DELETIONS] else np.zeros(0),
        "del_src": store.del_src[:d],
        "del_dst": store.del_dst[:d],
        "del_t": store.del_t[:d],
        "upd_indptr": uindptr,
        "upd_adj": uadj,
        "upd_t": store.upd_t[:u],
        "upd_node": store.upd_node[:u],
    }
    for name, arr, rows in (("edge_weight", store.edge_weight, e), ("edge_feat", store.edge_feat, e),
                            ("node_feat", store.node_feat, u)):  # fmt: skip
        if arr is not None:
            out[name] = arr[:rows]
    out.update({f"partitioner_{k}": v for k, v in store.partitioner.state().items()})
    out.update(store.admission.state()[0])
    return out


def content_hash(store) -> str:
    """SHA-256 over the logical content: equal stores hash equal whatever their batch history."""
    h = hashlib.sha256()
    h.update(repr((store.ids.id_type, store.config.num_partitions, store.watermark)).encode())
    if store.config.partitioner.stateful:
        h.update(repr(store.config.partitioner).encode())
    for name, arr in sorted(logical_arrays(store).items()):
        h.update(name.encode())
        h.update(str(arr.dtype).encode() + str(arr.shape).encode())
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


def state(store) -> tuple[dict[str, np.ndarray], dict]:
    """``store`` as plain arrays and JSON values (``fill`` puts them back)."""
    values = {
        "config": stamp(store.config.to_dict()),
        **store.admission.state()[1],
        "counts": {
            "nodes": store.num_nodes,
            "edges": store.num_edges,
            "node_updates": store.num_node_updates,
        },
        "source_offsets": store.source_offsets,
        "content_hash": content_hash(store),
    }
    return logical_arrays(store), values


def fill(store, a: dict[str, np.ndarray], values: dict) -> None:
    """Put ``state()``'s arrays and values into ``store`` (new, built from the saved config), every index
    checked before a kernel reads it; ValueError (KeyError...) where they are inconsistent."""
    store.admission = Admission.from_state(a, values, store.admission.config)
    store.partition = a["partition"].astype(np.int32)
    store.start, store.deg, store.pool = blocks(a["adj_indptr"], a["adj"])
    store.cap = store.deg.copy()
    store.ustart, store.udeg, store.upool = blocks(a["upd_indptr"], a["upd_adj"])
    store.ucap = store.udeg.copy()
    store.edge_t, store.edge_del = a["edge_t"].copy(), a["edge_del"].copy()
    store.del_src, store.del_dst, store.del_t = (a[k].copy() for k in ("del_src", "del_dst", "del_t"))
    store.upd_t, store.upd_node = a["upd_t"].copy(), a["upd_node"].copy()
    store.edge_weight = a["edge_weight"].copy() if "edge_weight" in a else None
    store.edge_feat = a["edge_feat"].copy() if "edge_feat" in a else None
    store.node_feat = a["node_feat"].copy() if "node_feat" in a else None
    c = store.counters
    c[K.USED], c[K.UUSED] = len(store.pool), len(store.upool)
    c[K.EDGES], c[K.UPDATES], c[K.DELETIONS] = len(store.edge_t), len(store.upd_t), len(store.del_t)
    store.source_offsets = {str(k): int(v) for k, v in values.get("source_offsets", {}).items()}
    check_structure(store, a)
    prefix = "partitioner_"
    saved = {k[len(prefix) :]: v for k, v in a.items() if k.startswith(prefix)}
    store.partitioner = store.partitioner.from_state(
        store.config.partitioner, store.config.num_partitions, saved, store.partition, store.num_edges
    )


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
