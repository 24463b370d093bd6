"""Trainer checkpoints: everything a resumed run needs to continue bit for bit, as one container.

A trainer checkpoint is one ``streamgnn.checkpoint`` container numbered by the step it was cut at
(``ROOT/ckpt-NNNNNN`` and ``ROOT/LATEST``), atomic and verified like every other. It holds the store's
``state()`` (arrays under ``store.``, values under ``store``, the source offsets among them), the trainer's
values (``TrainerState``, the schema the online and sharded trainers share, plus what one of them adds) and
one ``state`` array: the ``torch.save`` bytes of model, optimizer, metrics, RNG states (``rng_state``) and
whatever else the trainer carries, read back with ``weights_only=True``.

Resume an older step on purpose by passing its directory: ``OnlineTrainer.resume(root / "ckpt-000100")``.
Checkpoints in the layout before this container (``step-N/{store,trainer}``) load the same way.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from .. import checkpoint
from ..configs import stamp
from ..errors import CheckpointError
from ..store import TemporalGraphStore
from .resume import Expectation, trainer_kind


@dataclass(frozen=True)
class TrainerState:
    """The values every stream trainer checkpoints the same way (the online and the sharded one): its config,
    global batches done, events consumed (``position``: a resumed replay skips them), events learned from,
    and dead letters counted so far; and what they count (``train.resume``): ``source``, the stream read (the
    trainer's ``source_identity``, None when the caller gave none) and ``trainer``, its kind and world size.
    Beside them the tensor state holds ``model``, ``optimizer``, ``metrics`` and ``rng`` under those names in
    both."""

    config: dict
    steps: int
    position: int
    learned: int
    dead_letters: int
    source: dict | None = None
    trainer: dict | None = None

    @classmethod
    def of(cls, trainer) -> TrainerState:
        kind = trainer_kind(hasattr(trainer, "shard_config"), trainer.dist.world_size)  # a sharded one has it
        return cls(stamp(trainer.config.to_dict()), trainer.steps, trainer.position, trainer.learned,
                   trainer.dead_letter_count, getattr(trainer, "source_identity", None), kind)  # fmt: skip

    @classmethod
    def from_values(cls, values: dict) -> TrainerState:
        return cls(values["config"], int(values["steps"]), int(values["position"]), int(values["learned"]),
                   int(values["dead_letters"]), values.get("source"), values.get("trainer"))  # fmt: skip

    def values(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    def apply(self, trainer) -> None:
        """Set the trainer's counters to these (its config is the caller's choice), and its source to the
        checkpoint's unless the caller named the one it reads now."""
        trainer.steps, trainer.position = self.steps, self.position
        trainer.learned, trainer.dead_letter_count = self.learned, self.dead_letters
        if trainer.source_identity is None:
            trainer.source_identity = self.source


def stream_tensors(trainer) -> dict:
    """The tensor state every stream trainer saves alike: its ``LinkModel``'s (``model``, ``optimizer`` for
    TGN), ``metrics``, ``rng``, and each baseline's metrics and state."""
    state = {
        **trainer.link_model.state_dict(),
        "metrics": trainer.metrics.state_dict(),
        "rng": checkpoint.rng_state(),
    }
    if trainer.baselines:
        state["baseline_metrics"] = {n: r.state_dict() for n, r in trainer.baseline_metrics.items()}
        state["baselines"] = {n: b.state_dict() for n, b in trainer.baselines.items()}
    return state


def load_stream_tensors(trainer, state: dict) -> None:
    """``stream_tensors`` back into ``trainer`` (its models attached to the restored store first: a
    baseline's state completes what ``attach`` rebuilds); the RNG apart, which the caller restores last. A
    state of another model (a setting its config did not record) is refused in one line."""
    try:
        trainer.link_model.load_state_dict(state)
    except (RuntimeError, KeyError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"the checkpoint's model does not fit this run's (another shape or kind of model: resume with "
            f"the model settings it was trained with): {first}"
        ) from None
    trainer.metrics.load_state_dict(state["metrics"])
    for name, saved in state.get("baseline_metrics", {}).items():
        if name in trainer.baseline_metrics:
            trainer.baseline_metrics[name].load_state_dict(saved)
    for name, saved in state.get("baselines", {}).items():
        if name in trainer.baselines:
            trainer.baselines[name].load_state_dict(saved)


@dataclass(frozen=True)
class TrainerCheckpoint:
    """A loaded checkpoint: ``manifest`` (JSON values), ``state`` (tensors), the store, and where it was."""

    path: Path
    manifest: dict
    state: dict
    store: TemporalGraphStore

    @property
    def rng(self) -> dict:
        """The RNG states to ``load_rng_state`` (also of a checkpoint written before they were kept
        together)."""
        return checkpoint.rng_of(self.state, self.manifest)


def step_dirs(root: Path) -> list[Path]:
    """Complete checkpoints under ``root``, oldest first."""
    return [checkpoint.directory(root, n) for n in checkpoint.numbers(root)]


def save(
    root: Path,
    step: int,
    store: TemporalGraphStore,
    source_offsets: dict[str, int],
    state: dict,
    values: dict,
    keep: int,
    kind: str = "trainer",
) -> Path:
    """Write checkpoint ``step`` of ``kind`` under ``root``: ``store`` (with ``source_offsets``), the tensor
    ``state`` and JSON ``values``; point ``LATEST`` at it and keep the newest ``keep``."""
    store.source_offsets = dict(source_offsets)
    arrays, store_values = store.state()
    arrays = {**checkpoint.prefixed("store", arrays), "state": checkpoint.tensor_blob(state)}
    return checkpoint.save(
        Path(root), kind, arrays, {**values, "store": store_values}, number=step, keep=keep
    )


def load(
    root: Path,
    map_location: torch.device | str = "cpu",
    kind: str = "trainer",
    expect: Expectation | None = None,
) -> TrainerCheckpoint:
    """The checkpoint of ``kind`` that ``LATEST`` names under ``root`` (or ``root`` itself if it is one);
    with ``expect``, refused before its state is parsed unless it fits the run (``train.resume``)."""
    ckpt = checkpoint.load(Path(root), kind)
    if expect is not None:
        expect.check(ckpt.manifest, ckpt.path)
    if "state" not in ckpt.arrays or not isinstance(ckpt.manifest.get("store"), dict):
        raise CheckpointError(f"{ckpt.path} is not a trainer checkpoint: it has no tensor state or store")
    store = TemporalGraphStore.from_state(ckpt.part("store"), ckpt.manifest["store"], str(ckpt.path))
    state = checkpoint.tensors(ckpt.arrays["state"], ckpt.path, map_location)  # parsed last
    return TrainerCheckpoint(ckpt.path, ckpt.manifest, state, store)


def load_tensors(
    root: Path, map_location: torch.device | str = "cpu", kind: str | tuple[str, ...] = "trainer"
) -> tuple[Path, dict, dict]:
    """``(checkpoint directory, manifest, state)`` of the checkpoint of ``kind`` (or kinds) ``load``
    would read, without rebuilding its store (e.g. the link predictor's weights for a service that holds
    only embeddings; a sharded rank's labelled task)."""
    ckpt = checkpoint.load(Path(root), kind, only=("state",))
    if "state" not in ckpt.arrays:
        raise CheckpointError(f"{ckpt.path} is not a trainer checkpoint: it has no tensor state")
    return ckpt.path, ckpt.manifest, checkpoint.tensors(ckpt.arrays["state"], ckpt.path, map_location)


def step_path(root: Path) -> Path:
    """The checkpoint directory ``root`` is, or the one its ``LATEST`` names (checked to be the one it was
    written for)."""
    return checkpoint.latest(Path(root))
