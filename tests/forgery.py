"""Checkpoint forgery for tests: change a checkpoint and recompute every checksum, as a deliberate forger
would, so what a test sees refused is the forged content itself, not a checksum mismatch."""

import hashlib
import json

import numpy as np

from streamgnn.checkpoint import write_latest


def reseal(d, manifest):
    """Write ``manifest`` into checkpoint ``d`` with a matching checksum and LATEST, as a forger would."""
    data = json.dumps(manifest).encode()
    (d / "manifest.json").write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    (d / "manifest.sha256").write_text(f"{digest}\n")
    write_latest(d.parent, d.name, digest)


def forge(d, name, array):
    """Replace one array of checkpoint ``d`` and recompute every checksum, as a deliberate forger would."""
    np.save(d / f"{name}.npy", array, allow_pickle=array.dtype == object)
    manifest = json.loads((d / "manifest.json").read_text())
    data = (d / f"{name}.npy").read_bytes()
    manifest["arrays"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    reseal(d, manifest)
