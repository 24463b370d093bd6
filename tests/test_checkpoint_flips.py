"""Every byte a checkpoint load trusts is verified: flip one bit of any byte of a store or trainer checkpoint
and the load is refused with ``CheckpointError`` or gives back the identical state; a ``LATEST`` naming
another checkpoint than the one it was written for is refused."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from streamgnn.checkpoint import read_latest, write_latest
from streamgnn.errors import CheckpointError
from streamgnn.events import EventBatch
from streamgnn.store import StoreConfig, TemporalGraphStore

NPY_HEADER = 128  # numpy's .npy header (magic, version, dtype, shape) is padded to 128 bytes here


def small_stream() -> EventBatch:
    """Adds, a delete, node updates, string ids, weights and features: every kind of array a store saves."""
    return EventBatch.from_columns(
        kind=[0, 0, 2, 0, 1, 2, 0],
        src=["a", "b", "a", "c", "a", "b", "b"],
        dst=["b", "c", "a", "a", "b", "b", "a"],
        t=[1.0, 2.0, 2.5, 3.0, 4.0, 4.5, 5.0],
        eid=[0, 1, 2, 3, 4, 5, 9],
        weight=[0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5],
        features=np.arange(14, dtype=np.float32).reshape(7, 2),
    )


def flip_each(path: Path, positions, load, check) -> int:
    """Flip one bit (bit ``i % 8``) of each byte ``i`` in ``positions`` of ``path``, one at a time: ``load()``
    must raise ``CheckpointError`` or return a state ``check`` accepts. Returns how many loads succeeded."""
    data = bytearray(path.read_bytes())
    accepted = 0
    for i in positions:
        data[i] ^= 1 << (i % 8)
        path.write_bytes(data)
        try:
            got = load()
        except CheckpointError:
            pass
        else:
            accepted += 1
            assert check(got), f"{path} byte {i}: a flipped bit loaded as a different state"
        data[i] ^= 1 << (i % 8)
    path.write_bytes(data)
    return accepted


def test_a_flipped_bit_anywhere_in_a_store_checkpoint_is_refused_or_harmless(tmp_path):
    """Every byte of every file of a small store checkpoint (LATEST, manifest, its checksum, all arrays)."""
    store = TemporalGraphStore(StoreConfig(num_partitions=3, allowed_lateness=60.0))
    store.ingest(small_stream())
    store.save(tmp_path, source_offsets={"events:1": 7})
    want = (store.content_hash(), {"events:1": 7}, store.config, store.watermark)

    def state(s):
        return (s.content_hash(), s.source_offsets, s.config, s.watermark)

    files = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    assert len(files) > 15 and {p.name for p in files} >= {"LATEST", "manifest.json", "manifest.sha256"}
    for path in files:
        flip_each(
            path,
            range(path.stat().st_size),
            lambda: TemporalGraphStore.load(tmp_path),
            lambda s: state(s) == want,
        )
    assert state(TemporalGraphStore.load(tmp_path)) == want


def test_a_flipped_bit_in_a_trainer_checkpoint_is_refused_or_harmless(tmp_path):
    """Every byte of the metadata (every LATEST, manifest and manifest checksum, and the 128-byte header of
    every array file, the trainer state's included), and a seeded sample of 300 bytes of the array data
    (the torch state blob and the store's arrays; the store test above flips all of a store's bytes)."""
    from streamgnn.nn import TGNConfig
    from streamgnn.train import OnlineTrainer, TrainConfig, checkpoint

    model = TGNConfig(memory_dim=4, time_dim=2, embedding_dim=4, num_neighbors=2, dropout=0.0)
    cfg = TrainConfig(model=model, batch_size=20, eval_negatives=2, checkpoint_dir=str(tmp_path))
    trainer = OnlineTrainer(cfg)
    rng = np.random.default_rng(0)
    trainer.step(EventBatch.from_columns(src=rng.integers(0, 9, 40), dst=rng.integers(9, 14, 40),
                                         t=np.arange(40.0), eid=np.arange(40)))  # fmt: skip
    trainer.save_checkpoint({"events:0": 40})
    good = checkpoint.load(tmp_path)

    def same(got) -> bool:
        if got.manifest != good.manifest or got.store.content_hash() != good.store.content_hash():
            return False
        if got.store.source_offsets != good.store.source_offsets:
            return False
        flat = [(a, b) for k in good.state for a, b in _pairs(good.state[k], got.state[k])]
        return all(torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b for a, b in flat)

    files = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    meta = [p for p in files if p.suffix != ".npy"]
    arrays = [p for p in files if p.suffix == ".npy"]
    # one container: one LATEST, one manifest and its checksum (the store's arrays beside the trainer's)
    assert sorted(p.name for p in meta) == ["LATEST", "manifest.json", "manifest.sha256"]
    for path in meta:
        flip_each(path, range(path.stat().st_size), lambda: checkpoint.load(tmp_path), same)
    for path in arrays:
        flip_each(path, range(NPY_HEADER), lambda: checkpoint.load(tmp_path), same)
    data_bytes = [(p, i) for p in arrays for i in range(NPY_HEADER, p.stat().st_size)]
    for path, i in random.Random(0).sample(data_bytes, 300):
        flip_each(path, [i], lambda: checkpoint.load(tmp_path), same)
    assert same(checkpoint.load(tmp_path))


def _pairs(a, b):
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for k in a:
            yield from _pairs(a[k], b[k])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            yield from _pairs(x, y)
    else:
        yield a, b


def test_latest_must_name_the_checkpoint_it_was_written_for(tmp_path):
    """A LATEST pointed at an older kept checkpoint (by hand, or by a flipped bit: "ckpt-000003" ->
    "ckpt-000002" is one bit) is refused; an older checkpoint is loaded by asking for its version."""
    s = TemporalGraphStore()
    for i, part in enumerate(small_stream().split(3)):
        s.ingest(part)
        s.save(tmp_path, source_offsets={"p": i}, keep=3)
    name, digest = read_latest(tmp_path)
    assert name == "ckpt-000003"
    write_latest(tmp_path, "ckpt-000002", digest)
    with pytest.raises(CheckpointError, match="written for another checkpoint"):
        TemporalGraphStore.load(tmp_path)
    (tmp_path / "LATEST").write_bytes(b"ckpt-000002")  # the old format: a bare name
    with pytest.raises(CheckpointError, match="LATEST is damaged"):
        TemporalGraphStore.load(tmp_path)
    (tmp_path / "LATEST").write_bytes(b"\xff\xfe")
    with pytest.raises(CheckpointError, match="LATEST is damaged"):
        TemporalGraphStore.load(tmp_path)
    assert TemporalGraphStore.load(tmp_path, version=2).source_offsets == {"p": 1}
    write_latest(tmp_path, name, digest)
    assert TemporalGraphStore.load(tmp_path).source_offsets == {"p": 2}


def test_a_trainer_latest_naming_an_older_step_is_refused(tmp_path):
    """A trainer's LATEST pointed at its older kept checkpoint is refused by the resume, not loaded as if it
    were the newest; the older one is resumed by naming it, in the state of its own step."""
    from streamgnn.nn import TGNConfig
    from streamgnn.train import OnlineTrainer, TrainConfig

    model = TGNConfig(memory_dim=4, time_dim=2, embedding_dim=4, num_neighbors=2, dropout=0.0)
    cfg = TrainConfig(
        model=model, batch_size=4, eval_negatives=2, checkpoint_dir=str(tmp_path), checkpoint_every=1,
        checkpoint_keep=2,
    )  # fmt: skip
    rng = np.random.default_rng(0)
    events = EventBatch.from_columns(
        src=rng.integers(0, 6, 12), dst=rng.integers(6, 9, 12), t=np.arange(12.0), eid=np.arange(12)
    )
    trainer = OnlineTrainer(cfg)
    trainer.fit(events.split(3), progress=False)
    name, digest = read_latest(tmp_path)
    assert name == f"ckpt-{trainer.steps:06d}" and trainer.steps >= 2
    older = f"ckpt-{trainer.steps - 1:06d}"
    write_latest(tmp_path, older, digest)
    with pytest.raises(CheckpointError, match="written for another checkpoint"):
        OnlineTrainer.resume(tmp_path)
    resumed = OnlineTrainer.resume(tmp_path / older)
    assert resumed.steps == trainer.steps - 1
    assert 0 < resumed.learned == resumed.store.num_edges < trainer.learned == len(events)


def test_a_trainer_state_is_read_without_reading_the_store_beside_it(tmp_path):
    """``load_tensors`` (the service's reload of the link predictor) verifies and parses only the tensor
    state: a store array it does not read may be damaged; a full ``load`` refuses the same checkpoint."""
    from streamgnn.train import checkpoint

    store = TemporalGraphStore()
    store.ingest(small_stream())
    path = checkpoint.save(tmp_path, 4, store, {}, {"step": 4}, {}, keep=2)
    (path / "store.edge_t.npy").write_bytes(b"damaged")
    assert checkpoint.load_tensors(tmp_path)[2] == {"step": 4}
    with pytest.raises(CheckpointError, match="store.edge_t"):
        checkpoint.load(tmp_path)
