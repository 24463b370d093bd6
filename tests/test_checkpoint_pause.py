"""A time floor between checkpoints (``TrainConfig.checkpoint_min_pause_s``, Flink's
``execution.checkpointing.min-pause``): a checkpoint by interval waits until the pause has passed since the
last one ended; the first and the run's last are never held. The clock is injected (``Drive(clock=...)``):
no assertion depends on how fast the host runs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from streamgnn.errors import ConfigError
from streamgnn.events import EventBatch
from streamgnn.nn import TGNConfig
from streamgnn.train import OnlineTrainer, TrainConfig
from streamgnn.train.config import DEFAULT_CHECKPOINT_MIN_PAUSE_S
from streamgnn.train.driver import Drive

torch.set_num_threads(1)
BATCH = 20


def stream(n: int) -> EventBatch:
    rng = np.random.default_rng(0)
    return EventBatch.from_columns(
        src=rng.integers(0, 10, n), dst=rng.integers(10, 20, n), t=np.arange(n, dtype=float), eid=np.arange(n)
    )


def config(folder, **kw) -> TrainConfig:
    model = TGNConfig(memory_dim=4, time_dim=2, embedding_dim=4, num_neighbors=2, dropout=0.0)
    base = dict(
        model=model, batch_size=BATCH, eval_negatives=2, checkpoint_dir=str(folder), checkpoint_keep=20
    )
    return TrainConfig(**{**base, **kw})


def checkpoint_steps(trainer: OnlineTrainer, items: int, pause: float) -> list[int]:
    """Drive ``items`` batches through ``trainer`` with a checkpoint due after every step, the clock moving
    2 s per item: the steps each checkpoint was written after."""
    now, saved = [0.0], []

    def tick(*_) -> None:
        now[0] += 2.0

    def save():
        saved.append(trainer.steps)
        return trainer.save_checkpoint()

    drive = Drive(
        trainer, every=1, limit=None, progress=False, on_step=tick, min_pause_s=pause, clock=lambda: now[0]
    )
    batches = ((batch, 0.0, True) for batch in stream(items * BATCH).split(BATCH))
    drive.run(batches, save)
    return saved


def test_checkpoints_by_interval_wait_for_the_pause_and_the_last_is_never_held(tmp_path):
    trainer = OnlineTrainer(config(tmp_path, checkpoint_every=1))
    # a checkpoint is due after every step; the first is taken at once, the next when 5 s passed since it
    # ended (items end at 2, 4, 6, ... s), the last at the run's end though 2 s passed since the one before
    assert checkpoint_steps(trainer, 8, pause=5.0) == [1, 4, 7, 8]
    assert OnlineTrainer.resume(tmp_path).position == 8 * BATCH  # the newest holds every event
    again = OnlineTrainer(config(tmp_path / "none", checkpoint_every=1))
    assert checkpoint_steps(again, 3, pause=0.0) == [1, 2, 3]  # no pause: after every step


def test_a_job_behind_a_long_pause_still_checkpoints_its_end(tmp_path):
    """Through ``fit``: the config's pause reaches the loop; a run shorter than it checkpoints its first
    step and its end, and resumes from the end."""
    cfg = config(tmp_path, checkpoint_every=1, checkpoint_min_pause_s=1e9)
    OnlineTrainer(cfg).fit(stream(5 * BATCH).split(BATCH), progress=False)
    assert sorted(p.name for p in tmp_path.glob("ckpt-*")) == ["ckpt-000001", "ckpt-000005"]
    assert OnlineTrainer.resume(tmp_path).position == 5 * BATCH


def test_the_pause_defaults_with_the_default_interval_and_refuses_bad_values(tmp_path):
    assert config(tmp_path).checkpoint_pause_s == DEFAULT_CHECKPOINT_MIN_PAUSE_S > 0  # the default interval
    assert config(tmp_path, checkpoint_every=3).checkpoint_pause_s == 0.0  # an interval named: as named
    assert config(tmp_path, checkpoint_every=3, checkpoint_min_pause_s=2).checkpoint_pause_s == 2.0
    for bad in (-1.0, math.inf, math.nan, "5"):
        with pytest.raises(ConfigError, match="checkpoint_min_pause_s"):
            config(tmp_path, checkpoint_min_pause_s=bad)
    # a checkpoint's config written before the key (version 3) resumes without a pause, as it ran
    old = {
        "config_version": 3,
        **{k: v for k, v in config(tmp_path).to_dict().items() if k != "config_version"},
    }
    del old["checkpoint_min_pause_s"]
    assert TrainConfig.from_checkpoint(old).checkpoint_pause_s == 0.0
