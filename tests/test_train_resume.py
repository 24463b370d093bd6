"""A trainer killed with SIGKILL and resumed from its last checkpoint ends exactly where an uninterrupted run
does: same parameters, memory, optimizer, store and metrics. This file is also the worker script."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from streamgnn.checkpoint import read_latest
from streamgnn.errors import CheckpointError

BATCHES, BATCH = 36, 40


def events():
    from streamgnn.events import EventBatch

    rng = np.random.default_rng(7)
    n = BATCHES * BATCH
    popularity = 1.0 / np.arange(1, 21) ** 1.5
    src = rng.integers(0, 50, n)
    dst = rng.choice(20, n, p=popularity / popularity.sum()) + 50
    feat = rng.normal(size=(n, 3)).astype(np.float32)
    t = np.cumsum(rng.exponential(1.0, n))
    return EventBatch.from_columns(src=src, dst=dst, t=t, eid=np.arange(n), features=feat)


def worker(mode: str, ckpt: str, out: str, delay: float) -> None:
    """Train over the stream (``mode`` "fresh" or "resume"), printing each step; save the end state."""
    from streamgnn.nn import TGNConfig
    from streamgnn.train import OnlineTrainer, TrainConfig

    torch.set_num_threads(1)
    model = TGNConfig(
        memory_dim=12, time_dim=6, embedding_dim=12, edge_feature_dim=3, num_neighbors=4, dropout=0.2
    )
    cfg = TrainConfig(
        model=model, batch_size=BATCH, lr=3e-3, seed=5, sampling="uniform", train_negatives="historical",
        eval_negatives=8, window_events=200, checkpoint_dir=ckpt, checkpoint_every=3,
    )  # fmt: skip
    trainer = OnlineTrainer.resume(ckpt) if mode == "resume" else OnlineTrainer(cfg)

    def source():
        for batch in events().split(BATCH):
            print("step", trainer.steps, flush=True)
            time.sleep(delay)
            yield batch

    result = trainer.fit(source(), progress=False)
    torch.save(
        {
            "model": trainer.model.state_dict(),
            "optimizer": trainer.optimizer.state_dict(),
            "windows": [list(w.__dict__.values())[:-1] for w in result.windows],  # all but wall-clock speed
            "store": trainer.store.content_hash(),
            "counters": [trainer.steps, trainer.position, trainer.learned],
            "rng": torch.get_rng_state(),
        },
        out,
    )


def run(*args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "OMP_WAIT_POLICY": "passive", "PYTHONWARNINGS": "ignore"}
    return subprocess.Popen(
        [sys.executable, __file__, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        **kw,
    )


def finish(proc: subprocess.Popen) -> None:
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]


def assert_same(a, b) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same(a[key], b[key])
    elif isinstance(a, torch.Tensor):
        assert a.shape == b.shape and torch.equal(a, b)
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    else:
        assert a == b or (a != a and b != b)  # NaN == NaN here


def test_sigkill_at_a_random_batch_then_resume_matches_an_uninterrupted_run(tmp_path: Path):
    reference = run("fresh", str(tmp_path / "ref_ckpt"), str(tmp_path / "ref.pt"), "0")
    kill_at = random.Random().randint(4, BATCHES - 6)
    victim = run("fresh", str(tmp_path / "ckpt"), str(tmp_path / "victim.pt"), "0.03")
    for line in victim.stdout:
        if line.split() == ["step", str(kill_at)]:
            victim.send_signal(signal.SIGKILL)
            break
    victim.wait(timeout=60)
    assert victim.returncode == -signal.SIGKILL, f"the victim was not killed (rc {victim.returncode})"
    assert not (tmp_path / "victim.pt").exists()
    saved = int(read_latest(tmp_path / "ckpt")[0].split("-")[1])
    assert 0 < saved <= kill_at < BATCHES
    finish(run("resume", str(tmp_path / "ckpt"), str(tmp_path / "resumed.pt"), "0"))
    finish(reference)
    ref = torch.load(tmp_path / "ref.pt", weights_only=True)
    got = torch.load(tmp_path / "resumed.pt", weights_only=True)
    assert got["counters"] == [BATCHES, BATCHES * BATCH, BATCHES * BATCH]
    assert len(ref["windows"]) == BATCHES * BATCH // 200
    try:
        assert_same(got, ref)
    except AssertionError as exc:
        raise AssertionError(f"killed at step {kill_at}, resumed from step {saved}") from exc

    from streamgnn.train import OnlineTrainer

    blob = next((tmp_path / "ckpt").glob("ckpt-*/state.npy"))
    data = bytearray(blob.read_bytes())
    data[-10] ^= 0xFF
    blob.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="altered"):
        OnlineTrainer.resume(blob.parent)


if __name__ == "__main__":
    worker(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))


def test_a_rerun_into_the_same_folder_never_loses_its_latest_checkpoint(tmp_path: Path):
    """Steps of an abandoned, longer run go when a new run saves an earlier step: LATEST always exists."""
    from streamgnn.store import TemporalGraphStore
    from streamgnn.train import checkpoint

    store = TemporalGraphStore()
    for step in (6, 12):  # the first run
        checkpoint.save(
            tmp_path, step, store, {}, {"step": step}, {"store_hash": store.content_hash()}, keep=2
        )
    for step in (1, 2):  # a rerun from scratch
        checkpoint.save(
            tmp_path, step, store, {}, {"step": step}, {"store_hash": store.content_hash()}, keep=2
        )
        assert (tmp_path / read_latest(tmp_path)[0]).is_dir()
    assert [p.name for p in checkpoint.step_dirs(tmp_path)] == ["ckpt-000001", "ckpt-000002"]
    assert checkpoint.load(tmp_path).state == {"step": 2}


def trained_state(trainer) -> dict:
    """Everything a resumed run must reproduce: parameters, memory, optimizer, store, served rows."""
    ids = trainer.store.external_ids(np.arange(trainer.store.num_nodes))
    return {
        "model": trainer.model.state_dict(),
        "optimizer": trainer.optimizer.state_dict(),
        "store": trainer.store.content_hash(),
        "counters": [trainer.steps, trainer.position, trainer.learned],
        "served": torch.from_numpy(trainer.table.embeddings(ids)),
        "served_at": torch.from_numpy(trainer.table.updated_at(ids)),
        "rng": torch.get_rng_state(),
    }


def test_resume_at_the_readme_settings_is_bit_for_bit(tmp_path: Path):
    """README dims (100), JODIE Wikipedia through ``DatasetSource(batch_size=10_000)``, 2 torch threads.
    Small models passed while this broke: a gather's backward summed repeated rows with parallel atomic
    float adds once it had 32768 elements (``gather_rows``). Served rows must be those the uninterrupted
    run served, not re-embedded at the resume."""
    from dataclasses import replace

    from streamgnn.connectors.files import DatasetSource
    from streamgnn.nn import TGNConfig
    from streamgnn.train import OnlineTrainer, TrainConfig

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        cfg = TrainConfig(
            model=TGNConfig(memory_dim=100, time_dim=100, embedding_dim=100, num_neighbors=10),
            checkpoint_dir=str(tmp_path / "run"), checkpoint_every=4,
        )  # fmt: skip
        run = OnlineTrainer(cfg)
        run.fit(DatasetSource("jodie_wikipedia", batch_size=10_000), max_events=1400, progress=False)
        assert run.steps == 7
        want = trained_state(run)
        resumed = OnlineTrainer.resume(
            tmp_path / "run" / "ckpt-000004", config=replace(cfg, checkpoint_dir=str(tmp_path / "again"))
        )
        resumed.fit(DatasetSource("jodie_wikipedia", batch_size=10_000), max_events=600, progress=False)
        assert_same(trained_state(resumed), want)
    finally:
        torch.set_num_threads(threads)
