"""Store checkpoints: atomic, verified, pickle-free, resumable."""

import json

import numpy as np
import pytest
from forgery import forge, reseal

from streamgnn.checkpoint import numbers, read_latest
from streamgnn.errors import CheckpointError
from streamgnn.events import EventBatch
from streamgnn.store import StoreConfig, TemporalGraphStore


def stream(n=3000, seed=0, strings=False):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, 200, n), rng.integers(0, 200, n)
    kind = np.where(rng.random(n) < 0.1, 1, np.where(rng.random(n) < 0.1, 2, 0))
    t = np.sort(rng.integers(0, 1000, n)).astype(float)
    if strings:
        src, dst = np.array([f"n{x}" for x in src], object), np.array([f"n{x}" for x in dst], object)
    return EventBatch.from_columns(
        kind=kind, src=src, dst=dst, t=t, eid=np.arange(n), features=rng.random((n, 4)), weight=rng.random(n)
    )


@pytest.mark.parametrize("strings", [False, True])
def test_restore_equals_original_and_continues_identically(tmp_path, strings):
    b = stream(strings=strings)
    head, tail = b.take(slice(0, 2000)), b.take(slice(2000, None))
    a = TemporalGraphStore(StoreConfig(num_partitions=3))
    a.ingest(head)
    a.save(tmp_path / "ck", source_offsets={"events:0": 2000})
    r = TemporalGraphStore.load(tmp_path / "ck")
    assert r.content_hash() == a.content_hash()
    assert r.source_offsets == {"events:0": 2000}
    assert (r.num_nodes, r.num_edges, r.watermark) == (a.num_nodes, a.num_edges, a.watermark)
    node = b.src[0]
    assert np.array_equal(r.features([node], t=500.0), a.features([node], t=500.0))
    assert np.array_equal(r.neighbors(node, t=600.0).eid, a.neighbors(node, t=600.0).eid)
    a.ingest(tail)
    r.ingest(tail)
    assert r.content_hash() == a.content_hash()
    dup = r.ingest(head)  # replaying what the checkpoint already holds changes nothing
    assert dup.applied == 0 and r.content_hash() == a.content_hash()


def test_versions_are_kept_and_latest_wins(tmp_path):
    s = TemporalGraphStore()
    b = stream()
    for i, part in enumerate(b.split(1000)):
        s.ingest(part)
        s.save(tmp_path, source_offsets={"p": i}, keep=2)
    assert numbers(tmp_path) == [2, 3]
    assert TemporalGraphStore.load(tmp_path).source_offsets == {"p": 2}
    assert TemporalGraphStore.load(tmp_path, version=2).source_offsets == {"p": 1}


def corrupt_latest(root, how):
    d = root / read_latest(root)[0]
    target = d / "edge_t.npy"
    data = target.read_bytes()
    if how == "truncate":
        target.write_bytes(data[: len(data) // 2])
    elif how == "tamper":
        target.write_bytes(data[:-8] + np.float64(12345.0).tobytes())
    elif how == "delete":
        target.unlink()
    elif how == "manifest":
        (d / "manifest.json").write_text("{not json")


@pytest.mark.parametrize("how", ["truncate", "tamper", "delete", "manifest"])
def test_damaged_checkpoint_is_refused_and_previous_stays_usable(tmp_path, how):
    s = TemporalGraphStore()
    b = stream()
    s.ingest(b.take(slice(0, 1000)))
    s.save(tmp_path)
    good = s.content_hash()
    s.ingest(b.take(slice(1000, None)))
    s.save(tmp_path)
    corrupt_latest(tmp_path, how)
    with pytest.raises(CheckpointError, match="version=N"):
        TemporalGraphStore.load(tmp_path)
    assert TemporalGraphStore.load(tmp_path, version=1).content_hash() == good


def test_consistent_but_forged_content_is_refused(tmp_path):
    s = TemporalGraphStore()
    s.ingest(stream())
    d = s.save(tmp_path)
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["watermark"] = 1.0  # below the newest edge: samplers would see edges after their query times
    reseal(d, manifest)
    with pytest.raises(CheckpointError, match="watermark 1.0 is below"):
        TemporalGraphStore.load(tmp_path)


@pytest.mark.parametrize(
    "name, change",
    [
        ("adj_indptr", lambda a: np.r_[a[:-1], 50_000_000]),  # past the pool: the kernels read out of bounds
        ("adj_indptr", lambda a: a[:-1]),
        ("adj", lambda a: np.where(np.arange(a.size).reshape(a.shape) == 1, 1 << 30, a).astype(a.dtype)),
        ("adj", lambda a: np.where(np.arange(a.size).reshape(a.shape) == 0, 1 << 30, a).astype(a.dtype)),
        ("upd_node", lambda a: a[:-1]),
        ("edge_t", lambda a: a[:-1]),
    ],
)
def test_forged_structure_is_refused_before_any_kernel_reads_it(tmp_path, name, change):
    s = TemporalGraphStore()
    s.ingest(stream(n=300))
    d = s.save(tmp_path)
    forge(d, name, change(np.load(d / f"{name}.npy")))
    with pytest.raises(CheckpointError, match="inconsistent"):
        TemporalGraphStore.load(tmp_path)


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: {**m, "arrays": {k: {"sha256": v["sha256"]} for k, v in m["arrays"].items()}},
        lambda m: [m],
        lambda m: {**m, "arrays": [1, 2]},
        lambda m: {**m, "source_offsets": [1, 2]},
    ],
)
def test_malformed_manifest_is_refused(tmp_path, edit):
    s = TemporalGraphStore()
    s.ingest(stream(n=50))
    d = s.save(tmp_path)
    reseal(d, edit(json.loads((d / "manifest.json").read_text())))
    with pytest.raises(CheckpointError):
        TemporalGraphStore.load(tmp_path)


def test_a_forged_hash_over_changed_content_is_refused(tmp_path):
    s = TemporalGraphStore()
    s.ingest(stream())
    d = s.save(tmp_path)
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["watermark"] += 5.0  # consistent with the edges, but not what was hashed
    reseal(d, manifest)
    with pytest.raises(CheckpointError, match="content hash"):
        TemporalGraphStore.load(tmp_path)


def test_object_arrays_are_never_unpickled(tmp_path):
    s = TemporalGraphStore()
    s.ingest(stream(n=100))
    d = s.save(tmp_path)
    forge(d, "edge_t", np.array([{"evil": 1}], dtype=object))
    with pytest.raises(CheckpointError, match="not a plain array"):
        TemporalGraphStore.load(tmp_path)


def test_interrupted_save_leaves_previous_checkpoint(tmp_path):
    s = TemporalGraphStore()
    s.ingest(stream(n=500))
    s.save(tmp_path)
    (tmp_path / ".tmp-ckpt-000002-999").mkdir()  # a writer that died before its rename
    (tmp_path / ".tmp-ckpt-000002-999" / "edge_t.npy").write_bytes(b"partial")
    assert TemporalGraphStore.load(tmp_path).content_hash() == s.content_hash()
    with pytest.raises(CheckpointError, match="LATEST"):
        TemporalGraphStore.load(tmp_path / "nowhere")
