"""``streamgnn train`` over a checkpoint folder, as a user runs it (the real command, in its own process): a
folder without ``LATEST`` resumes from its newest checkpoint and says so; an unusable ``LATEST`` is refused
in one line whose hint (``--resume-from``) works; a checkpoint of another stream, kind of trainer or model is
refused in one line saying what differs (``--resume-anyway`` for another stream); no checkpoint is written
inside another. Beside them, the source identities and the trainer kinds ``Expectation`` compares."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from forgery import reseal

from streamgnn.errors import CheckpointError
from streamgnn.nn import TGNConfig
from streamgnn.train.config import TrainConfig
from streamgnn.train.resume import Expectation, ResumeConfig, file_identity, kafka_identity, trainer_kind

SMALL = (
    "train:\n  batch_size: 100\n  eval_negatives: 5\n  checkpoint_every: 1\n"
    "  model: {memory_dim: 8, time_dim: 8, embedding_dim: 8, num_neighbors: 5}\n"
)


def train(cwd: Path, *args: str, config: str = "small.yaml") -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_WAIT_POLICY": "passive", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "streamgnn.cli", "train", "--config", config, "--quiet", "--log-every", "0"]
    return subprocess.run([*cmd, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=None)


def refused(done: subprocess.CompletedProcess) -> str:
    """The one line a refused run printed (exit 2, no traceback)."""
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("streamgnn: error: "), done.stderr
    return lines[0]


def listing(root: Path) -> dict[str, bytes | str]:
    return {
        str(p.relative_to(root)): os.readlink(p)
        if p.is_symlink()
        else p.read_bytes()
        if p.is_file()
        else "dir"
        for p in sorted(root.rglob("*"))  # (small files only here)
    }


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A run of 300 events from jodie_wikipedia, checkpointed every batch of 100: ckpt-000002, -000003."""
    work = tmp_path_factory.mktemp("base")
    (work / "small.yaml").write_text(SMALL)
    done = train(work, "--dataset", "jodie_wikipedia", "--events", "300", "--checkpoint-dir", "ck")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (work / "ck").iterdir()) == ["LATEST", "ckpt-000002", "ckpt-000003"]
    return work


@pytest.fixture
def work(base, tmp_path) -> Path:
    shutil.copytree(base, tmp_path / "w", symlinks=True)
    return tmp_path / "w"


def test_a_folder_without_latest_resumes_from_its_newest_checkpoint_and_says_which(work):
    (work / "ck" / "LATEST").unlink()
    done = train(work, "--dataset", "jodie_wikipedia", "--events", "400", "--checkpoint-dir", "ck")
    assert done.returncode == 0, done.stderr
    assert "LATEST is missing: the newest checkpoint that verifies is ckpt-000003" in done.stdout
    assert "resumed from ck/ckpt-000003: 300 events already learned" in done.stdout
    assert sorted(p.name for p in (work / "ck").iterdir()) == ["LATEST", "ckpt-000003", "ckpt-000004"]


@pytest.mark.parametrize("how", ["dangling", "loop"])
def test_an_unusable_latest_is_refused_listing_the_checkpoints_and_the_hint_works(work, how):
    ck = work / "ck"
    (ck / "LATEST").unlink()
    (ck / "LATEST").symlink_to(ck / ("nowhere" if how == "dangling" else "LATEST"))
    before = listing(ck)
    line = refused(train(work, "--dataset", "jodie_wikipedia", "--events", "400", "--checkpoint-dir", "ck"))
    assert "ckpt-000002" in line and "ckpt-000003" in line and "--resume-from" in line
    assert listing(ck) == before  # nothing trained over, nothing removed
    # the hint: one named checkpoint, into a new folder; the old folder stays as it was
    done = train(work, "--dataset", "jodie_wikipedia", "--events", "300", "--resume-from", "ck/ckpt-000002",
                 "--checkpoint-dir", "ck2")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "resumed from ck/ckpt-000002: 200 events already learned" in done.stdout
    assert (work / "ck2" / "ckpt-000003").is_dir() and listing(ck) == before
    line = refused(train(work, "--dataset", "jodie_wikipedia", "--resume-from", "ck/ckpt-000002",
                         "--checkpoint-dir", "ck"))  # fmt: skip
    assert "holds ckpt-000003, newer than ckpt-000002" in line and listing(ck) == before


def test_a_checkpoint_folder_is_never_written_into(work):
    before = listing(work / "ck")
    line = refused(train(work, "--dataset", "jodie_wikipedia", "--checkpoint-dir", "ck/ckpt-000002"))
    assert "is checkpoint ckpt-000002 of ck" in line and "--resume-from" in line
    assert listing(work / "ck") == before


def test_another_stream_is_refused_saying_what_differs_unless_meant(work):
    args = ["--dataset", "collegemsg", "--events", "400", "--checkpoint-dir", "ck"]
    line = refused(train(work, *args))
    assert "was written from dataset jodie_wikipedia" in line and "this run reads dataset collegemsg" in line
    assert "--resume-anyway" in line
    done = train(work, *args, "--resume-anyway")
    assert done.returncode == 0, done.stderr
    assert "resuming anyway" in done.stdout and "resumed from ck/ckpt-000003" in done.stdout
    manifest = json.loads((work / "ck" / "ckpt-000004" / "manifest.json").read_text())
    assert manifest["source"]["name"] == "collegemsg"  # it records what it reads now
    assert manifest["trainer"] == {"kind": "one-process", "world_size": 1}


def test_another_model_is_one_line_and_another_batch_size_says_what_it_means(work):
    (work / "wide.yaml").write_text(SMALL.replace("memory_dim: 8", "memory_dim: 16"))
    args = ["--dataset", "jodie_wikipedia", "--events", "400", "--checkpoint-dir", "ck"]
    line = refused(train(work, *args, config="wide.yaml"))
    assert "was trained with model.memory_dim=8; this run sets model.memory_dim=16" in line
    done = train(work, *args, "--batch-size", "50")
    assert done.returncode == 0, done.stderr
    assert "batch_size 100 -> 50" in done.stdout and "batches of the new size" in done.stdout


def test_a_checkpoint_written_before_identities_resumes_saying_it_could_not_check(work):
    d = work / "ck" / "ckpt-000003"
    manifest = json.loads((d / "manifest.json").read_text())
    del manifest["source"], manifest["trainer"]
    reseal(d, manifest)
    done = train(work, "--dataset", "collegemsg", "--events", "400", "--checkpoint-dir", "ck")
    assert done.returncode == 0, done.stderr
    assert "records no source and no trainer kind" in done.stdout and "resumed from" in done.stdout


def test_a_sharded_folder_and_a_one_process_folder_are_not_taken_for_each_other(work):
    (work / "sharded.yaml").write_text(SMALL + "  sharding: {num_partitions: 2}\n")
    done = train(work, "--dataset", "jodie_wikipedia", "--events", "200", "--checkpoint-dir", "sk",
                 config="sharded.yaml")  # fmt: skip
    assert done.returncode == 0, done.stderr
    line = refused(train(work, "--dataset", "jodie_wikipedia", "--checkpoint-dir", "sk"))
    assert "holds a sharded run's checkpoints (rank-00000)" in line
    line = refused(
        train(work, "--dataset", "jodie_wikipedia", "--checkpoint-dir", "ck", config="sharded.yaml")
    )
    assert "holds a one-process or replicated run's checkpoints" in line


# ---------------------------------------------------------------------- the comparisons themselves
def manifest_of(source: dict | None, kind: dict | None, config: TrainConfig | None = None) -> dict:
    out = {"config": (config or TrainConfig()).to_dict(), "kind": "trainer"}
    return out | ({"source": source} if source else {}) | ({"trainer": kind} if kind else {})


def test_a_file_is_the_same_source_moved_or_grown_and_another_when_changed(tmp_path):
    events = tmp_path / "a.csv"
    events.write_text("1,2,1\n2,3,2\n")
    saved = manifest_of(file_identity(events), trainer_kind(False, 1))
    moved = tmp_path / "b.csv"
    shutil.copy(events, moved)
    with moved.open("a") as f:
        f.write("3,4,3\n")
    expect = Expectation(file_identity(moved), trainer_kind(False, 1), TrainConfig())
    expect.check(saved, tmp_path / "ckpt-000001")  # the same lines, and more
    assert expect.notes == []
    moved.write_text("1,2,1\n2,9,2\n3,4,3\n")
    expect = Expectation(file_identity(moved), trainer_kind(False, 1), TrainConfig())
    with pytest.raises(
        CheckpointError, match=r"was written from file .*a.csv \(12 bytes.*this run reads file"
    ):
        expect.check(saved, tmp_path / "ckpt-000001")
    expect.allow = True
    expect.check(saved, tmp_path / "ckpt-000001")
    assert expect.notes[0].startswith("resuming anyway")
    other = Expectation(kafka_identity("events"), trainer_kind(False, 1), TrainConfig())
    with pytest.raises(CheckpointError, match="this run reads Kafka topic 'events'"):
        other.check(saved, tmp_path / "ckpt-000001")


def test_trainer_kinds_one_process_replicated_and_sharded(tmp_path):
    where = tmp_path / "ckpt-000001"
    one, two = trainer_kind(False, 1), trainer_kind(False, 2)
    with pytest.raises(CheckpointError, match="written by one process; this run is a replicated run of 2"):
        Expectation(None, two, TrainConfig()).check(manifest_of(None, one), where)
    allowed = Expectation(None, two, TrainConfig(), allow=True)
    allowed.check(manifest_of(None, one), where)
    assert "resuming anyway" in allowed.notes[0]
    sharded = trainer_kind(True, 2)
    others = (trainer_kind(True, 3), one)
    for expect in (Expectation(None, kind, TrainConfig(), allow=True) for kind in others):
        with pytest.raises(CheckpointError, match="give a new --checkpoint-dir"):  # no override can help
            expect.check(manifest_of(None, sharded), where)


def test_only_settings_a_checkpoint_recorded_are_compared(tmp_path):
    """A checkpoint whose config left keys out (older writers) is compared on the keys it has."""
    config = TrainConfig(model=TGNConfig(memory_dim=8))
    saved = manifest_of(None, trainer_kind(False, 1), config)
    saved["config"]["model"] = {"memory_dim": 8}
    Expectation(None, trainer_kind(False, 1), config).check(saved, tmp_path / "ckpt-000001")
    with pytest.raises(CheckpointError, match="model.memory_dim=8; this run sets model.memory_dim=100"):
        Expectation(None, trainer_kind(False, 1), TrainConfig()).check(saved, tmp_path / "ckpt-000001")


def test_growing_a_sharded_run_from_2_to_3_ranks_says_what_happened(work):
    """Real gloo ranks, each the real command: 2 write the folder, 3 are refused in one line saying the
    checkpoint was written by 2 (not that rank 2 holds none)."""
    from streamgnn.connectors.broker import free_port

    (work / "sharded.yaml").write_text(SMALL + "  sharding: {num_partitions: 6}\n")
    args = ["--dataset", "jodie_wikipedia", "--events", "200", "--checkpoint-dir", "sk", "--log-every", "0"]
    cmd = [sys.executable, "-m", "streamgnn.cli", "train", "--config", "sharded.yaml", "--quiet", *args]

    def ranks(world: int) -> list[subprocess.CompletedProcess]:
        port, procs = free_port(), []
        for rank in range(world):
            env = {**os.environ, "OMP_WAIT_POLICY": "passive", "OMP_NUM_THREADS": "1", "RANK": str(rank)}
            env.update(WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            with (
                open(work / f"w{world}r{rank}.out", "w") as out,
                open(work / f"w{world}r{rank}.err", "w") as err,
            ):
                procs.append(subprocess.Popen(cmd, cwd=work, env=env, stdout=out, stderr=err))
        return [
            subprocess.CompletedProcess(cmd, proc.wait(), (work / f"w{world}r{r}.out").read_text(),
                                        (work / f"w{world}r{r}.err").read_text())
            for r, proc in enumerate(procs)
        ]  # fmt: skip

    assert all(done.returncode == 0 for done in ranks(2))
    assert sorted(p.name for p in (work / "sk").iterdir()) == ["rank-00000", "rank-00001"]
    grown = ranks(3)
    for done in grown:  # each rank ends (the first to fail ends the job), none with a traceback
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    last = grown[0].stderr.strip().splitlines()[-1]
    assert last.startswith("streamgnn: error: sk was written by a sharded run of 2 ranks; this run has 3"), (
        last
    )
    assert sorted(p.name for p in (work / "sk").iterdir()) == ["rank-00000", "rank-00001"]


def test_the_override_is_a_config_key_too(tmp_path):
    from streamgnn.cli._config import load_config
    from streamgnn.errors import ConfigError

    (tmp_path / "c.yaml").write_text("resume: {mismatch: allow, checkpoint: ck/ckpt-000002}\n")
    assert load_config(tmp_path / "c.yaml").resume == ResumeConfig("ck/ckpt-000002", "allow")
    (tmp_path / "c.yaml").write_text("resume: {mismatch: sometimes}\n")
    with pytest.raises(ConfigError, match="mismatch"):
        load_config(tmp_path / "c.yaml")


def test_ingest_resumes_a_store_folder_without_latest_instead_of_writing_over_it(tmp_path):
    (tmp_path / "e.csv").write_text("1,2,1\n2,3,2\n3,4,3\n")
    env = {**os.environ, "OMP_WAIT_POLICY": "passive", "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "streamgnn.cli",
        "ingest",
        "--file",
        "e.csv",
        "--store",
        "s",
        "--log-every",
        "0",
    ]
    assert subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True).returncode == 0
    (tmp_path / "s" / "LATEST").unlink()
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0 and "resumed s: 3 edges" in done.stdout, done.stdout + done.stderr
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["LATEST", "ckpt-000001", "ckpt-000002"]


def test_a_topic_with_fewer_partitions_than_its_checkpoint_recorded_is_another_topic(tmp_path):
    """A topic only gains partitions: fewer than the checkpoint recorded means it was made again, and the
    checkpoint's offsets point into a log that is gone. More is the same topic grown."""
    where = tmp_path / "ckpt-000001"
    saved = manifest_of(kafka_identity("events", 4), trainer_kind(False, 1))
    for now in (4, 8, None):  # the same, grown, or not known (a run that could not ask)
        expect = Expectation(kafka_identity("events", now), trainer_kind(False, 1), TrainConfig())
        expect.check(saved, where)
    fewer = Expectation(kafka_identity("events", 2), trainer_kind(False, 1), TrainConfig())
    with pytest.raises(
        CheckpointError, match=r"topic 'events' \(4 partitions\); this run reads .*\(2 partitions\)"
    ):
        fewer.check(saved, where)
    old = manifest_of(kafka_identity("events"), trainer_kind(False, 1))  # written before partitions were
    Expectation(kafka_identity("events", 2), trainer_kind(False, 1), TrainConfig()).check(old, where)
