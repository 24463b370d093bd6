"""SnapshotTrainer: any PyTorch Geometric Temporal recurrent layer, trained over snapshots or a live stream.

Three tasks share one loop: node ``regression`` (MSE), node ``classification`` (cross-entropy) and ``link``
prediction (binary cross-entropy of ``extra["link_index"]`` pairs; AUC, AP and MRR against the negatives).
The layer's output goes through ReLU into a linear head (regression, classification) or a two-layer MLP over
the pair's concatenated states (links), as in PGT's examples.

- The hidden state flows from snapshot to snapshot (``carry_state``); nodes that join get zero rows.
  Gradients flow back ``bptt`` snapshots (truncated backpropagation through time): the losses of a window
  are averaged into one optimizer step and the state is cut from the graph. ``bptt=None`` is one step per
  pass, PGT's examples' recipe.
- ``fit(signal)``: offline, a chronological split (``train_ratio``), ``epochs`` passes over the training
  part, then the test part scored with the state carried on from training; each pass runs through the
  online trainers' loop (``train.driver.Drive``), as ``fit_offline``'s phases do.
- ``run(snapshots)``: online test-then-train; each snapshot is scored by the model before it learns from it.
  The loop is the online trainers' (``train.driver.Drive``: progress, checkpoint cadence, ``max_snapshots``);
  a checkpoint only follows a snapshot that closes a window of ``bptt`` losses.
  ``run_live(source, store, spec, target)`` does that over a running source (``live_snapshots``) and
  checkpoints model, optimizer, hidden state, the snapshot stream's position and the store together;
  ``SnapshotTrainer.resume`` continues from the newest checkpoint, bit for bit.

Inputs may be our ``Snapshot``s or PyG ``Data`` as PGT's signals yield them (``x``, ``edge_index``,
``edge_attr``, ``y``), so PGT's own signals train the same way.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F

from ..checkpoint import as_arrays, as_tensors, load_rng_state, rng_state
from ..configs import Config, from_record, stamp
from ..errors import ConfigError
from ..progress import progress_bar
from ..sources import as_source
from ..train import checkpoint
from ..train.driver import Batches, Drive
from ..train.resume import Expectation
from .cells import RecurrentCell
from .metrics import SnapshotMetrics, SnapshotTrainResult, link_snapshot_metrics, plot_metrics
from .snapshot import Snapshot
from .spec import SnapshotSpec
from .stream import SnapshotStream, live_snapshots
from .targets import NextLinks, NodeTarget

Task = Literal["regression", "classification", "link"]  # checked by ``Config`` however built
KIND = "snapshot-trainer"  # what its checkpoints are, in the container's manifest


@dataclass(frozen=True)
class SnapshotTrainConfig(Config):
    task: Task = "regression"
    lr: float = 0.01
    epochs: int = 1
    bptt: int | None = None  # snapshots per optimizer step; None: one per pass (online: every snapshot)
    carry_state: bool = True
    train_ratio: float = 0.8
    outputs: int = 1  # regression: outputs per node; classification: the number of classes
    seed: int = 0
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0  # online: snapshots between checkpoints (0: none)
    checkpoint_keep: int = 2

    def __post_init__(self) -> None:
        if not self.lr > 0:
            raise ConfigError(f"lr must be > 0, got {self.lr!r}")
        for name in ("epochs", "outputs", "checkpoint_keep"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ConfigError(f"{name} must be an int >= 1, got {getattr(self, name)!r}")
        if self.bptt is not None and (not isinstance(self.bptt, int) or self.bptt < 1):
            raise ConfigError(f"bptt must be an int >= 1 or None, got {self.bptt!r}")
        if not 0.0 < self.train_ratio < 1.0:
            raise ConfigError(f"train_ratio must lie in (0, 1), got {self.train_ratio!r}")
        if not isinstance(self.checkpoint_every, int) or self.checkpoint_every < 0:
            raise ConfigError(f"checkpoint_every must be an int >= 0, got {self.checkpoint_every!r}")
        if self.checkpoint_every and not self.checkpoint_dir:
            raise ConfigError("checkpoint_every > 0 needs a checkpoint_dir")


class _Heads(torch.nn.Module):
    def __init__(self, task: str, hidden: int, outputs: int) -> None:
        super().__init__()
        if task == "link":
            self.head = torch.nn.Sequential(
                torch.nn.Linear(2 * hidden, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1)
            )
        else:
            self.head = torch.nn.Linear(hidden, outputs)


def _data(snap):
    return snap.to_pyg() if isinstance(snap, Snapshot) else snap


class SnapshotTrainer:
    """Trains ``cell`` (a PGT recurrent layer; its parameters as built, seeded by the caller) with heads
    made here from ``config.seed``."""

    def __init__(
        self, cell: torch.nn.Module, config: SnapshotTrainConfig, *, hidden: int | None = None
    ) -> None:
        self.config = config
        self.cell = RecurrentCell(cell, hidden)
        torch.manual_seed(config.seed)
        self.heads = _Heads(config.task, self.cell.hidden, config.outputs)
        self.model = torch.nn.ModuleDict({"cell": cell, "heads": self.heads})
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr)
        self.hidden = None  # the recurrent state carried from snapshot to snapshot
        self.position = 0  # snapshots consumed online (each is one step: ``steps``)
        self._window: list[torch.Tensor] = []  # losses of the open bptt window (online)
        self.metrics: list[SnapshotMetrics] = []
        self.stream: SnapshotStream | None = None
        self._source = None  # the live source, whose positions go into checkpoints

    # ------------------------------------------------------------------ one snapshot
    def _forward(self, data) -> tuple[torch.Tensor, torch.Tensor, SnapshotMetrics]:
        """Loss and scores of one snapshot, advancing the hidden state."""
        cfg = self.config
        if data.x is None:
            raise ConfigError(
                "snapshots without node features: cut them with degree_features=True or a NodeTarget"
            )
        if data.y is None:
            raise ConfigError(
                "a snapshot has no target: attach NodeTarget or NextLinks (or train on PGT signals)"
            )
        state = self.hidden if cfg.carry_state else None
        if not cfg.carry_state:
            self.cell.reset()
        h, self.hidden = self.cell(data.x.float(), data.edge_index, _weight(data), state)
        h = F.relu(h)
        t = float(getattr(data, "t", math.nan))
        head = self.heads.head
        if cfg.task == "link":
            pairs = data.link_index
            logits = head(torch.cat([h[pairs[0]], h[pairs[1]]], dim=1)).squeeze(-1)
            labels = data.y.float()
            loss = F.binary_cross_entropy_with_logits(logits, labels) if len(labels) else logits.sum() * 0
            return (
                loss,
                logits,
                link_snapshot_metrics(logits.detach().numpy(), labels.numpy(), t, float(loss.detach())),
            )
        out = head(h)
        if cfg.task == "classification":
            loss = F.cross_entropy(out, data.y.long())
            acc = float((out.argmax(-1) == data.y).float().mean())
            return loss, out, SnapshotMetrics(-1, t, "", float(loss.detach()), accuracy=acc)
        pred = out.squeeze(-1) if cfg.outputs == 1 else out
        loss = F.mse_loss(pred, data.y.float())
        value = float(loss.detach())
        return loss, pred, SnapshotMetrics(-1, t, "", value, mse=value)

    @property
    def steps(self) -> int:
        """Snapshots learned from online (checkpoints are numbered by it)."""
        return self.position

    def _record(self, m: SnapshotMetrics, index: int, phase: str) -> SnapshotMetrics:
        m = dataclasses.replace(m, index=index, phase=phase)
        self.metrics.append(m)
        return m

    def _learn(self, losses: list[torch.Tensor]) -> None:
        if losses:
            self.optimizer.zero_grad()
            torch.stack(losses).mean().backward()
            self.optimizer.step()
        self.hidden = self.cell.detach(self.hidden)

    # ------------------------------------------------------------------ offline
    def fit(self, snapshots, *, progress: bool = True) -> SnapshotTrainResult:
        """Chronological split of ``snapshots`` (a PGT signal or a sequence), ``epochs`` passes over the
        first ``train_ratio``, then the rest scored. Metrics: the last epoch's train snapshots and the test
        ones. Each pass runs through the online trainers' loop (``_pass``)."""
        cfg = self.config
        snaps = [_data(s) for s in snapshots]
        cut = int(cfg.train_ratio * len(snaps))  # as PGT's temporal_signal_split
        if not 0 < cut < len(snaps):
            raise ConfigError(
                f"{len(snaps)} snapshots leave nothing to train or to test at train_ratio={cfg.train_ratio}"
            )
        started = time.perf_counter()
        bar = progress_bar(iterable=range(cfg.epochs), unit="epoch", disable=not progress)
        for epoch in bar:
            self.hidden, self._window = None, []
            self.cell.reset()
            self.model.train()
            last = epoch == cfg.epochs - 1  # only the last epoch's train snapshots are recorded

            def train(i: int, data, last: bool = last) -> SnapshotMetrics:
                return self._step(data, (i, "train") if last else None, cfg.bptt)

            m = self._pass(snaps, range(cut), train)
            self._learn(self._window)
            self._window = []
            bar.set_postfix(loss=f"{m.loss:.4f}", refresh=False)
        self.model.eval()
        with torch.no_grad():
            self._pass(
                snaps, range(cut, len(snaps)), lambda i, data: self._record(self._forward(data)[2], i, "test")
            )
        return self._result(started)

    def _pass(self, snaps: list, indices: range, step) -> SnapshotMetrics:
        """``step(index, snapshot)`` over ``snaps[indices]`` in order, through the online trainers' loop
        (``train.driver.Drive``: no checkpoints, no bar of its own); its last metrics. An offline pass
        consumes nothing of a stream: ``position`` (snapshots consumed online) stays as it was."""
        stepped: list[SnapshotMetrics] = []
        drive = Drive(
            self, every=0, limit=None, progress=False, size=lambda _: 0, postfix=lambda: None,
            step=lambda item, _arrival: step(*item), on_step=lambda _item, m, _arrival: stepped.append(m),
        )  # fmt: skip
        drive.run((((i, snaps[i]), time.perf_counter(), True) for i in indices), lambda: None)
        return stepped[-1]

    # ------------------------------------------------------------------ online
    def run(
        self, snapshots: Iterable, *, progress: bool = True, max_snapshots: int | None = None
    ) -> SnapshotTrainResult:
        """Test-then-train over ``snapshots`` as they come (an iterator may be live), at most
        ``max_snapshots`` more. Checkpoints (live runs only) fall every ``checkpoint_every`` snapshots where
        a bptt window closes, and at the end of the stream."""
        cfg = self.config
        if cfg.checkpoint_every and self.stream is None:
            raise ConfigError(
                "checkpoints hold the snapshot stream's position: use run_live, or checkpoint_every=0"
            )
        self.model.train()
        drive = Drive(
            self, every=cfg.checkpoint_every, limit=max_snapshots, progress=progress, unit="snapshot",
            size=lambda _: 1, postfix=lambda: _postfix(self.metrics[-1]),
        )  # fmt: skip
        ended: list[bool] = []
        saved, _ = drive.run(self._online(snapshots, drive.room, ended), self.save_checkpoint)
        if ended and ended[0] and cfg.checkpoint_every:
            # the stream ended inside a window: it has learned from it (``_online``), so the end is kept too
            saved = self.save_checkpoint()
        return self._result(drive.started, saved)

    def step(self, snapshot, *, arrival: float | None = None) -> SnapshotMetrics:
        """Score ``snapshot``, record its metrics and add its loss to the open window, which learns once it
        holds ``bptt`` snapshots. (``arrival`` is the driver's; snapshots are not timed.)"""
        return self._step(_data(snapshot), (self.steps, "online"), self.config.bptt or 1)

    def _step(self, data, record: tuple[int, str] | None, window: int | None) -> SnapshotMetrics:
        """The step of ``step`` and of ``fit``'s training passes: score the snapshot, record its metrics as
        ``record`` (index, phase; None: not recorded) and add its loss to the open window, which learns once
        it holds ``window`` snapshots (None: only at the end of the pass)."""
        loss, _, m = self._forward(data)
        if record is not None:
            m = self._record(m, *record)
        self._window.append(loss)
        if window is not None and len(self._window) == window:
            self._learn(self._window)
            self._window = []
        return m

    def _online(self, snapshots: Iterable, room, ended: list[bool]) -> Batches:
        """``snapshots`` for ``Drive``, each with whether it closes a window; stops (without waiting for
        another) once ``room()`` is 0. At its end the open window learns; ``ended`` gets whether the stream
        itself ended inside a window."""
        bptt = self.config.bptt or 1
        for snap in snapshots:
            yield snap, time.perf_counter(), len(self._window) + 1 == bptt
            if room() == 0:
                break
        else:
            ended.append(bool(self._window))
        if self._window:
            self._learn(self._window)
            self._window = []

    def run_live(
        self,
        source,
        store=None,
        spec: SnapshotSpec | None = None,
        *,
        target: NodeTarget | NextLinks | None = None,
        lateness: float | None = None,
        idle_timeout_s: float | None = None,
        progress: bool = True,
        max_snapshots: int | None = None,
    ) -> SnapshotTrainResult:
        """``run`` over ``live_snapshots(source, store, spec, target)``; after ``resume``, only ``source``."""
        if self.stream is None:
            if store is None or spec is None:
                raise ConfigError(
                    "run_live needs a store and a spec (or a trainer from SnapshotTrainer.resume)"
                )
            self.stream = SnapshotStream(store, spec, target=target, lateness=lateness)
        self._source = source = as_source(source)
        snaps = live_snapshots(source, self.stream.store, stream=self.stream, idle_timeout_s=idle_timeout_s)
        return self.run(snaps, progress=progress, max_snapshots=max_snapshots)

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self) -> Path:
        """Checkpoint model, optimizer, hidden state, the snapshot stream and its store (with the source's
        positions) under ``config.checkpoint_dir``, numbered by the snapshots learned from."""
        cfg = self.config
        if not cfg.checkpoint_dir or self.stream is None:
            raise ConfigError("checkpoints need config.checkpoint_dir and a live run (run_live)")
        offsets = {} if self._source.replay else self._source.positions()  # a replay's: stream.consumed
        return checkpoint.save(
            Path(cfg.checkpoint_dir), self.steps, self.stream.store, offsets, *self.state(),
            cfg.checkpoint_keep, KIND,
        )  # fmt: skip

    def state(self) -> tuple[dict, dict]:
        """``(tensors, values)`` a resume continues from bit for bit (the store apart: the stream has it)."""
        arrays, values = self.stream.state()
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "hidden": None if self.hidden is None else list(self.hidden),
            "inner": self.cell.state(),
            "stream": as_tensors(arrays),
            "rng": rng_state(),
        }
        values = {"config": stamp(self.config.to_dict()), "steps": self.steps, "stream": values,
                  "metrics": [dataclasses.asdict(m) for m in self.metrics]}  # fmt: skip
        return state, values

    @classmethod
    def resume(
        cls,
        checkpoint_dir: str | Path,
        *,
        config: SnapshotTrainConfig | None = None,
        expect: Expectation | None = None,
        cell: torch.nn.Module,
        target: NodeTarget | NextLinks | None = None,
        hidden: int | None = None,
    ) -> SnapshotTrainer:
        """A trainer (with its store and snapshot stream) as the newest checkpoint under ``checkpoint_dir``
        left it, by the one resume signature (``train.resume``); ``cell`` is a layer of the same shape,
        ``target`` the one the run used. Continue with ``run_live(source)``: a file source is replayed and
        skips what was consumed; build a KafkaSource with ``store=trainer.stream.store`` so it seeks to the
        offsets the checkpoint holds."""
        ckpt = checkpoint.load(Path(checkpoint_dir), kind=KIND, expect=expect)
        man = ckpt.manifest
        config = config or dataclasses.replace(
            from_record(SnapshotTrainConfig, man["config"], f"{ckpt.path}: config", "snapshot_train"),
            checkpoint_dir=str(checkpoint_dir),
        )
        trainer = cls(cell, config, hidden=hidden)
        trainer.model.load_state_dict(ckpt.state["model"])
        trainer.optimizer.load_state_dict(ckpt.state["optimizer"])
        hidden_state = ckpt.state["hidden"]
        trainer.hidden = None if hidden_state is None else tuple(hidden_state)
        trainer.cell.load_state(ckpt.state["inner"])
        trainer.stream = SnapshotStream.from_state(
            ckpt.store, as_arrays(ckpt.state["stream"]), man["stream"], target=target, where=str(ckpt.path)
        )
        trainer.position = int(man["steps"])
        trainer.metrics = [SnapshotMetrics(**m) for m in man["metrics"]]
        load_rng_state(ckpt.rng)
        return trainer

    # ------------------------------------------------------------------ results
    def _result(self, started: float, saved: Path | None = None) -> SnapshotTrainResult:
        result = SnapshotTrainResult(list(self.metrics), time.perf_counter() - started, saved)
        for phase in ("train", "test", "online"):
            for name in ("loss", "mse", "accuracy", "auc", "ap", "mrr"):
                value = result.mean(name, phase)
                if not math.isnan(value):
                    result.summary[f"{phase}_{name}"] = value
        return result

    def plot(self, path: str | Path, title: str | None = None, baselines: dict | None = None) -> Path:
        """Loss and the task's metric per snapshot, with ``baselines`` (name: their ``SnapshotMetrics``) drawn
        beside them, as a PNG (``metrics.plot_metrics``)."""
        return plot_metrics(self.metrics, self.config.task, path, title, baselines)


def _weight(data) -> torch.Tensor | None:
    w = getattr(data, "edge_attr", None)
    return None if w is None else w.float()


def _postfix(m: SnapshotMetrics) -> dict[str, str]:
    shown = {"loss": m.loss, "mse": m.mse, "acc": m.accuracy, "auc": m.auc, "mrr": m.mrr}
    return {k: f"{v:.4f}" for k, v in shown.items() if not math.isnan(v)}
