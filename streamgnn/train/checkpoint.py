"""Trainer checkpoints: everything a resumed run needs to continue bit for bit, written atomically.

Layout: ``ROOT/step-NNNNNNNNN/{store/, trainer/}`` plus ``ROOT/LATEST``. ``store/`` is a verified store
checkpoint (``TemporalGraphStore.save``, which also holds the source offsets); ``trainer/`` one array, the
``torch.save`` bytes of model, optimizer, memory, metrics, served rows and RNG states (read back with
``weights_only=True``), checksummed by ``write_checkpoint``, with a JSON manifest of config and counters.
A step directory is assembled under a temporary name, fsynced and renamed, then ``LATEST`` is replaced, so
a crash at any instant leaves the previous checkpoint whole.

Every byte is verified before anything is deserialized (see ``streamgnn.store.checkpoint``): ``LATEST``
holds the step's name and its trainer manifest's SHA-256, the trainer manifest the store manifest's, so a
``LATEST`` naming another step, also an older kept one, is refused. Resume an older step on purpose by
passing its directory: ``OnlineTrainer.resume(root / "step-000000100")``.
"""

from __future__ import annotations

import io
import os
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..errors import CheckpointError
from ..store import TemporalGraphStore
from ..store.checkpoint import fsync_dir, read_checkpoint, read_latest, write_checkpoint, write_latest

_STEP_DIR = re.compile(r"^step-(\d{9,})$")


@dataclass(frozen=True)
class TrainerCheckpoint:
    """A loaded checkpoint: ``manifest`` (JSON values), ``state`` (tensors), the store, and where it was."""

    path: Path
    manifest: dict
    state: dict
    store: TemporalGraphStore


def step_dirs(root: Path) -> list[Path]:
    """Complete checkpoints under ``root``, oldest first."""
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]


def save(
    root: Path,
    step: int,
    store: TemporalGraphStore,
    source_offsets: dict[str, int],
    state: dict,
    manifest: dict,
    keep: int,
) -> Path:
    """Write checkpoint ``step`` under ``root``, point ``LATEST`` at it and keep the newest ``keep``."""
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:09d}"
    for stale in root.glob(".tmp-step-*"):  # left by a writer killed mid-checkpoint
        shutil.rmtree(stale, ignore_errors=True)
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    tmp.mkdir()
    store.save(tmp / "store", source_offsets=source_offsets, keep=1)
    buf = io.BytesIO()
    torch.save(state, buf)
    blob = np.frombuffer(buf.getvalue(), np.uint8)
    store_manifest = read_latest(tmp / "store")[1]
    manifest = {**manifest, "kind": "trainer", "store_manifest_sha256": store_manifest}
    write_checkpoint(tmp / "trainer", {"state": blob}, manifest, keep=1)
    fsync_dir(tmp)
    if final.exists():  # the same step saved again (e.g. a resumed run re-saving): replace it whole
        shutil.rmtree(final)
    os.rename(tmp, final)
    fsync_dir(root)
    write_latest(root, final.name, read_latest(final / "trainer")[1])
    steps = step_dirs(root)
    # Steps after this one belong to an abandoned run (a rerun from scratch into the same folder): drop
    # them, so the newest ``keep`` are this run's and LATEST always names one that is kept.
    later = [p for p in steps if int(_STEP_DIR.match(p.name).group(1)) > step]
    mine = [p for p in steps if p not in later]
    for old in later + mine[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load(root: Path, map_location: torch.device | str = "cpu") -> TrainerCheckpoint:
    """The checkpoint ``LATEST`` names under ``root`` (or ``root`` itself if it is a step directory)."""
    path = step_path(Path(root))
    manifest, blob = _trainer(path)
    if read_latest(path / "store")[1] != manifest.get("store_manifest_sha256"):
        raise CheckpointError(f"{path}: the store is not the one the trainer state was saved with")
    store = TemporalGraphStore.load(path / "store")
    if store.content_hash() != manifest.get("store_hash"):
        raise CheckpointError(f"{path}: the store does not match the trainer state it was saved with")
    return TrainerCheckpoint(path, manifest, _tensors(path, blob, map_location), store)  # parsed last


def load_state(root: Path, map_location: torch.device | str = "cpu") -> tuple[Path, dict, dict]:
    """``(step directory, manifest, state)`` of the checkpoint ``load`` would read, without its store
    (e.g. the link predictor's weights for a service that holds only embeddings)."""
    path = step_path(Path(root))
    manifest, blob = _trainer(path)
    return path, manifest, _tensors(path, blob, map_location)


def step_path(root: Path) -> Path:
    """The step directory ``root`` is, or the one its ``LATEST`` names (checked to be the one it was
    written for)."""
    if _STEP_DIR.match(root.name):
        return root
    hint = f" Checkpoints present: {[p.name for p in step_dirs(root)]}."
    name, digest = read_latest(root, hint)
    if not _STEP_DIR.match(name):
        raise CheckpointError(f"{root}/LATEST names {name!r}, not a trainer checkpoint step.{hint}")
    if read_latest(root / name / "trainer")[1] != digest:
        raise CheckpointError(
            f"{root}/LATEST names {name} but was written for another checkpoint (or is altered); resume "
            f"an older step by passing its directory.{hint}"
        )
    return root / name


def _trainer(path: Path) -> tuple[dict, np.ndarray]:
    """The verified manifest and state bytes of step directory ``path``."""
    manifest, arrays = read_checkpoint(path / "trainer")
    if manifest.get("kind") != "trainer" or "state" not in arrays:
        raise CheckpointError(f"{path / 'trainer'} is not a trainer checkpoint")
    return manifest, arrays["state"]


def _tensors(path: Path, blob: np.ndarray, map_location) -> dict:
    try:
        return torch.load(io.BytesIO(blob.tobytes()), map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises a variety of unpickling errors for foreign content
        raise CheckpointError(f"{path}: the trainer state does not load as plain tensors ({exc})") from exc


def rngs() -> dict:
    """Every RNG state a resumed run continues from (torch, CUDA, Python, numpy), for the state blob: the
    Mersenne Twister states are 624 words each, which would bloat the manifest."""
    py = random.getstate()
    np_state = np.random.get_state(legacy=True)
    state = {
        "torch_rng": torch.get_rng_state(),
        "python_rng": [py[0], list(py[1]), py[2]],
        "numpy_rng": [np_state[0], np_state[1].tolist(), *np_state[2:]],
    }
    if torch.cuda.is_available():
        state["cuda_rng"] = torch.cuda.get_rng_state_all()
    return state


def restore_rngs(state: dict) -> None:
    """Set every RNG ``rngs`` captured."""
    torch.set_rng_state(state["torch_rng"])
    if "cuda_rng" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    py = state["python_rng"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    nps = state["numpy_rng"]
    np.random.set_state((nps[0], np.asarray(nps[1], np.uint32), *nps[2:]))
