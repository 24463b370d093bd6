"""Signals on disk: one ``.npz`` per snapshot as it is cut, so writing never holds the whole signal.

Layout of a folder: ``snapshot-000000.npz`` ... (arrays ``edge_index``, ``edge_weight`` and, where present,
``x``, ``y`` and the extra arrays such as ``link_index``), ``node_ids.npy`` (external id of each internal
id; strings as a JSON list in ``node_ids.json``) and ``signal.json`` (the spec, the snapshot times, counts),
written last: a folder without it is an unfinished write. Each file is written whole or not at all, as a
checkpoint's are (``checkpoint.write_atomic``). ``read_signal`` loads a folder back as a PyTorch Geometric
Temporal signal (no pickle).

    >>> import tempfile, numpy as np
    >>> from streamgnn.snapshots.snapshot import Snapshot
    >>> folder = tempfile.mkdtemp()
    >>> w = SignalWriter(folder)
    >>> x = np.ones((2, 1), np.float32)
    >>> w.write(Snapshot(1.0, 0, np.array([[0], [1]]), np.ones(1, np.float32), x, 2))
    >>> _ = w.close(node_ids=np.array([10, 20]), meta={"note": "demo"})
    >>> signal = read_signal(folder)
    >>> signal.snapshot_count, signal.node_ids.tolist(), signal[0].edge_index.tolist()
    (1, [10, 20], [[0], [1]])
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np

from ..checkpoint import write_atomic
from ..errors import ConfigError
from .signal import to_signal
from .snapshot import Snapshot

_META = "signal.json"


def _atomic(path: Path, write) -> None:
    """``write(file)``'s bytes as ``path``, whole or not at all."""
    buf = io.BytesIO()
    write(buf)
    write_atomic(path, buf.getvalue())


def check_output_folder(folder: str | Path) -> Path:
    """``folder`` as a place to write a signal: new (its parents are created too) or empty (checked before
    any long work)."""
    folder = Path(folder)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ConfigError(f"{folder} exists and is not an empty folder: choose a new output folder")
    return folder


class SignalWriter:
    def __init__(self, folder: str | Path) -> None:
        self.folder = check_output_folder(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.times: list[float] = []
        self.num_nodes: list[int] = []

    def write(self, snap: Snapshot) -> None:
        arrays = {"edge_index": snap.edge_index, "edge_weight": snap.edge_weight}
        arrays.update({k: v for k, v in (("x", snap.x), ("y", snap.y)) if v is not None})
        arrays.update({f"extra.{k}": v for k, v in snap.extra.items()})
        _atomic(self.folder / f"snapshot-{len(self.times):06d}.npz", lambda f: np.savez(f, **arrays))
        self.times.append(snap.t)
        self.num_nodes.append(snap.num_nodes)

    def close(self, *, node_ids: np.ndarray, meta: dict) -> Path:
        if node_ids.dtype.kind in "iu":
            _atomic(
                self.folder / "node_ids.npy",
                lambda f: np.save(f, node_ids.astype(np.int64), allow_pickle=False),
            )
        else:
            text = json.dumps([str(v) for v in node_ids.tolist()]).encode()
            _atomic(self.folder / "node_ids.json", lambda f: f.write(text))
        body = {**meta, "snapshots": len(self.times), "times": self.times, "num_nodes": self.num_nodes}
        _atomic(self.folder / _META, lambda f: f.write(json.dumps(body, indent=1).encode()))
        return self.folder


def read_signal(folder: str | Path):
    """The PGT signal written to ``folder`` (``signal.meta`` holds ``signal.json``)."""
    folder = Path(folder)
    try:
        meta = json.loads((folder / _META).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{folder} holds no finished signal ({_META}: {exc})") from exc
    snaps = []
    for i, (t, n) in enumerate(zip(meta["times"], meta["num_nodes"], strict=True)):
        with np.load(folder / f"snapshot-{i:06d}.npz", allow_pickle=False) as z:
            a = {k: z[k] for k in z.files}
        extra = {k[6:]: v for k, v in a.items() if k.startswith("extra.")}
        snaps.append(
            Snapshot(float(t), i, a["edge_index"], a["edge_weight"], a.get("x"), n, y=a.get("y"), extra=extra)
        )
    ids_npy, ids_json = folder / "node_ids.npy", folder / "node_ids.json"
    node_ids = (
        np.load(ids_npy, allow_pickle=False)
        if ids_npy.exists()
        else np.array(json.loads(ids_json.read_text()))
    )
    signal = to_signal(snaps, node_ids=node_ids)
    signal.meta = meta
    return signal
