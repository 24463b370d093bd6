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
purpose by its number, or by passing its directory. A folder whose ``LATEST`` is missing (deleted, or a
crash before the first one was written) resolves to the newest checkpoint in it that verifies, and says so
(``Resolved.note``); a ``LATEST`` that is there but unusable (a symlink, which the writer never makes, or
other content than the writer's) is refused, listing the checkpoints present. No file is read whole before
its size is checked: ``LATEST`` and ``manifest.sha256`` are a line, a manifest at most ``MANIFEST_LIMIT``
bytes, each array exactly the size its verified manifest records, and only regular files are read (a link
to ``/dev/zero`` or a pipe is refused before a byte is read).

A checkpoint is never written inside another one (``check_root``), and retention removes a checkpoint
folder that is a symlink by removing the link: its target, outside the folder, is left as it is.

Names: one vocabulary for saving and restoring state across the library (``docs/checkpoints.md``):

- ``state()`` gives a part's state as plain data (named numpy arrays, with JSON values as ``(arrays,
  values)`` where it has both; tensors where it travels in the tensor blob), never live objects;
- the classmethod ``from_state(state, ..., *parts)`` builds a new object from it, the parts the state does
  not hold (this run's settings, an ``Ownership``, a store, a target) given beside it;
- ``load_state(state)`` loads it in place, only into an object others hold by reference, where a new one
  would leave them reading the old (the reason is stated where it is defined: ``LinkModel``,
  ``shard.state.RankState``, ``GlobalIndex``, a snapshot cell, a labelled stream);
- torch modules, and what ``torch.save`` stores (an optimizer, running metrics, a ``LinkModel``'s checkpoint
  tensors), keep torch's ``state_dict``/``load_state_dict``;
- a file or folder is written with ``save`` and read with ``load(path)``; a trainer continues from a
  checkpoint folder with ``resume``; the process's RNGs: ``rng_state()``/``load_rng_state(state)``.

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
import stat
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
LINE_LIMIT = 256  # bytes of LATEST and manifest.sha256: a name and a digest
MANIFEST_LIMIT = 64 << 20  # a manifest holds values (configs, offsets, counts), the arrays are beside it


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


def write_atomic(path: Path, data: bytes) -> None:
    """One file whole or not at all, as a checkpoint's files are written: under a temporary name beside it,
    fsynced, renamed over ``path``, its folder fsynced. For the files a reader opens by name rather than
    through ``load`` (a snapshot signal's, a job's report)."""
    path = Path(path)
    tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}")
    _write_file(tmp, data)
    os.replace(tmp, path)
    fsync_dir(path.parent)


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


def is_checkpoint(path: Path) -> bool:
    """Is ``path`` one checkpoint (``ckpt-N`` with its manifest, or an old ``step-N`` with its trainer part),
    rather than a folder of them?"""
    path = Path(path)
    if _DIR.match(path.name):
        return (path / "manifest.json").exists()
    return bool(_OLD_STEP.match(path.name)) and (path / "trainer").is_dir()


def check_root(root: Path) -> None:
    """Refuse ``root`` as a folder to write checkpoints into when it is, or lies inside, one checkpoint: its
    ``LATEST`` and new checkpoints would land inside an old checkpoint, where nothing reads them."""
    root = Path(root)
    for d in (root, *root.absolute().parents):
        if is_checkpoint(d):
            inside = "is" if d == root else "lies inside"
            raise CheckpointError(
                f"{root} {inside} checkpoint {d.name} of {d.parent}: checkpoints are written into a folder "
                "of them, never into one; to continue from it, resume from it by name "
                f"(streamgnn train --resume-from {d}) and checkpoint into a new folder"
            )


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
    check_root(root)
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
    """Remove checkpoint ``number`` under ``root``. One that is a symlink (a checkpoint moved to other
    storage by hand) goes as a link: its target, outside this folder, is not the writer's to delete."""
    for name in (f"ckpt-{number:06d}", f"step-{number:09d}"):
        path = root / name
        if path.is_symlink():
            path.unlink()
        else:
            shutil.rmtree(path, ignore_errors=True)


def write_latest(root: Path, name: str, digest: str) -> None:
    """Point ``root/LATEST`` at checkpoint ``name`` whose manifest has SHA-256 ``digest``, atomically."""
    _write_file(root / "LATEST.tmp", f"{name} {digest}\n".encode())
    os.replace(root / "LATEST.tmp", root / "LATEST")
    fsync_dir(root)


# ---------------------------------------------------------------------- reading
class _Unreadable(Exception):
    """A checkpoint file refused before its bytes are read; the message says why."""


def _read(path: Path, limit: int, *, follow: bool = True) -> bytes:
    """The bytes of regular file ``path``, at most ``limit`` of them: a file that is not a regular one (a
    device such as ``/dev/zero``, a pipe, a folder) or is larger is refused before it is read, and no more
    than ``limit + 1`` bytes are ever read (a file growing meanwhile is refused too). ``follow=False``
    refuses a symlink. Missing files raise ``OSError``."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | (0 if follow else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if not follow and os.path.islink(path):
            raise _Unreadable(
                f"is a symlink (to {os.readlink(path)!r}), which streamgnn never writes"
            ) from None
        raise exc from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _Unreadable("is not a regular file (a device, a pipe or a folder)")
        if st.st_size > limit:
            raise _Unreadable(f"holds {st.st_size:,} bytes, more than the {limit:,} expected")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise _Unreadable(f"holds more than the {limit:,} bytes expected")
    return data


def read_latest(root: Path, hint: str = "") -> tuple[str, str]:
    """``(name, manifest digest)`` that ``root/LATEST`` holds; a missing or damaged one is refused."""
    try:
        data = _read(Path(root) / "LATEST", LINE_LIMIT, follow=False)
    except _Unreadable as exc:
        raise CheckpointError(f"{root}/LATEST is damaged: it {exc}.{hint}") from None
    except OSError as exc:
        raise CheckpointError(f"no checkpoint at {root}: LATEST is missing ({exc.strerror}).{hint}") from None
    m = _LATEST.match(data)
    if m is None:
        raise CheckpointError(
            f"{root}/LATEST is damaged: it holds {data[:80]!r}, not a checkpoint name and its manifest's "
            f"SHA-256.{hint}"
        )
    return m.group(1).decode(), m.group(2).decode()


@dataclass(frozen=True)
class Resolved:
    """The checkpoint a folder resolves to, and ``note``: why it is not the one ``LATEST`` names ("": it
    is, or the folder was a checkpoint itself)."""

    path: Path
    note: str = ""


def resolve(root: Path) -> Resolved:
    """The checkpoint directory ``root`` is, or the one its ``LATEST`` names (checked to be the one it was
    written for); without a ``LATEST``, the newest checkpoint in ``root`` that verifies (none: refused,
    naming what is there). Old trainer step directories count as checkpoints."""
    root = Path(root)
    if _DIR.match(root.name) or _OLD_STEP.match(root.name):
        return Resolved(root)
    hint = _hint(root)
    if not os.path.lexists(root / "LATEST"):
        return _newest_verified(root, hint)
    name, digest = read_latest(root, hint)
    if _OLD_STEP.match(name):
        if read_latest(root / name / "trainer")[1] != digest:
            raise _moved(root, name, hint)
        return Resolved(root / name)
    if not _DIR.match(name):
        raise CheckpointError(f"{root}/LATEST names {name!r}, not a checkpoint.{hint}")
    if _manifest(root / name, hint)[1] != digest:
        raise _moved(root, name, hint)
    return Resolved(root / name)


def latest(root: Path) -> Path:
    """``resolve(root)``'s checkpoint directory."""
    return resolve(root).path


def newest_verified(root: Path, after: int = -1) -> tuple[Path | None, list[str]]:
    """The newest checkpoint under ``root`` numbered after ``after`` whose every byte verifies (None if
    none), and the names of those newer than it that do not verify, newest first."""
    failed = []
    for number in reversed([n for n in numbers(root) if n > after]):
        path = directory(root, number)
        try:
            verify(path)
        except CheckpointError:
            failed.append(path.name)
            continue
        return path, failed
    return None, failed


def _newest_verified(root: Path, hint: str) -> Resolved:
    """The newest checkpoint under ``root`` whose every byte verifies (a folder without ``LATEST``)."""
    path, failed = newest_verified(root)
    if path is not None:
        skipped = f"; {', '.join(failed)} do not verify" if failed else ""
        return Resolved(path, f"{root}/LATEST is missing: the newest checkpoint that verifies is {path.name}"
                              f"{skipped}")  # fmt: skip
    none = f", and none of {failed} verifies" if failed else ""
    raise CheckpointError(f"no checkpoint at {root}: LATEST is missing{none}.{hint}")


def verify(path: Path) -> dict:
    """Check every byte of checkpoint directory ``path`` (its manifest, then each array against it) without
    keeping the arrays; returns its manifest."""
    if _OLD_STEP.match(path.name):
        return load(path, ("trainer", "sharded-trainer", "snapshot-trainer", "snapshot-stream")).manifest
    hint = _hint(path.parent)
    manifest = _checked_manifest(path, ("*",), hint)
    for key, meta in manifest.get("arrays", {}).items():
        _array_bytes(path, key, meta, hint)
    return manifest


def manifest(path: Path) -> dict:
    """The verified manifest of checkpoint directory ``path`` (its arrays not read)."""
    if _OLD_STEP.match(Path(path).name):
        return verify(Path(path))
    return _checked_manifest(Path(path), ("*",), _hint(Path(path).parent))


def load(
    root: Path, kind: str | tuple[str, ...], number: int | None = None, only: tuple[str, ...] | None = None
) -> Checkpoint:
    """The verified checkpoint of ``kind`` under ``root``: ``number``, else the one ``resolve`` gives
    (``LATEST``'s, or ``root`` itself when it is a checkpoint directory). ``only``: read just these arrays
    (each has its own checksum), e.g. a trainer's tensor state without the store beside it."""
    root = Path(root)
    kinds = (kind,) if isinstance(kind, str) else kind
    path = latest(root) if number is None else directory(root, number)  # latest: checked against LATEST
    if _OLD_STEP.match(path.name):
        return _old_step(path, kinds, only)
    hint = _hint(path.parent)
    manifest = _checked_manifest(path, kinds, hint)
    return Checkpoint(
        path, int(_DIR.match(path.name).group(1)), manifest, _arrays(path, manifest, hint, only)
    )


def _checked_manifest(path: Path, kinds: tuple[str, ...], hint: str) -> dict:
    """The manifest of ``path``, verified, of a readable format and one of ``kinds`` ("*": any)."""
    manifest = _manifest(path, hint)[0]
    if not isinstance(manifest, dict) or not isinstance(manifest.get("arrays", {}), dict):
        raise CheckpointError(f"checkpoint {path}: the manifest is not a JSON object of arrays.{hint}")
    if (manifest.get("format"), manifest.get("format_version")) not in _READABLE:
        raise CheckpointError(
            f"checkpoint {path} is format {manifest.get('format')!r} v{manifest.get('format_version')!r}; "
            f"this streamgnn reads {FORMAT!r} v{FORMAT_VERSION} and 'streamgnn-store' v2: load it with the "
            "streamgnn that wrote it, or start a new checkpoint folder"
        )
    if "*" not in kinds and manifest.get("kind") not in kinds:
        raise CheckpointError(
            f"{path} holds a {manifest.get('kind')!r} checkpoint, not a {' or '.join(kinds)}"
        )
    return manifest


def _hint(root: Path) -> str:
    present = [directory(root, n).name for n in numbers(root)]
    return (
        f" Checkpoints present: {present}; resume from an older one by its directory (streamgnn train "
        f"--resume-from {root}/NAME) or load it by its number (version=N)."
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
        recorded = _read(d / "manifest.sha256", LINE_LIMIT)
        data = _read(d / "manifest.json", MANIFEST_LIMIT)
    except _Unreadable as exc:
        raise CheckpointError(f"checkpoint {d}: a manifest file {exc}.{hint}") from None
    except OSError as exc:
        raise CheckpointError(f"checkpoint {d} has no readable manifest ({exc}).{hint}") from None
    digest = hashlib.sha256(data).hexdigest()
    if recorded != f"{digest}\n".encode():
        raise CheckpointError(f"checkpoint {d}: the manifest or its checksum is truncated or altered.{hint}")
    try:
        return json.loads(data), digest
    except ValueError as exc:  # only a writer's bug gets here: the bytes are the ones it checksummed
        raise CheckpointError(f"checkpoint {d} has no readable manifest ({exc}).{hint}") from exc


def _array_bytes(d: Path, key: str, meta, hint: str) -> bytes:
    """The bytes of array ``key`` of ``d``, read only up to the size its (verified) manifest records and
    checked against its SHA-256."""
    meta = meta if isinstance(meta, dict) else {}
    size = meta.get("bytes")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise CheckpointError(f"checkpoint {d}: the manifest gives array {key!r} no size.{hint}")
    try:
        data = _read(d / f"{key}.npy", size)
    except _Unreadable as exc:
        raise CheckpointError(
            f"checkpoint {d}: array {key!r} {exc} (its manifest says {size:,}).{hint}"
        ) from None
    except OSError as exc:
        raise CheckpointError(f"checkpoint {d} lacks array {key!r} ({exc}).{hint}") from None
    if len(data) != size or hashlib.sha256(data).hexdigest() != meta.get("sha256"):
        raise CheckpointError(
            f"checkpoint {d}: array {key!r} is truncated or altered (size {len(data)} vs "
            f"{size}, checksum mismatch).{hint}"
        )
    return data


def _arrays(d: Path, manifest: dict, hint: str, only: tuple[str, ...] | None) -> dict[str, np.ndarray]:
    verified = {
        key: _array_bytes(d, key, meta, hint)
        for key, meta in manifest.get("arrays", {}).items()
        if only is None or key in only
    }
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


def as_tensors(arrays: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """``state()``'s arrays as tensors, to travel in a ``tensor_blob``; ``as_arrays`` turns them back."""
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}


def as_arrays(tensors: dict) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in tensors.items()}


def tensors(blob: np.ndarray, where: Path, map_location: torch.device | str = "cpu") -> dict:
    """``tensor_blob``'s state back, read with ``weights_only=True`` (no code runs from a checkpoint)."""
    try:
        return torch.load(io.BytesIO(blob.tobytes()), map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises a variety of unpickling errors for foreign content
        raise CheckpointError(f"{where}: the saved state does not load as plain tensors ({exc})") from exc


def rng_state() -> dict:
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
    """The RNG states a checkpoint holds: ``rng_state``'s under ``rng``, or where checkpoints before it kept
    them (the online trainer's at the top of its state; the sharded and snapshot trainers' torch state there
    and Python's in the manifest, with no numpy state)."""
    if "rng" in state:
        return state["rng"]
    found = {k: state[k] for k in ("torch_rng", "python_rng", "numpy_rng", "cuda_rng") if k in state}
    return {"python_rng": values.get("python_rng"), **found}


def load_rng_state(state: dict) -> None:
    """Set every RNG ``rng_state`` captured (of an older checkpoint, those it holds)."""
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
    "as_arrays",
    "as_tensors",
    "Checkpoint",
    "directory",
    "latest",
    "load",
    "numbers",
    "prefixed",
    "read_latest",
    "resolve",
    "rng_state",
    "Resolved",
    "check_root",
    "is_checkpoint",
    "manifest",
    "verify",
    "load_rng_state",
    "rng_of",
    "save",
    "tensor_blob",
    "tensors",
    "unprefix",
    "write_latest",
]
