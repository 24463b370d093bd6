"""Atomic, verifiable store checkpoints: plain ``.npy`` arrays plus a JSON manifest, never pickle.

Layout: ``ROOT/ckpt-NNNNNN/{manifest.json, manifest.sha256, *.npy}`` and ``ROOT/LATEST`` naming the newest.
A version directory is written under a temporary name, fsynced, then renamed; ``LATEST`` is replaced the
same way, so a crash at any point leaves the previous good checkpoint in place.

Every byte a load trusts is verified before it is used: each array against the SHA-256 its manifest
records, the manifest against the SHA-256 beside it (``manifest.sha256``), and ``LATEST`` holds the name of
the checkpoint it was written for together with that checkpoint's manifest digest. So a flipped bit
anywhere, a truncated file, or a ``LATEST`` pointing at another checkpoint (also an older one that is
still kept) is refused with ``CheckpointError``. Loading an older checkpoint on purpose is explicit:
``TemporalGraphStore.load(root, version=N)``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import CheckpointError
from . import kernels as K
from .config import StoreConfig
from .dedup import SeenIds
from .denseids import DenseIds
from .idmap import NodeIdMap

if TYPE_CHECKING:
    from .graph import TemporalGraphStore

FORMAT = "streamgnn-store"
FORMAT_VERSION = 2  # 2: the manifest is checksummed and LATEST carries its digest
_VERSION_DIR = re.compile(r"^ckpt-(\d{6,})$")
_LATEST = re.compile(rb"^([a-z]+-[0-9]{6,}) ([0-9a-f]{64})\n$")


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def versions(root: Path) -> list[int]:
    """Checkpoint versions present under ``root``, oldest first."""
    if not root.is_dir():
        return []
    found = (_VERSION_DIR.match(p.name) for p in root.iterdir() if p.is_dir())
    return sorted(int(m.group(1)) for m in found if m)


def write_checkpoint(root: Path, arrays: dict[str, np.ndarray], manifest: dict, keep: int = 2) -> Path:
    """Write arrays + manifest as a new version under ``root`` atomically; prune to ``keep`` versions."""
    root.mkdir(parents=True, exist_ok=True)
    existing = versions(root)
    version = (existing[-1] + 1) if existing else 1
    final = root / f"ckpt-{version:06d}"
    tmp = root / f".tmp-ckpt-{version:06d}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    entries = {}
    for name, arr in arrays.items():
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(arr), allow_pickle=False)
        data = buf.getvalue()
        _write_file(tmp / f"{name}.npy", data)
        entries[name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    manifest = {
        **manifest,
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "version": version,
        "created_unix": time.time(),
        "arrays": entries,
    }
    data = json.dumps(manifest, indent=1, sort_keys=True).encode()
    _write_file(tmp / "manifest.json", data)
    digest = hashlib.sha256(data).hexdigest()
    _write_file(tmp / "manifest.sha256", f"{digest}\n".encode())
    fsync_dir(tmp)
    os.rename(tmp, final)
    fsync_dir(root)
    write_latest(root, final.name, digest)
    for old in versions(root)[:-keep] if keep > 0 else []:
        shutil.rmtree(root / f"ckpt-{old:06d}", ignore_errors=True)
    return final


def write_latest(root: Path, name: str, digest: str) -> None:
    """Point ``root/LATEST`` at checkpoint ``name`` whose manifest has SHA-256 ``digest``, atomically."""
    _write_file(root / "LATEST.tmp", f"{name} {digest}\n".encode())
    os.replace(root / "LATEST.tmp", root / "LATEST")
    fsync_dir(root)


def read_latest(root: Path, hint: str = "") -> tuple[str, str]:
    """``(name, manifest digest)`` that ``root/LATEST`` holds; a missing or damaged one is refused."""
    try:
        data = (root / "LATEST").read_bytes()
    except OSError as exc:
        raise CheckpointError(f"no checkpoint at {root}: LATEST is missing ({exc}).{hint}") from exc
    m = _LATEST.match(data)
    if m is None:
        raise CheckpointError(
            f"{root}/LATEST is damaged: it holds {data[:80]!r}, not a checkpoint name and its manifest's "
            f"SHA-256.{hint}"
        )
    return m.group(1).decode(), m.group(2).decode()


def read_manifest(d: Path, expected: str | None = None, hint: str = "") -> dict:
    """The manifest of checkpoint directory ``d``, checked against ``manifest.sha256`` beside it and, when
    given, against ``expected`` (the digest LATEST holds for it)."""
    try:
        data = (d / "manifest.json").read_bytes()
        recorded = (d / "manifest.sha256").read_bytes()
    except OSError as exc:
        raise CheckpointError(f"checkpoint {d} has no readable manifest ({exc}).{hint}") from exc
    digest = hashlib.sha256(data).hexdigest()
    if recorded != f"{digest}\n".encode():
        raise CheckpointError(f"checkpoint {d}: the manifest or its checksum is truncated or altered.{hint}")
    if expected is not None and expected != digest:
        raise CheckpointError(
            f"{d.parent}/LATEST names {d.name} but was written for another checkpoint (or is altered); "
            f"load a checkpoint other than the latest by its version.{hint}"
        )
    try:
        return json.loads(data)
    except ValueError as exc:  # only a writer's bug gets here: the bytes are the ones it checksummed
        raise CheckpointError(f"checkpoint {d} has no readable manifest ({exc}).{hint}") from exc


def read_checkpoint(root: Path, version: int | None = None) -> tuple[dict, dict[str, np.ndarray]]:
    """Manifest and verified arrays of ``version`` (default: the one LATEST names)."""
    others = versions(root)
    hint = f" Versions present: {others}; load an older one with version=N." if others else ""
    expected = None
    if version is None:
        name, expected = read_latest(root, hint)
        if not _VERSION_DIR.match(name):
            raise CheckpointError(f"{root}/LATEST names {name!r}, not a store checkpoint version.{hint}")
    else:
        name = f"ckpt-{version:06d}"
    d = root / name
    manifest = read_manifest(d, expected, hint)
    if not isinstance(manifest, dict) or not isinstance(manifest.get("arrays", {}), dict):
        raise CheckpointError(f"checkpoint {d}: the manifest is not a JSON object of arrays.{hint}")
    if manifest.get("format") != FORMAT or manifest.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {d} is format {manifest.get('format')!r} v{manifest.get('format_version')!r}; "
            f"this streamgnn reads {FORMAT!r} v{FORMAT_VERSION}"
        )
    verified = {}
    for key, meta in manifest.get("arrays", {}).items():
        path = d / f"{key}.npy"
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise CheckpointError(f"checkpoint {d} lacks array {key!r} ({exc}).{hint}") from exc
        meta = meta if isinstance(meta, dict) else {}
        if len(data) != meta.get("bytes") or hashlib.sha256(data).hexdigest() != meta.get("sha256"):
            raise CheckpointError(
                f"checkpoint {d}: array {key!r} is truncated or altered (size {len(data)} vs "
                f"{meta.get('bytes')}, checksum mismatch).{hint}"
            )
        verified[key] = data
    arrays = {}
    for key, data in verified.items():  # parsed only once every byte is verified
        try:
            arrays[key] = np.load(io.BytesIO(data), allow_pickle=False)
        except ValueError as exc:
            raise CheckpointError(
                f"checkpoint {d}: array {key!r} is not a plain array ({exc}).{hint}"
            ) from exc
    return manifest, arrays


def save_store(
    store: TemporalGraphStore, root: Path, source_offsets: dict[str, int] | None, keep: int
) -> Path:
    if source_offsets is not None:
        store.source_offsets = dict(source_offsets)
    manifest = {
        "kind": "store",
        "config": store.config.to_dict(),
        "id_kind": store.ids.kind,
        "watermark": store.watermark,
        "counts": {
            "nodes": store.num_nodes,
            "edges": store.num_edges,
            "node_updates": store.num_node_updates,
        },
        "source_offsets": store.source_offsets,
        "content_hash": store.content_hash(),
    }
    return write_checkpoint(root, store.logical_arrays(), manifest, keep)


def load_store(cls: type[TemporalGraphStore], root: Path, version: int | None = None) -> TemporalGraphStore:
    """The ``cls`` store recorded under ``root`` (``TemporalGraphStore.load`` passes its class, so this
    module needs the store's type only for annotations)."""
    manifest, a = read_checkpoint(root, version)
    if manifest.get("kind") != "store":
        raise CheckpointError(f"{root} holds a {manifest.get('kind')!r} checkpoint, not a store")
    try:
        # keys absent from checkpoints written before they existed (partitioner, dense_ids) take the defaults
        config = StoreConfig.from_dict(manifest["config"], f"{root}: store config")
        store = cls(config)
        store.ids = (
            DenseIds.from_arrays(a) if config.dense_ids else NodeIdMap.from_arrays(manifest["id_kind"], a)
        )
        store.watermark = float(manifest["watermark"])
        store.partition = a["partition"].astype(np.int32)
        store.start, store.deg, store.pool = _blocks(a["adj_indptr"], a["adj"])
        store.cap = store.deg.copy()
        store.ustart, store.udeg, store.upool = _blocks(a["upd_indptr"], a["upd_adj"])
        store.ucap = store.udeg.copy()
        store.edge_t = a["edge_t"].copy()
        store.edge_del = a["edge_del"].copy()
        store.del_src, store.del_dst, store.del_t = (
            a["del_src"].copy(),
            a["del_dst"].copy(),
            a["del_t"].copy(),
        )
        store.upd_t, store.upd_node = a["upd_t"].copy(), a["upd_node"].copy()
        store.edge_weight = a["edge_weight"].copy() if "edge_weight" in a else None
        store.edge_feat = a["edge_feat"].copy() if "edge_feat" in a else None
        store.node_feat = a["node_feat"].copy() if "node_feat" in a else None
        store.seen = SeenIds.from_arrays(a["seen_bits"], a["seen_outliers"])
        c = store.counters
        c[K.USED], c[K.UUSED] = len(store.pool), len(store.upool)
        c[K.EDGES], c[K.UPDATES], c[K.DELETIONS] = len(store.edge_t), len(store.upd_t), len(store.del_t)
        store.source_offsets = {str(k): int(v) for k, v in manifest.get("source_offsets", {}).items()}
        _check_structure(store, a)
        prefix = "partitioner_"
        state = {k[len(prefix) :]: v for k, v in a.items() if k.startswith(prefix)}
        store.partitioner.restore(state, store.partition, store.num_edges)
    except (KeyError, ValueError, TypeError, AttributeError, IndexError) as exc:
        raise CheckpointError(f"checkpoint under {root} is inconsistent: {exc!r}") from exc
    if store.content_hash() != manifest.get("content_hash"):
        raise CheckpointError(f"checkpoint under {root} does not reproduce its content hash; refusing it")
    return store


def _check_structure(store, a: dict[str, np.ndarray]) -> None:
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


def _blocks(indptr: np.ndarray, adj: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    start = indptr[:-1].astype(np.int64)
    deg = np.diff(indptr).astype(np.int64)
    return start, deg, adj.astype(np.int32).reshape(-1, 2).copy()


__all__ = [
    "load_store",
    "read_checkpoint",
    "read_latest",
    "read_manifest",
    "save_store",
    "versions",
    "write_checkpoint",
    "write_latest",
]
