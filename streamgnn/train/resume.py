"""Whether a run may continue from a trainer checkpoint: the same stream, the same kind of trainer, the same
model.

A stream trainer's checkpoint counts events of one stream (its ``position``) with one model, written by one
kind of trainer, so beside ``TrainerState``'s counters it records ``source`` (what ``*_identity`` below
gives: a Kafka topic; a file's path, size and SHA-256; a dataset's name and the SHA-256 of its files) and
``trainer`` (``trainer_kind``: one-process, replicated or sharded, and the world size). ``Expectation``
compares a checkpoint's manifest with the run about to resume from it, before any state is loaded:

- another model (any ``model.*`` setting) is refused, naming each setting that differs: the saved
  parameters have that shape;
- a sharded checkpoint in a run that is not (or the reverse, or another world size) is refused: a rank's
  state is its partitions';
- another source, or a one-process checkpoint in a replicated run (or the reverse, or another world size),
  is refused unless ``ResumeConfig.mismatch`` is "allow" (``streamgnn train --resume-anyway``): the
  replicas' state is the one process's, and a user may mean to go on learning from another stream;
- a file that grew since the checkpoint (its first bytes unchanged) is the same source;
- other settings that changed (``batch_size``, ``lr``, ...) are the run's to change: one line names them
  (a changed batch size cuts the rest of the stream into batches of the new size, so the run goes on but
  no longer repeats an uninterrupted one bit for bit);
- a checkpoint written before the source and trainer kind were recorded resumes with one line saying
  they could not be checked.

Every trainer resumes through one signature (``OnlineTrainer``, ``shard.ShardedTrainer`` and
``snapshots.SnapshotTrainer``)::

    Trainer.resume(checkpoint_dir, *, config=None, expect=None, **parts) -> Trainer

- ``checkpoint_dir``: the folder the run checkpointed into (its newest checkpoint is resumed), or one
  checkpoint in it; a sharded run's folder holds every rank's (None there: ``config.checkpoint_dir``, and
  a fresh trainer when it holds nothing yet);
- ``config``: the run's settings (default: the saved ones, checkpointing on into ``checkpoint_dir``); the
  model's shape must be the saved one's;
- ``expect``: what this run is (``Expectation``): a checkpoint that does not fit it is refused before its
  state is parsed, and the trainer's checkpoints record ``expect.source`` from then on;
- ``parts``: what the trainer's constructor takes besides its config (a sink, the distributed context, a
  model of another kind, a snapshot trainer's recurrent cell and target), keyword-only.

It returns the trainer; where its source resumes is the checkpoint's: a one-process trainer's store holds
the offsets (a ``KafkaSource`` built with ``store=trainer.store`` seeks to them), a sharded rank's are its
``start_offsets``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from .. import datasets
from ..configs import VERSION_KEY, to_dict
from ..datasets._formats import data_path
from ..errors import CheckpointError, ConfigError
from .config import TrainConfig

# Settings of a run, not of what it learned: not worth a line when they change on resume.
RUN_SETTINGS = {"checkpoint_dir", "checkpoint_every", "checkpoint_keep", "device", "serve_every",
                "publish_every"}  # fmt: skip
HASH_CHUNK = 1 << 20


@dataclass(frozen=True)
class ResumeConfig:
    """How ``streamgnn train`` resumes. ``checkpoint``: resume from this one checkpoint directory (e.g.
    ``out/ckpt/ckpt-000002``) rather than the newest in ``train.checkpoint_dir``; ``mismatch``: "refuse"
    (default) a checkpoint of another source or another kind of trainer, "allow" resume from it anyway."""

    checkpoint: str | None = None
    mismatch: Literal["refuse", "allow"] = "refuse"


# ---------------------------------------------------------------------- what a checkpoint records
def kafka_identity(topic: str, partitions: int | None = None) -> dict:
    """A Kafka topic and how many partitions it had (their offsets are in the store's ``source_offsets``).
    A topic only gains partitions: one with fewer than a checkpoint recorded was deleted and made again, and
    the checkpoint's offsets point into a log that is gone."""
    identity: dict = {"type": "kafka", "topic": topic}
    if partitions is not None:
        identity["partitions"] = int(partitions)
    return identity


def file_identity(path: str | Path) -> dict:
    """An events file: its absolute path, size and SHA-256 (read in chunks)."""
    path = Path(path)
    digest, size = _digest(path)
    return {"type": "file", "path": str(path.absolute()), "bytes": size, "sha256": digest}


def dataset_identity(name: str, **options) -> dict:
    """A shipped dataset: its name, the SHA-256 of its files and the options it is read with (the ones set,
    e.g. ``dedup``)."""
    h = hashlib.sha256()
    for filename in datasets.info(name).files:
        h.update(_digest(data_path(filename))[0].encode())
    return {
        "type": "dataset",
        "name": name,
        "sha256": h.hexdigest(),
        **{k: v for k, v in options.items() if v},
    }


def trainer_kind(sharded: bool, world_size: int) -> dict:
    kind = "sharded" if sharded else "replicated" if world_size > 1 else "one-process"
    return {"kind": kind, "world_size": int(world_size)}


def _digest(path: Path, limit: int | None = None) -> tuple[str, int]:
    """SHA-256 of the first ``limit`` bytes of ``path`` (None: all) and how many were read."""
    h, n = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while limit is None or n < limit:
            chunk = f.read(HASH_CHUNK if limit is None else min(HASH_CHUNK, limit - n))
            if not chunk:
                break
            h.update(chunk)
            n += len(chunk)
    return h.hexdigest(), n


def saved_kind(manifest: dict) -> dict | None:
    """The trainer kind a checkpoint records; a sharded one's written before it did, from its world size;
    None for a one-process or replicated one written before."""
    if isinstance(manifest.get("trainer"), dict):
        return manifest["trainer"]
    if manifest.get("kind") == "sharded-trainer" and "world_size" in manifest:
        return trainer_kind(True, manifest["world_size"])
    return None


def describe(source: dict) -> str:
    if source.get("type") == "kafka":
        parts = source.get("partitions")
        return f"Kafka topic {source.get('topic')!r}" + ("" if parts is None else f" ({parts} partitions)")
    if source.get("type") == "file":
        return (
            f"file {source.get('path')} ({source.get('bytes')} bytes, sha256 "
            f"{str(source.get('sha256'))[:12]})"
        )
    opts = "".join(f", {k}" for k in source if k not in ("type", "name", "sha256"))
    return f"dataset {source.get('name')}{opts} (sha256 {str(source.get('sha256'))[:12]})"


def _kind_text(kind: dict) -> str:
    if kind["kind"] == "one-process":
        return "one process"
    return f"a {kind['kind']} run of {kind['world_size']} ranks"


# ---------------------------------------------------------------------- the check
@dataclass
class Expectation:
    """What the run about to resume is: its ``source`` (None: unknown, not checked), trainer ``kind``,
    ``config``, and whether a mismatch is allowed. ``check`` refuses a checkpoint that does not fit, in one
    line; ``notes`` collects the lines a resume that goes on should print."""

    source: dict | None
    kind: dict
    config: TrainConfig
    allow: bool = False
    notes: list[str] = field(default_factory=list)

    def check(self, manifest: dict, where: Path) -> None:
        """Refuse (``CheckpointError``) or note what differs between checkpoint ``where`` and this run."""
        self._kind(saved_kind(manifest), where)
        self._model(manifest.get("config"), where)
        self._source(manifest.get("source"), where)
        recorded = {"source": manifest.get("source"), "trainer kind": saved_kind(manifest)}
        unrecorded = [what for what, value in recorded.items() if value is None]
        if unrecorded:
            self.notes.append(
                f"{where} records no {' and no '.join(unrecorded)} (written before checkpoints did): "
                "resuming without checking them"
            )

    def _refuse(self, where: Path, what: str, overridable: bool) -> None:
        if overridable and self.allow:
            self.notes.append(f"resuming anyway (resume.mismatch: allow): {what}")
            return
        how = (
            "resume anyway with --resume-anyway (resume.mismatch: allow) if that is meant, or give a new "
            "--checkpoint-dir to start over"
            if overridable
            else "give a new --checkpoint-dir to start over"
        )
        raise CheckpointError(f"{where} {what}: {how}")

    def _kind(self, saved: dict | None, where: Path) -> None:
        if saved is None or (saved.get("kind"), saved.get("world_size")) == (
            self.kind["kind"], self.kind["world_size"]
        ):  # fmt: skip
            return
        sharded = {saved.get("kind") == "sharded", self.kind["kind"] == "sharded"}
        what = f"was written by {_kind_text(saved)}; this run is {_kind_text(self.kind)}"
        if sharded == {True}:  # both sharded: another world size
            what = (
                f"was written by {saved.get('world_size')} ranks of a sharded run; this run has "
                f"{self.kind['world_size']} (a sharded run resumes with the world size that wrote it)"
            )
        self._refuse(where, what, overridable=sharded == {False})

    def _model(self, saved: dict | None, where: Path) -> None:
        """Refuse another model; note other settings that changed. Only the keys the checkpoint wrote are
        compared (checkpoints before ``configs.to_dict`` wrote every field left some out: unknown, not
        different; a model they do not fit is refused when its state loads)."""
        if not isinstance(saved, dict):
            return
        try:
            before = to_dict(TrainConfig.from_checkpoint(saved, f"{where}: config"))
        except ConfigError:  # a config this streamgnn cannot read: the load names it
            return
        now = to_dict(self.config)
        model = _differences(before, now, "", {"model": saved.get("model") or {}})
        if model:
            raise CheckpointError(
                f"{where} was trained with {', '.join(f'{k}={a}' for k, a, _ in model)}; this run sets "
                f"{', '.join(f'{k}={b}' for k, _, b in model)}: the model must match the checkpoint's to "
                "resume it (set those as the checkpoint has them, or give a new --checkpoint-dir to start "
                "over)"
            )
        skip = RUN_SETTINGS | {"model", "sharding", VERSION_KEY}
        others = {k: v for k, v in saved.items() if k not in skip}
        changed = _differences(before, now, "", others)
        if changed:
            text = ", ".join(f"{k} {a} -> {b}" for k, a, b in changed)
            batch = any(k == "batch_size" for k, _, _ in changed)
            self.notes.append(
                f"settings changed since {where.name}: {text}"
                + (" (the rest of the stream is learned in batches of the new size: the run goes on, but no "
                   "longer repeats an uninterrupted one bit for bit)" if batch else "")
            )  # fmt: skip

    def _source(self, saved: dict | None, where: Path) -> None:
        if saved is None or self.source is None or _same_source(saved, self.source):
            return
        self._refuse(
            where, f"was written from {describe(saved)}; this run reads {describe(self.source)}", True
        )


def _differences(a: dict, b: dict, prefix: str, keys: dict) -> list[tuple[str, object, object]]:
    """``(dotted key, a's value, b's value)`` for every leaf of ``keys`` (a dict of the same shape) whose
    value differs between dicts ``a`` and ``b``."""
    out = []
    for key in sorted(keys, key=str):
        x, y = a.get(key), b.get(key)
        if isinstance(x, dict) and isinstance(y, dict) and isinstance(keys[key], dict):
            out += _differences(x, y, f"{prefix}{key}.", keys[key])
        elif x != y:
            out.append((f"{prefix}{key}", x, y))
    return out


def _same_source(saved: dict, now: dict) -> bool:
    """Is ``now`` the stream ``saved`` names? A file is by content (moved or renamed, it is the same; grown,
    its first bytes unchanged, too); a dataset by name, files and options; a topic by name."""
    if saved.get("type") != now.get("type"):
        return False
    if now["type"] == "file":
        size = saved.get("bytes")
        if not isinstance(size, int) or size > now["bytes"]:
            return False
        if size == now["bytes"]:
            return saved.get("sha256") == now["sha256"]
        return _digest(Path(now["path"]), size) == (saved.get("sha256"), size)
    if now["type"] == "kafka":  # the same name, and no fewer partitions than recorded (a topic only gains)
        had, has = saved.get("partitions"), now.get("partitions")
        return saved.get("topic") == now["topic"] and (had is None or has is None or had <= has)
    return saved == now
