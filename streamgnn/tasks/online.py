"""A task's head learned online, as labels arrive: predicted first, learned from after (prequential).

Each label is scored by the head as it is before the label is seen (``observe`` records the score, and
the prior's: the share of each class, or the mean value or distribution, of the labels known before it),
then, once it is known (at once, or ``reveal`` later: ``task.horizon``) and when the job learns on that
batch (its budget, ``train.follow``), the head takes ``steps`` Adam steps, each on the new
labels and ``replay_batch`` earlier ones drawn from a replay of the last ``replay`` (a ring per class, so a
rare class stays in it), every class weighing the same in each step's loss. Inputs are standardised by
the running mean and spread of every input learned from so far, so the head sees embeddings on one scale
however their norm drifts as the link model learns.

The head is the task's (``Task.head``): ``head.StagedHead``, a logistic regression on the stream features,
then MLPs that add to it (node affinity: ``affinity.AffinityHead``, a class map shared by all classes first).
Online, every stage learns at once, each on what the stages before it leave (their gradients stopped), and
the head answers with the stage whose recent prequential loss (scored before it learned, every class
weighing the same, about the last ``window`` labels of each class) is lowest: a stage that has not yet
learned enough to help, or never will, is not asked.

Everything is in ``state()`` (weights, optimizer, normaliser, replay, its random draws, every prediction
so far) and ``from_state`` builds it back exactly: a resumed job predicts and learns as the run it
continues would have. The embeddings service builds its ``/predict`` head from the same state.
"""

from __future__ import annotations

import json

import numpy as np
import torch

from ..configs import from_record, stamp
from ..errors import CheckpointError, ConfigError
from .config import TaskConfig
from .task import Classification

RECORDS = ("t", "y", "score", "prior")


class OnlineHead:
    """``task``'s head over ``in_dim`` inputs, learned online (module docstring)."""

    def __init__(self, config: TaskConfig, in_dim: int, seed: int = 0, features: int = 0) -> None:
        self.config, self.in_dim, self.task = config, int(in_dim), config.task()
        self.features = int(features)
        with torch.random.fork_rng(devices=[]):  # the job's own random draws are left as they were
            torch.manual_seed(seed)
            self.head = self.task.head(self.in_dim, self.features, config.hidden, 0.0)
        self.optimizer = torch.optim.Adam(self.head.parameters(), lr=config.lr)
        self.count, self.mean, self.m2 = 0, np.zeros(self.in_dim), np.zeros(self.in_dim)
        rings = self.task.classes if isinstance(self.task, Classification) else 1
        self.ring = config.replay // rings  # slots per class (values: one ring)
        self.replay_x = np.zeros((self.ring * rings, self.in_dim), np.float32)
        self.replay_y = np.zeros((self.ring * rings, *self.task.label_shape), np.float64)
        self.replayed = np.zeros(rings, np.int64)  # labels ever pushed into each ring
        # each stage's recent prequential loss per class (decayed sums) and the decayed label counts
        self.stage_loss = np.zeros((len(self.head.stages), rings))
        self.stage_seen = np.zeros(rings)
        self.rng = np.random.default_rng(seed)
        self.steps = 0
        self.records: dict[str, list[np.ndarray]] = {name: [] for name in RECORDS}
        # what the prior has seen: labels per class, or the values' (distributions') sum and their number
        width = int(np.prod(self.task.label_shape, dtype=np.int64))
        self._counts = np.zeros(self.task.classes if isinstance(self.task, Classification) else width + 1)

    @property
    def seen(self) -> int:
        """Labels scored so far."""
        return sum(len(part) for part in self.records["y"])

    # ------------------------------------------------------------------ predicting and learning
    def predict(self, x: np.ndarray) -> np.ndarray:
        """``Task.predict`` of the head now: P(class 1) ``[n]``, class probabilities ``[n, C]`` or values."""
        self.head.eval()
        with torch.no_grad():
            return self.task.predict(self.head(self._standardised(x)))

    def observe(
        self, x: np.ndarray, y: np.ndarray, t: np.ndarray, *, learn: bool, known: bool = True
    ) -> np.ndarray:
        """Score the labels ``y`` at times ``t`` from inputs ``x``, record the scores and the prior's, then,
        when ``known`` (else the caller ``reveal``s them once they are), take them in; returns the scores."""
        x = np.asarray(x, np.float32)
        scores = self.predict(x)
        self._record(t, y, scores)
        if known:
            self.reveal(x, y, learn=learn)
        return scores

    def reveal(self, x: np.ndarray, y: np.ndarray, *, learn: bool) -> None:
        """Take in labels scored earlier (``observe``) now that they are known: the prior counts them, each
        stage's recent loss judges them, and the head learns from them when ``learn``."""
        if not len(y):
            return
        x = np.asarray(x, np.float32)
        if isinstance(self.task, Classification):
            self._counts += np.bincount(np.asarray(y, np.int64), minlength=self.task.classes)
        else:
            rows = np.asarray(y, np.float64).reshape(len(y), -1)
            self._counts += np.r_[rows.sum(axis=0), len(y)]
        self._judge(x, y)
        if learn:
            self._learn(x, y)

    def _record(self, t: np.ndarray, y: np.ndarray, scores: np.ndarray) -> None:
        n = len(y)
        if isinstance(self.task, Classification):
            share = (self._counts + 1.0) / (self._counts.sum() + self.task.classes)  # Laplace: none yet
            prior = np.full(n, share[1]) if self.task.binary else np.tile(share, (n, 1))
        else:  # the mean value (distribution) known so far, 0 before any
            mean = (
                self._counts[:-1] / self._counts[-1] if self._counts[-1] else np.zeros(len(self._counts) - 1)
            )
            prior = np.tile(mean, (n, 1)).reshape(n, *self.task.label_shape)
        for name, value in zip(RECORDS, (t, y, scores, prior), strict=True):
            self.records[name].append(np.asarray(value))

    def _rings(self, y: np.ndarray) -> np.ndarray:
        """Each label's replay ring (and prequential-loss column): its class, or 0 for values."""
        return (
            np.asarray(y, np.int64) if isinstance(self.task, Classification) else np.zeros(len(y), np.int64)
        )

    def _judge(self, x: np.ndarray, y: np.ndarray) -> None:
        """Fold each stage's loss on these labels, scored before learning from them, into its recent
        prequential loss; answer from now on with the stage whose loss is lowest (module docstring)."""
        self.head.eval()
        with torch.no_grad():
            parts = self.head.parts(self._standardised(x))
            target = self.task.target(np.asarray(y))
            each = torch.stack([self.task.losses(out, target) for out in parts]).double().numpy()
        ring = self._rings(y)
        n = np.bincount(ring, minlength=len(self.stage_seen))
        decay = (1.0 - 1.0 / self.config.window) ** n
        sums = np.stack([np.bincount(ring, weights=row, minlength=len(n)) for row in each])
        self.stage_loss = self.stage_loss * decay + sums
        self.stage_seen = self.stage_seen * decay + n
        seen = self.stage_seen > 0
        recent = (self.stage_loss[:, seen] / self.stage_seen[seen]).mean(axis=1)
        self.head.stage = int(np.argmin(recent)) + 1  # ties: the earlier, simpler stage

    def _learn(self, x: np.ndarray, y: np.ndarray) -> None:
        self._normalise(x)
        dtype = np.asarray(y).dtype
        filled = np.concatenate([
            c * self.ring + np.arange(min(int(k), self.ring)) for c, k in enumerate(self.replayed)
        ]).astype(np.int64)  # fmt: skip
        self.head.train()
        for _ in range(self.config.steps):
            rows = self.rng.choice(filled, size=min(len(filled), self.config.replay_batch), replace=False)
            inputs = self._standardised(np.concatenate([x, self.replay_x[rows]]))
            targets = np.concatenate([np.asarray(y, np.float64), self.replay_y[rows]]).astype(dtype)
            weight = self.task.balance(targets)
            self.optimizer.zero_grad()
            target = self.task.target(targets)
            w = None if weight is None else torch.as_tensor(weight, dtype=torch.float32)
            loss = sum(self.task.loss(out, target, w) for out in self.head.parts(inputs, detach=True))
            loss.backward()
            self.optimizer.step()
        self.steps += 1
        self._push(x, np.asarray(y))

    def _push(self, x: np.ndarray, y: np.ndarray) -> None:
        """The newest ``ring`` labels of each ring over its oldest."""
        if not self.ring:
            return
        ring = self._rings(y)
        for c in np.unique(ring):
            mine = np.flatnonzero(ring == c)[-self.ring :]
            at = c * self.ring + (self.replayed[c] + np.arange(len(mine))) % self.ring
            self.replay_x[at], self.replay_y[at] = x[mine], y[mine]
            self.replayed[c] += int(np.sum(ring == c))

    def _normalise(self, x: np.ndarray) -> None:
        """Chan et al.'s parallel update of the running mean and sum of squared deviations."""
        n, mean = len(x), x.mean(axis=0, dtype=np.float64)
        m2 = ((x - mean) ** 2).sum(axis=0, dtype=np.float64)
        total = self.count + n
        delta = mean - self.mean
        self.mean = self.mean + delta * n / total
        self.m2 = self.m2 + m2 + delta**2 * self.count * n / total
        self.count = total

    def _standardised(self, x: np.ndarray) -> torch.Tensor:
        std = np.sqrt(self.m2 / self.count) if self.count > 1 else np.ones(self.in_dim)
        z = (np.asarray(x, np.float64) - self.mean) / np.where(std > 0, std, 1.0)
        fixed = self.task.fixed_inputs  # (node affinity's class features: shares, as they are)
        z[:, :fixed] = np.asarray(x, np.float64)[:, :fixed]
        return torch.from_numpy(z.astype(np.float32))

    # ------------------------------------------------------------------ figures
    def _all(self, name: str) -> np.ndarray:
        parts = self.records[name]
        if parts:
            return np.concatenate(parts)
        if name == "y":
            dtype = np.int64 if isinstance(self.task, Classification) else np.float64
            return np.zeros((0, *self.task.label_shape), dtype)
        if name == "t":
            return np.zeros(0)
        return self.task.predict(torch.zeros(0, self.task.out_dim))  # (class probabilities: [0, C])

    def figures(self, last: int | None = None) -> dict[str, dict[str, float]]:
        """The prequential figures (``Task.metrics``, given the labels' times: node affinity's NDCG is TGB's
        mean over them) of the head and the prior over every label scored, or its ``last`` ones:
        ``{"head": {...}, "prior": {...}, "labels": {"n": ...}}``."""
        t, y, score, prior = (self._all(name) for name in RECORDS)
        if last is not None:
            t, y, score, prior = t[-last:], y[-last:], score[-last:], prior[-last:]
        return {
            "head": self.task.metrics(score, y, t) if len(y) else {},
            "prior": self.task.metrics(prior, y, t) if len(y) else {},
            "labels": {"n": float(len(y))},
        }

    # ------------------------------------------------------------------ checkpoints
    def state(self) -> dict:
        """Everything ``from_state`` needs to continue exactly (tensors, arrays, JSON-able values)."""
        return {
            "config": stamp(self.config.to_dict()), "in_dim": self.in_dim, "head": self.head.state_dict(),
            "optimizer": self.optimizer.state_dict(), "count": self.count,
            "mean": torch.from_numpy(self.mean.copy()), "m2": torch.from_numpy(self.m2.copy()),
            "replay_x": torch.from_numpy(self.replay_x.copy()),
            "replay_y": torch.from_numpy(self.replay_y.copy()),
            "replayed": torch.from_numpy(self.replayed.copy()), "features": self.features,
            "stage": self.head.stage, "stage_loss": torch.from_numpy(self.stage_loss.copy()),
            "stage_seen": torch.from_numpy(self.stage_seen.copy()),
            "rng": json.dumps(self.rng.bit_generator.state), "steps": self.steps,
            "prior_counts": torch.from_numpy(self._counts.copy()),
            "records": {name: torch.from_numpy(np.ascontiguousarray(self._all(name))) for name in RECORDS},
        }  # fmt: skip

    @classmethod
    def from_state(cls, state: dict, where: str = "task state") -> OnlineHead:
        """An ``OnlineHead`` exactly as ``state()`` left it; a state that does not fit is one line."""
        try:
            config = from_record(TaskConfig, state["config"], f"{where}: config", "task")
            head = cls(config, int(state["in_dim"]), features=int(state["features"]))
            head.head.load_state_dict(state["head"])
            head.optimizer.load_state_dict(state["optimizer"])
            head.count = int(state["count"])
            head.mean, head.m2 = state["mean"].numpy().copy(), state["m2"].numpy().copy()
            head.replay_x, head.replay_y = state["replay_x"].numpy().copy(), state["replay_y"].numpy().copy()
            head.replayed, head.steps = state["replayed"].numpy().copy(), int(state["steps"])
            head.head.stage = int(state["stage"])
            head.stage_loss = state["stage_loss"].numpy().copy()
            head.stage_seen = state["stage_seen"].numpy().copy()
            head.rng.bit_generator.state = json.loads(state["rng"])
            head.records = {name: [state["records"][name].numpy().copy()] for name in RECORDS}
            head._counts = state["prior_counts"].numpy().copy()
        except ConfigError:  # its config: a newer version, or a value this one refuses (named, one line)
            raise
        except (KeyError, RuntimeError, ValueError, TypeError, AttributeError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CheckpointError(f"{where}: not a task head's state ({first})") from None
        return head
