"""A checkpoint folder of any shape (``LATEST`` missing, dangling, looping, pointing outside or at a device,
garbage; checkpoints truncated, missing, symlinked, replaced by devices; junk beside them) is either resumed
from a checkpoint that verifies, which the job names, or refused in one line; the saves of a resumed run
never remove a checkpoint it did not resume from (retention removes only older ones). Every checkpoint file
is read with a limit: a link to ``/dev/zero`` or a huge file is refused before it is read."""

from __future__ import annotations

import hashlib
import os
import re
import resource
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamgnn import checkpoint
from streamgnn.errors import CheckpointError
from streamgnn.jobs.resume import check_folder, choose
from streamgnn.train import checkpoint as trainer_checkpoint

KIND = "trainer"


def write(root: Path, number: int) -> Path:
    """One small real container of ``KIND`` (arrays and values), as a trainer writes it."""
    rng = np.random.default_rng(number)
    arrays = {"state": rng.integers(0, 255, 300).astype(np.uint8), "store.edge_t": rng.random(50)}
    return checkpoint.save(root, KIND, arrays, {"steps": number}, number=number, keep=10)


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("template") / "ck"
    for n in (1, 2, 3):
        write(root, n)
    return root


def tree(root: Path) -> dict[str, str]:
    """Every entry under ``root`` (links not followed) and what it is: a file's digest, a link's target."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "-> " + os.readlink(p)
            elif p.is_file() and p.stat().st_size > 1 << 20:  # a sparse giant: its size says enough
                out[rel] = f"file of {p.stat().st_size} bytes"
            elif p.is_file():
                out[rel] = "file " + hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                out[rel] = "dir"
    return out


LATEST = ["valid", "older", "missing", "dangling", "loop", "outside", "garbage", "huge", "devzero", "folder"]
DAMAGE = ["none", "none", "truncate", "no-manifest", "devzero-array", "symlinked", "empty"]


def shape(root: Path, outside: Path, latest: str, damage: dict[int, str], junk: list[str]) -> None:
    """Make the template copy ``root`` into one folder shape."""
    for n, how in damage.items():
        d = root / f"ckpt-{n:06d}"
        if how == "absent":
            shutil.rmtree(d)
        elif how == "truncate":
            f = d / "store.edge_t.npy"
            f.write_bytes(f.read_bytes()[:100])
        elif how == "no-manifest":
            (d / "manifest.json").unlink()
        elif how == "devzero-array":
            (d / "state.npy").unlink()
            (d / "state.npy").symlink_to("/dev/zero")
        elif how == "symlinked":  # moved to other storage by hand, a link left in its place
            target = outside / f"moved-{n}"
            shutil.move(d, target)
            d.symlink_to(target)
        elif how == "empty":
            shutil.rmtree(d)
            d.mkdir()
    present = checkpoint.numbers(root)
    name, digest = checkpoint.read_latest(root)
    (root / "LATEST").unlink()
    if latest in ("valid", "older") and present:
        pick = root / f"ckpt-{present[-1 if latest == 'valid' else 0]:06d}"
        try:
            checkpoint.manifest(pick)
            digest = hashlib.sha256((pick / "manifest.json").read_bytes()).hexdigest()
            name = pick.name
        except CheckpointError:
            pass  # LATEST names the damaged one it was written for
        checkpoint.write_latest(root, name, digest)
    elif latest == "dangling":
        (root / "LATEST").symlink_to(root / "nowhere")
    elif latest == "loop":
        (root / "LATEST").symlink_to(root / "LATEST")
    elif latest == "outside":
        (outside / "LATEST").write_bytes(f"{name} {digest}\n".encode())
        (root / "LATEST").symlink_to(outside / "LATEST")
    elif latest == "garbage":
        (root / "LATEST").write_bytes(b"\x00ckpt-000002\xff")
    elif latest == "huge":
        with open(root / "LATEST", "wb") as f:
            f.truncate(1 << 34)  # sparse: 16 GiB that a whole read would try to hold
    elif latest == "devzero":
        (root / "LATEST").symlink_to("/dev/zero")
    elif latest == "folder":
        (root / "LATEST").mkdir()
    for j in junk:
        if j == "file-named-ckpt":
            (root / "ckpt-000009").write_text("not a folder")
        elif j == "notes":
            (root / "notes").mkdir()
            (root / "notes" / "x").write_text("x")
        elif j == "tmp":
            (root / ".tmp-ckpt-000008-1").mkdir()
        elif j == "bad-name":
            (root / "ckpt-abc").mkdir()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    latest=st.sampled_from(LATEST),
    damage=st.fixed_dictionaries({n: st.sampled_from([*DAMAGE, "absent"]) for n in (1, 2, 3)}),
    junk=st.lists(st.sampled_from(["file-named-ckpt", "notes", "tmp", "bad-name"]), unique=True, max_size=3),
)
def test_any_folder_is_resumed_from_a_verified_checkpoint_or_refused_and_nothing_else_is_lost(
    template, tmp_path_factory, latest, damage, junk
):
    base = tmp_path_factory.mktemp("shape")
    root, outside = base / "ck", base / "outside"
    outside.mkdir()
    shutil.copytree(template, root, symlinks=True)
    shape(root, outside, latest, damage, junk)
    before, elsewhere = tree(root), tree(outside)
    try:
        chosen, note = choose(root, None)
        if chosen is not None:  # the job's load verifies every byte before it trains
            checkpoint.verify(chosen)
    except CheckpointError as exc:
        message = str(exc)
        assert "\n" not in message and message
        if checkpoint.numbers(root):  # it lists what is there
            assert any(f"ckpt-{n:06d}" in message for n in checkpoint.numbers(root)), message
        assert tree(root) == before and tree(outside) == elsewhere  # refused: nothing touched
        return
    if chosen is None:  # a fresh start only where no checkpoint and no LATEST is
        assert not checkpoint.numbers(root) and not os.path.lexists(root / "LATEST")
        return
    usable = latest in ("valid", "older") and not note
    if not usable:
        assert note and chosen.name in note  # and the job says which, and why it is not LATEST's
    resumed = int(chosen.name.split("-")[1])
    checkpoint.save(root, KIND, {"state": np.zeros(3, np.uint8)}, {}, number=resumed + 1, keep=2)  # retention
    after = tree(root)
    for rel, what in before.items():  # all that was there stays, but older checkpoints retention removed
        top = rel.split("/")[0]
        if top == "LATEST" or top.startswith(".tmp-"):  # rewritten; a killed writer's leftovers, cleared
            continue
        number = re.fullmatch(r"ckpt-(\d{6})", top)
        if number and int(number.group(1)) < resumed and not before[top].startswith("file"):
            continue
        assert after.get(rel) == what, f"{rel} changed or went"
    assert tree(outside) == elsewhere  # a symlinked checkpoint's target is never touched


def test_the_issue_s_cases_missing_dangling_and_looping_latest(tmp_path, template):
    root = tmp_path / "ck"
    shutil.copytree(template, root)
    (root / "LATEST").unlink()
    chosen, note = choose(root, None)
    assert chosen == root / "ckpt-000003" and "LATEST is missing" in note
    for target in (root / "nowhere", root / "LATEST"):
        (root / "LATEST").unlink(missing_ok=True)
        (root / "LATEST").symlink_to(target)
        with pytest.raises(CheckpointError, match=r"LATEST is damaged: it is a symlink.*ckpt-000003"):
            choose(root, None)


def test_a_newer_checkpoint_than_latest_is_resumed_from_not_replaced(tmp_path, template):
    """Left by a run stopped between writing a checkpoint and LATEST: the newest that verifies is resumed;
    a newer one that does not verify is refused, not replaced."""
    root = tmp_path / "ck"
    shutil.copytree(template, root)
    checkpoint.write_latest(root, *checkpoint.read_latest(root))
    man = (root / "ckpt-000002" / "manifest.json").read_bytes()
    checkpoint.write_latest(root, "ckpt-000002", hashlib.sha256(man).hexdigest())
    chosen, note = choose(root, None)
    assert chosen == root / "ckpt-000003" and "after it verifies" in note
    (root / "ckpt-000003" / "state.npy").write_bytes(b"torn")
    with pytest.raises(
        CheckpointError,
        match="ckpt-000003 after ckpt-000002, the newest checkpoint that verifies, which do not verify",
    ):
        choose(root, None)


def test_a_checkpoint_is_never_written_inside_one(tmp_path, template):
    root = tmp_path / "ck"
    shutil.copytree(template, root)
    for inside in (root / "ckpt-000002", root / "ckpt-000002" / "more"):
        with pytest.raises(CheckpointError, match="checkpoint ckpt-000002 of .*--resume-from"):
            check_folder(inside, sharded=False)
        with pytest.raises(CheckpointError, match="never into one"):
            write(inside, 4)
    assert sorted(p.name for p in (root / "ckpt-000002").iterdir()) == sorted(
        p.name for p in (template / "ckpt-000002").iterdir()
    )


def test_resuming_a_named_checkpoint_never_replaces_others(tmp_path, template):
    root = tmp_path / "ck"
    shutil.copytree(template, root)
    with pytest.raises(CheckpointError, match="holds ckpt-000003, newer than ckpt-000002"):
        choose(root, root / "ckpt-000002")
    with pytest.raises(CheckpointError, match="already holds checkpoints"):
        choose(tmp_path / "other" if write(tmp_path / "other", 1) else None, root / "ckpt-000002")
    assert choose(tmp_path / "new", root / "ckpt-000002") == (root / "ckpt-000002", "")
    assert choose(root, root / "ckpt-000003") == (root / "ckpt-000003", "")
    with pytest.raises(CheckpointError, match="is not a checkpoint"):
        choose(tmp_path / "new", root)
    (root / "rank-00000").mkdir()
    with pytest.raises(CheckpointError, match="holds a sharded run's checkpoints"):
        choose(root, None)
    with pytest.raises(CheckpointError, match="holds a one-process or replicated run's"):
        check_folder(root, sharded=True)


def test_retention_removes_a_symlinked_checkpoint_as_a_link_and_leaves_its_target(tmp_path):
    root, moved = tmp_path / "ck", tmp_path / "elsewhere"
    write(root, 1)
    shutil.move(root / "ckpt-000001", moved)
    (root / "ckpt-000001").symlink_to(moved)
    for n in (2, 3):
        checkpoint.save(root, KIND, {"a": np.arange(n)}, {}, number=n, keep=2)
    assert checkpoint.numbers(root) == [2, 3] and not os.path.lexists(root / "ckpt-000001")
    assert (moved / "manifest.json").is_file()  # the target is not this folder's to delete


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize("what", ["LATEST", "manifest.json", "manifest.sha256", "state.npy", "huge-array"])
def test_no_checkpoint_file_is_read_before_its_size_is_checked(tmp_path, template, what):
    """A link to ``/dev/zero`` (endless) or a 16 GiB sparse file in place of any checkpoint file is refused
    in one line naming it, and the process does not grow by what a whole read would take."""
    root = tmp_path / "ck"
    shutil.copytree(template, root)
    d = root / "ckpt-000003"
    path = root / "LATEST" if what == "LATEST" else d / ("state.npy" if what == "huge-array" else what)
    path.unlink()
    if what == "huge-array":
        with open(path, "wb") as f:
            f.truncate(1 << 34)
    else:
        path.symlink_to("/dev/zero")
    grown = _rss_mb()
    with pytest.raises(CheckpointError) as err:
        trainer_checkpoint.load(root)
    assert _rss_mb() - grown < 200
    message = str(err.value)
    assert "\n" not in message
    assert (
        "symlink" if what == "LATEST" else "regular file" if what != "huge-array" else "17,179,869,184"
    ) in (message), message
