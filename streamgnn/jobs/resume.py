"""The training job's checks of a checkpoint folder before it trains: a folder is written by one kind of run
and only ever holds that run's checkpoints, so nothing a run did not resume from is replaced by its saves.

- A folder that is (or lies inside) one checkpoint is refused (``checkpoint.check_root``).
- A one-process or replicated run's folder holds ``ckpt-N`` and ``LATEST``; a sharded run's holds
  ``rank-RRRRR`` folders: a run of the other kind is refused.
- A run resuming from one named checkpoint (``ResumeConfig.checkpoint``) writes into its own folder only if
  no newer checkpoint is there, and into another folder only if that one holds none: its saves would
  replace them.

``source_identity`` is what the job reads, as checkpoints record it (``train.resume``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..checkpoint import check_root, is_checkpoint, newest_verified, numbers, resolve
from ..connectors.files import CsvSource, DatasetSource, JsonLinesSource
from ..errors import CheckpointError
from ..sources import SourceWrapper
from ..train.resume import dataset_identity, file_identity, kafka_identity

_RANK = re.compile(r"^rank-\d{5}$")


def _ranks(root: Path) -> list[str]:
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if _RANK.match(p.name) and p.is_dir())


def _flat(root: Path) -> list[str]:
    """The one-process layout's checkpoints (and its ``LATEST``) in ``root``."""
    latest = ["LATEST"] if os.path.lexists(root / "LATEST") else []
    return [f"ckpt-{n:06d}" for n in numbers(root)] + latest


def check_folder(root: Path, sharded: bool) -> None:
    """Refuse checkpoint folder ``root`` for a run that is (``sharded``) or is not sharded when it is one
    checkpoint or holds the other kind's checkpoints."""
    check_root(root)
    if not sharded and _ranks(root):
        raise CheckpointError(
            f"{root} holds a sharded run's checkpoints ({', '.join(_ranks(root)[:4])}); this run is not "
            "sharded: they resume only in a sharded run of the size that wrote them (train.sharding); give a "
            "new --checkpoint-dir to start over"
        )
    if sharded and _flat(root):
        raise CheckpointError(
            f"{root} holds a one-process or replicated run's checkpoints ({', '.join(_flat(root)[-4:])}); "
            "this run is sharded: they resume only in a run that is not; give a new --checkpoint-dir to "
            "start over"
        )


def check_branch(root: Path, named: Path) -> None:
    """Refuse to resume from checkpoint ``named`` into folder ``root`` when the run's saves would replace
    checkpoints it did not resume from: newer ones beside ``named``, or any in another folder."""
    number = int(named.name.split("-")[1])
    if root.resolve() == named.parent.resolve():
        newer = [f"ckpt-{n:06d}" for n in numbers(root) if n > number]
        if newer:
            raise CheckpointError(
                f"{root} holds {', '.join(newer)}, newer than {named.name}: resuming from {named.name} into "
                "that folder would replace them; checkpoint this run into a new folder (--checkpoint-dir)"
            )
        return
    held = _flat(root) + _ranks(root)
    if held:
        raise CheckpointError(
            f"{root} already holds checkpoints ({', '.join(held[-4:])}) that this run, resuming from "
            f"{named}, would replace: give an empty or new --checkpoint-dir"
        )


def choose(folder: str | Path | None, named: str | Path | None) -> tuple[Path | None, str]:
    """The checkpoint a one-process or replicated run resumes from, and a line to say about it (""): the one
    ``named`` (``ResumeConfig.checkpoint``), else the newest in checkpoint ``folder`` (``checkpoint.resolve``:
    ``LATEST``'s, or without one the newest that verifies), None to start afresh. Refused (in one line) when
    the folder is a checkpoint, holds a sharded run's, names no usable one, or when the run's saves would
    replace checkpoints it does not resume from."""
    root = Path(folder) if folder else None
    if root is not None:
        check_folder(root, sharded=False)
    if named is not None:
        named = Path(named)
        if not is_checkpoint(named):
            raise CheckpointError(
                f"resume.checkpoint {str(named)!r} is not a checkpoint (a ckpt-NNNNNN folder with its "
                "manifest.json): name one of a checkpoint folder's, e.g. out/ckpt/ckpt-000002"
            )
        if root is None:
            return named, "(no checkpoint folder given: this run writes no checkpoints)"
        check_branch(root, named)
        return named, ""
    if root is None or not _flat(root):
        return None, ""
    found = resolve(root)
    return _after(root, found.path, found.note)


def _after(root: Path, chosen: Path, note: str) -> tuple[Path, str]:
    """``chosen``, unless checkpoints numbered after it are there: only a run stopped between writing one
    and ``LATEST`` leaves them, and the saves of a run resumed before them would replace them. The newest
    of them that verifies is resumed from instead; one after that which does not verify is refused, not
    replaced."""
    newest, bad = newest_verified(root, after=int(chosen.name.split("-")[1]))
    if bad:
        at = newest or chosen
        raise CheckpointError(
            f"{root} holds {', '.join(reversed(bad))} after {at.name}, the newest checkpoint that verifies, "
            "which do not verify: this run's checkpoints would replace them; move them away, or resume from "
            f"{at} by name (--resume-from) into a new --checkpoint-dir"
        )
    if newest is not None:
        return newest, (
            f"{chosen.name} is {root}'s LATEST, but {newest.name} after it verifies (a run stopped between "
            f"writing it and LATEST): resuming from {newest.name}"
        )
    return chosen, note


def source_identity(source, topic: str | None, partitions: int | None = None) -> dict | None:
    """What a job reads, as its checkpoints record it: a Kafka topic, an events file (a ``CsvSource`` or
    ``JsonLinesSource``) or a dataset (``DatasetSource``), also wrapped (``SourceWrapper``, as a tally); None
    for any other source (not checked on resume)."""
    if topic is not None:
        return kafka_identity(topic, partitions)
    inner = source.source if isinstance(source, SourceWrapper) else source
    if isinstance(inner, CsvSource | JsonLinesSource) and Path(inner.path).is_file():
        return file_identity(inner.path)
    if isinstance(inner, DatasetSource):
        return dataset_identity(inner.name, dedup=inner.dedup, drop_self_loops=inner.drop_self_loops)
    return None
