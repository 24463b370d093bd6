"""The one checkpoint container: plain ``.npy`` arrays plus a JSON manifest, never pickle, written atomically.

Every component that checkpoints (store, partition router, online, sharded and snapshot trainers, snapshot
stream, GraphNN) gives ``state()`` as named arrays and JSON values, and this module writes them as one
container: ``ROOT/ckpt-NNNNNN/{manifest.json, manifest.sha256, *.npy}`` and ``ROOT/LATEST`` naming the
newest. The manifest records the format tag ``streamgnn-checkpoint``, its version, and the ``kind`` of what it
holds, so a folder of one kind is never read as another. ``NNNNNN`` is the checkpoint's number: a trainer's
step, or for a store the next free version. Tensor state (model, optimizer) travels as one array, the
``torch.save`` bytes read back with ``weights_only=True``.

A checkpoint is written under a temporary name, fsynced, then renamed; ``LATEST`` is replaced the same way,
so a crash at any point leaves the previous good checkpoint in place. Retention lives here too: the newest
``keep`` are kept, and numbers after the one just written (an abandoned, longer run in the same folder) go,
so ``LATEST`` always names a kept checkpoint.

Every byte a load trusts is verified before it is parsed: each array against the SHA-256 its manifest
records, the manifest against ``manifest.sha256`` beside it, and ``LATEST`` holds the checkpoint's name
together with its manifest's digest, so a flipped bit, a truncated file, or a ``LATEST`` pointing at another
checkpoint (also an older kept one) is refused with ``CheckpointError``. An older checkpoint is loaded on
purpose by its number, or by passing its directory.

Names, one per direction: a component gives ``state()`` and is built back by the classmethod
``from_state(...)`` (``TemporalGraphStore``, ``RoutingState``, ``RebalanceState``, ``SnapshotBuilder``,
``SnapshotStream``, its queue and pair table); a trainer continues from a checkpoint folder with ``resume``
(``OnlineTrainer``, ``ShardedTrainer``, ``SnapshotTrainer``); a file or folder is read with ``load(path)``
(this module's, a store's, ``GraphNN``'s, ``EvalNegatives``'). Not yet converted: parts restored in place
into an object first built from its config (``restore``: a sharded rank's index, memory, halo and batcher,
the partitioners; ``load_state``: the snapshot labelers). torch modules keep ``state_dict`` and
``load_state_dict``.

Checkpoints written before this container still load: the ``streamgnn-store`` v2 container (stores and
routers: the same files under another tag) reads as is, and the trainers' old ``step-N/{store,trainer}``
layout (also a sharded rank's ``rank-R/step-N``) is read into the same shape a new trainer checkpoint has.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .errors import CheckpointError

FORMAT = "streamgnn-checkpoint"
FORMAT_VERSION = 3  # 3: one container for every component, with the kind it holds
_READABLE = {(FORMAT, FORMAT_VERSION), ("streamgnn-store", 2)}  # v2: the same files, before the rename
_DIR = re.compile(r"^ckpt-(\d{6,})$")
_OLD_STEP = re.compile(r"^step-(\d{9,})$")  # the trainers' layout before this container
_LATEST = re.compile(rb"^([a-z]+-[0-9]{6,}) ([0-9a-f]{64})\n$")


@dataclass(frozen=True)
class Checkpoint:
    """A verified checkpoint: where it is, its number, its manifest (JSON values, ``kind`` among them) and
    its arrays."""

    path: Path
    number: int
    manifest: dict
    arrays: dict[str, np.ndarray]

    def part(self, prefix: str) -> dict[str, np.ndarray]:
        """The arrays saved under ``prefix.`` (one component's state within a container), prefix removed."""
        return unprefix(prefix, self.arrays)


def prefixed(prefix: str, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``arrays`` named ``prefix.NAME``, to put one component's state beside another's in a container."""
    return {f"{prefix}.{k}": v for k, v in arrays.items()}


def unprefix(prefix: str, arrays: dict) -> dict:
    n = len(prefix) + 1
    return {k[n:]: v for k, v in arrays.items() if k.startswith(prefix + ".")}


# ---------------------------------------------------------------------- writing
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


def numbers(root: Path) -> list[int]:
    """Numbers of the checkpoints under ``root`` (old trainer steps among them), oldest first."""
    if not Path(root).is_dir():
        return []
    found = (_DIR.match(p.name) or _OLD_STEP.match(p.name) for p in Path(root).iterdir() if p.is_dir())
    return sorted({int(m.group(1)) for m in found if m})


def directory(root: Path, number: int) -> Path:
    """Where checkpoint ``number`` is under ``root``: ``ckpt-NNNNNN``, or an old trainer's ``step-N``."""
    path = Path(root) / f"ckpt-{number:06d}"
    old = Path(root) / f"step-{number:09d}"
    return old if not path.exists() and old.is_dir() else path


def save(
    root: Path,
    kind: str,
    arrays: dict[str, np.ndarray],
    values: dict,
    *,
    number: int | None = None,
    keep: int = 2,
) -> Path:
    """Write ``arrays`` and ``values`` as checkpoint ``number`` (default: one past the newest) of ``kind``
    under ``root``, point ``LATEST`` at it, drop any numbered after it and keep the newest ``keep``."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    if number is None:
        existing = numbers(root)
        number = existing[-1] + 1 if existing else 1
    final = root / f"ckpt-{number:06d}"
    for stale in root.glob(".tmp-ckpt-*"):  # left by a writer killed mid-checkpoint
        shutil.rmtree(stale, ignore_errors=True)
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    tmp.mkdir()
    entries = {}
    for name, arr in arrays.items():
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(arr), allow_pickle=False)
        data = buf.getvalue()
        _write_file(tmp / f"{name}.npy", data)
        entries[name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    manifest = {
        **values,
        "kind": kind,
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "version": number,
        "created_unix": time.time(),
        "arrays": entries,
    }
    data = json.dumps(manifest, indent=1, sort_keys=True).encode()
    _write_file(tmp / "manifest.json", data)
    digest = hashlib.sha256(data).hexdigest()
    _write_file(tmp / "manifest.sha256", f"{digest}\n".encode())
    fsync_dir(tmp)
    _remove(root, number)  # the same number saved again (a resumed run re-saving its step): replace it whole
    os.rename(tmp, final)
    fsync_dir(root)
    write_latest(root, final.name, digest)
    kept = [n for n in numbers(root) if n <= number]
    for old in [n for n in numbers(root) if n > number] + (kept[:-keep] if keep > 0 else []):
        _remove(root, old)
    return final


def _remove(root: Path, number: int) -> None:
    for name in (f"ckpt-{number:06d}", f"step-{number:09d}"):
        shutil.rmtree(root / name, ignore_errors=True)


def write_latest(root: Path, name: str, digest: str) -> None:
    """Point ``root/LATEST`` at checkpoint ``name`` whose manifest has SHA-256 ``digest``, atomically."""
    _write_file(root / "LATEST.tmp", f"{name} {digest}\n".encode())
    os.replace(root / "LATEST.tmp", root / "LATEST")
    fsync_dir(root)


# ---------------------------------------------------------------------- reading
def read_latest(root: Path, hint: str = "") -> tuple[str, str]:
    """``(name, manifest digest)`` that ``root/LATEST`` holds; a missing or damaged one is refused."""
    try:
        data = (Path(root) / "LATEST").read_bytes()
    except OSError as exc:
        raise CheckpointError(f"no checkpoint at {root}: LATEST is missing ({exc}).{hint}") from exc
    m = _LATEST.match(data)
    if m is None:
        raise CheckpointError(
            f"{root}/LATEST is damaged: it holds {data[:80]!r}, not a checkpoint name and its manifest's "
            f"SHA-256.{hint}"
        )
    return m.group(1).decode(), m.group(2).decode()


def latest(root: Path) -> Path:
    """The checkpoint directory ``root`` is, or the one its ``LATEST`` names (checked to be the one it was
    written for). Old trainer step directories count as checkpoints."""
    root = Path(root)
    if _DIR.match(root.name) or _OLD_STEP.match(root.name):
        return root
    hint = _hint(root)
    name, digest = read_latest(root, hint)
    if _OLD_STEP.match(name):
        if read_latest(root / name / "trainer")[1] != digest:
            raise _moved(root, name, hint)
        return root / name
    if not _DIR.match(name):
        raise CheckpointError(f"{root}/LATEST names {name!r}, not a checkpoint.{hint}")
    if _manifest(root / name, hint)[1] != digest:
        raise _moved(root, name, hint)
    return root / name


def load(
    root: Path, kind: str | tuple[str, ...], number: int | None = None, only: tuple[str, ...] | None = None
) -> Checkpoint:
    """The verified checkpoint of ``kind`` under ``root``: ``number``, else the one ``LATEST`` names (or
    ``root`` itself when it is a checkpoint directory). ``only``: read just these arrays (each has its own
    checksum), e.g. a trainer's tensor state without the store beside it."""
    root = Path(root)
    kinds = (kind,) if isinstance(kind, str) else kind
    path = latest(root) if number is None else directory(root, number)  # latest: checked against LATEST
    if _OLD_STEP.match(path.name):
        return _old_step(path, kinds, only)
    hint = _hint(path.parent)
    manifest = _manifest(path, hint)[0]
    if not isinstance(manifest, dict) or not isinstance(manifest.get("arrays", {}), dict):
        raise CheckpointError(f"checkpoint {path}: the manifest is not a JSON object of arrays.{hint}")
    if (manifest.get("format"), manifest.get("format_version")) not in _READABLE:
        raise CheckpointError(
            f"checkpoint {path} is format {manifest.get('format')!r} v{manifest.get('format_version')!r}; "
            f"this streamgnn reads {FORMAT!r} v{FORMAT_VERSION} and 'streamgnn-store' v2: load it with the "
            "streamgnn that wrote it, or start a new checkpoint folder"
        )
    if manifest.get("kind") not in kinds:
        raise CheckpointError(
            f"{path} holds a {manifest.get('kind')!r} checkpoint, not a {' or '.join(kinds)}"
        )
    return Checkpoint(
        path, int(_DIR.match(path.name).group(1)), manifest, _arrays(path, manifest, hint, only)
    )


def _hint(root: Path) -> str:
    present = [directory(root, n).name for n in numbers(root)]
    return (
        f" Checkpoints present: {present}; load an older one by its number (version=N) or directory."
        if present
        else ""
    )


def _moved(root: Path, name: str, hint: str) -> CheckpointError:
    return CheckpointError(
        f"{root}/LATEST names {name} but was written for another checkpoint (or is altered); load a "
        f"checkpoint other than the latest by its number or directory.{hint}"
    )


def _manifest(d: Path, hint: str) -> tuple[dict, str]:
    """The manifest of checkpoint directory ``d`` and its digest, checked against ``manifest.sha256``."""
    try:
        data = (d / "manifest.json").read_bytes()
        recorded = (d / "manifest.sha256").read_bytes()
    except OSError as exc:
        raise CheckpointError(f"checkpoint {d} has no readable manifest ({exc}).{hint}") from exc
    digest = hashlib.sha256(data).hexdigest()
    if recorded != f"{digest}\n".encode():
        raise CheckpointError(f"checkpoint {d}: the manifest or its checksum is truncated or altered.{hint}")
    try:
        return json.loads(data), digest
    except ValueError as exc:  # only a writer's bug gets here: the bytes are the ones it checksummed
        raise CheckpointError(f"checkpoint {d} has no readable manifest ({exc}).{hint}") from exc


def _arrays(d: Path, manifest: dict, hint: str, only: tuple[str, ...] | None) -> dict[str, np.ndarray]:
    verified = {}
    for key, meta in manifest.get("arrays", {}).items():
        if only is not None and key not in only:
            continue
        try:
            data = (d / f"{key}.npy").read_bytes()
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
    return arrays


def _old_step(path: Path, kinds: tuple[str, ...], only: tuple[str, ...] | None) -> Checkpoint:
    """A trainer checkpoint in the layout before this container, ``step-N/{store,trainer}`` (two v2
    containers, the trainer's manifest holding the store manifest's digest), read into a new trainer
    checkpoint's shape: the trainer's values with the store's under ``store``, its arrays under ``store.``."""
    trainer = load(path / "trainer", "trainer", only=only)
    values = dict(trainer.manifest)
    kind = (
        "sharded-trainer"
        if "world_size" in values
        else ("snapshot-trainer" if "metrics" in values else "snapshot-stream")
        if "stream" in values
        else "trainer"
    )  # fmt: skip  (they all wrote "trainer"; what they hold tells them apart)
    if kind not in kinds:
        raise CheckpointError(f"{path} holds a {kind!r} checkpoint, not a {' or '.join(kinds)}")
    if read_latest(path / "store")[1] != values.get("store_manifest_sha256"):
        raise CheckpointError(f"{path}: the store is not the one the trainer state was saved with")
    store = load(
        path / "store", "store", only=None if only is None else tuple(unprefix("store", dict.fromkeys(only)))
    )
    values.update(kind=kind, store=store.manifest)
    return Checkpoint(path, int(_OLD_STEP.match(path.name).group(1)), values,
                      {**trainer.arrays, **prefixed("store", store.arrays)})  # fmt: skip


# ---------------------------------------------------------------------- tensors and RNG
def tensor_blob(state: dict) -> np.ndarray:
    """``state`` (tensors, lists, numbers) as one byte array for a container: ``torch.save``'s bytes."""
    buf = io.BytesIO()
    torch.save(state, buf)
    return np.frombuffer(buf.getvalue(), np.uint8)


def tensors(blob: np.ndarray, where: Path, map_location: torch.device | str = "cpu") -> dict:
    """``tensor_blob``'s state back, read with ``weights_only=True`` (no code runs from a checkpoint)."""
    try:
        return torch.load(io.BytesIO(blob.tobytes()), map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises a variety of unpickling errors for foreign content
        raise CheckpointError(f"{where}: the saved state does not load as plain tensors ({exc})") from exc


def capture_rng() -> dict:
    """Every RNG state a resumed run continues from: torch, CUDA when present, Python and numpy's global
    generators (the Mersenne Twister states are 624 words each: they belong in a tensor blob)."""
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


def rng_of(state: dict, values: dict) -> dict:
    """The RNG states a checkpoint holds: ``capture_rng``'s under ``rng``, or where checkpoints before it kept
    them (the online trainer's at the top of its state; the sharded and snapshot trainers' torch state there
    and Python's in the manifest, with no numpy state)."""
    if "rng" in state:
        return state["rng"]
    found = {k: state[k] for k in ("torch_rng", "python_rng", "numpy_rng", "cuda_rng") if k in state}
    return {"python_rng": values.get("python_rng"), **found}


def restore_rng(state: dict) -> None:
    """Set every RNG ``capture_rng`` captured (of an older checkpoint, those it holds)."""
    torch.set_rng_state(state["torch_rng"])
    if "cuda_rng" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    py = state["python_rng"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    if "numpy_rng" in state:
        nps = state["numpy_rng"]
        np.random.set_state((nps[0], np.asarray(nps[1], np.uint32), *nps[2:]))


__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "Checkpoint",
    "capture_rng",
    "directory",
    "latest",
    "load",
    "numbers",
    "prefixed",
    "read_latest",
    "restore_rng",
    "rng_of",
    "save",
    "tensor_blob",
    "tensors",
    "unprefix",
    "write_latest",
]
