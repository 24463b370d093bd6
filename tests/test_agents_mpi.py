"""Agents over real MPI ranks (``mpiexec -n 4`` from the mpich wheel): the same results as one process, bit
for bit under seeded failures, and a killed agent process the others survive (the README's commands for
source localization, which check both, run in tests/test_readme_blocks.py)."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from streamgnn.cli import main

MPIEXEC = Path(sys.executable).with_name("mpiexec")
SMALL = shlex.split(
    "--nodes 16 --communities 4 --train 120 --test 24 --fit-steps 20 --taps 3 --hidden 8 --quiet"
)


def mpirun(
    args: list[str], cwd: Path, ranks: int = 4, launcher: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "passive", "PYTHONWARNINGS": "ignore"}
    cmd = [str(MPIEXEC), *launcher, "-n", str(ranks), sys.executable, "-m", "streamgnn.cli", "agents", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=cwd, env=env)


def on_four_ranks_and_in_process(args: list[str], tmp_path: Path, report: str) -> tuple[dict, dict]:
    """The CLI under ``mpiexec -n 4`` and in this process; both JSON reports."""
    proc = mpirun([*args, "--out", "mpi"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert main(["agents", *args, "--out", str(tmp_path / "local")]) == 0
    return tuple(json.loads((tmp_path / d / report).read_text()) for d in ("mpi", "local"))


def test_the_test_extra_installs_a_working_mpiexec():
    assert MPIEXEC.exists(), "pip install streamgnn[test] brings mpiexec (the mpich wheel)"


def test_decentralized_training_on_four_ranks_matches_one_process(tmp_path):
    args = ["train", *SMALL, *shlex.split("--fit-steps 12 --compression none,quant:4 --failure-p 0.2")]
    mpi, local = (
        r["decentralized"] for r in on_four_ranks_and_in_process(args, tmp_path, "decentralized.json")
    )
    for spec in ("none", "quant:4"):
        # the same seeded links deliver, so every agent sends the same messages
        assert mpi[spec]["mixing_bytes"] == local[spec]["mixing_bytes"] > 0
        assert mpi[spec]["feature_bytes"] == local[spec]["feature_bytes"] > 0
        # gradients are summed in another order over MPI: equal up to rounding
        assert mpi[spec]["loss"] == pytest.approx(local[spec]["loss"], rel=1e-3)
        assert abs(mpi[spec]["accuracy"] - local[spec]["accuracy"]) < 0.05
    assert mpi["quant:4"]["mixing_bytes"] < 0.2 * mpi["none"]["mixing_bytes"]


def test_flocking_agents_on_four_ranks_fly_exactly_as_one_process(tmp_path):
    args = ["flocking"] + shlex.split(
        "--agents 12 --sim-steps 15 --train-episodes 2 --test-episodes 2 --fit-steps 15 --hidden 8 "
        "--probs 0,0.3 --variants plain,res+normalized+hold-last --quiet"
    )
    mpi, local = on_four_ranks_and_in_process(args, tmp_path, "flocking.json")
    assert mpi["velocity_variance"] == local["velocity_variance"]
    assert mpi["baselines"]["centralized"] < mpi["baselines"]["no_control"]


def run_bounded(cmd: list[str], cwd: Path, timeout_s: float = 500) -> subprocess.CompletedProcess:
    """``cmd`` in its own session; past ``timeout_s`` every process of it is killed and the test fails (a
    hang must end the test, not the suite)."""
    import signal

    env = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "passive", "PYTHONWARNINGS": "ignore"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, text=True, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(cmd)} did not end within {timeout_s} s")
    finally:  # also when pytest-timeout (or Ctrl-C) ends the test first: no rank outlives it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


KILL = shlex.split(
    "agents source-loc --nodes 12 --communities 3 --train 60 --test 12 --taps 3 --hidden 8 --fit-steps 10 "
    "--probs 0 --variants plain --p-out 0.4 --fault-tolerant --deadline 3 --quiet --out out"
)


NEEDED = {"startup": "it shared the setup", "setup": "it shared the setup", "1": "it gathered the results"}
NEEDED["gather"] = NEEDED["1"]


@pytest.mark.parametrize("when", ["startup", "setup", "1", "gather"])
@pytest.mark.parametrize("rank", [0, 2])
def test_an_agent_killed_at_any_moment_ends_only_itself_or_the_job_it_was_needed_for(tmp_path, rank, when):
    """A rank killed before its MPI start-up finished, before the setup (rank 0's models) was shared, in
    the rounds, or before the results were gathered: the others notice it at once (hydra's record, not a
    timeout) and nobody waits for it. Without rank 2 the others finish and report; without rank 0 (which
    trains, shares and reports) each of them ends with one line naming it and what was missing."""
    cmd = ["mpiexec", "-disable-auto-cleanup", "-n", "3", "streamgnn", *KILL]
    proc = run_bounded([*cmd, "--die-rank", str(rank), "--die-round", when], tmp_path)
    assert proc.returncode == 128 + 9, proc.stderr[-3000:]  # the killed agent's exit, as hydra saw it
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    if rank == 0:
        for survivor in (1, 2):
            line = f"streamgnn: error: rank {survivor}: rank 0 ended before {NEEDED[when]}"
            assert line in proc.stderr, proc.stderr[-3000:]
        assert not (tmp_path / "out/source_loc.json").exists()
        return
    summary = json.loads((tmp_path / "out/source_loc.json").read_text())
    assert summary["unreported_ranks"] == [2]
    seen = {int(r): f for r, f in summary["failed_ranks_seen"].items()}
    assert all(f == [2] for f in seen.values())  # nobody else is taken for failed ...
    assert seen or when == "gather"  # ... and its neighbors saw it, unless it died after the rounds
    assert all(0.0 <= a <= 1.0 for a in summary["accuracy"]["bernoulli"]["plain"])


DEAF = """import signal

_install = signal.signal


def _deaf(signum, handler):  # hydra's notice never reaches a rank's handler: it is ignored
    return _install(signum, signal.SIG_IGN if signum == signal.SIGUSR1 else handler)


signal.signal = _deaf
"""


def test_a_rank_that_never_hears_hydras_notice_still_ends_its_wait_on_a_killed_rank_0(tmp_path):
    """The survivors wait for rank 0's answer to their report with no deadline, on hydra's record alone.
    Here SIGUSR1 never reaches them (every process ignores it, as when a library takes the signal over or
    the notice is lost): they still read the record while they wait, so they end, naming rank 0, instead
    of waiting forever (a job hung this way for 84 minutes on a loaded host)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(DEAF)
    cmd = ["env", f"PYTHONPATH={site}", "mpiexec", "-disable-auto-cleanup", "-n", "3", "streamgnn", *KILL]
    proc = run_bounded([*cmd, "--die-rank", "0", "--die-round", "gather"], tmp_path, timeout_s=240)
    assert proc.returncode == 128 + 9, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for survivor in (1, 2):
        line = f"streamgnn: error: rank {survivor}: rank 0 ended before it gathered the results"
        assert line in proc.stderr, proc.stderr[-3000:]


@pytest.mark.parametrize(
    "args, message",
    [
        (["source-loc", "--deadline", "-1"], "--deadline: must be a finite number > 0"),
        (["source-loc", "--fault-tolerant"], "--fault-tolerant needs --deadline"),
        (["source-loc", "--die-rank", "1"], "--die-rank 1: this job has ranks 0 to 0"),
        (["source-loc", "--die-round", "soon"], "--die-round: must be an int >= 0"),
        (["train", "--compression", "none,bogus:9"], "compression must be none, topk:FRACTION or quant:BITS"),
        (["train", "--failure-p", "1.5"], "failure_p must be in [0, 1)"),
        (["source-loc", "--keep", "1.5"], "keep (link keep probability) must be in (0, 1], got 1.5"),
    ],
)
def test_agents_arguments_are_checked_before_any_work(tmp_path, capsys, monkeypatch, args, message):
    import streamgnn.agents.experiments as experiments

    def no_work(*_, **__):
        raise AssertionError("work started before the arguments were checked")

    for name in ("train_source_loc", "run_decentralized"):
        monkeypatch.setattr(experiments, name, no_work)
    try:
        code = main(["agents", *args, "--quiet", "--out", str(tmp_path / "out")])
    except SystemExit as exc:  # argparse's refusal
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_hydras_list_of_ended_ranks_is_read_with_its_ranges():
    from streamgnn.agents.liveness import parse_ranks

    assert parse_ranks("") == []
    assert parse_ranks("0") == [0]
    assert parse_ranks("1,3") == [1, 3]
    assert parse_ranks("0-2,5") == [0, 1, 2, 5]
