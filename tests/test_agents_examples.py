"""The agents' examples run as written (small settings; the README's agents blocks run in
tests/test_readme_blocks.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MPIEXEC = Path(sys.executable).with_name("mpiexec")


def run(cmd: list[str], tmp_path: Path) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "passive", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_robustness_example_compares_plain_and_robust_networks(tmp_path):
    out = run([sys.executable, str(ROOT / "examples/agents_robust.py"), "--steps", "30"], tmp_path)
    rows = {line.split()[0]: [float(v) for v in line.split()[1:]] for line in out.splitlines()[1:]}
    assert set(rows) == {"plain", "robust"} and all(len(v) == 3 for v in rows.values())


def test_mpi_example_matches_the_one_process_run(tmp_path):
    cmd = [str(MPIEXEC), "-n", "2", sys.executable, str(ROOT / "examples/agents_mpi.py"), "--steps", "20"]
    out = run(cmd, tmp_path)
    assert "2 ranks, 40 agents, link failures 0.3" in out and "equal to the one-process run: True" in out


def test_decentralized_example_runs(tmp_path):  # over MPI ranks: test_agents_mpi trains on four
    out = run([sys.executable, str(ROOT / "examples/agents_decentralized.py"), "--steps", "5"], tmp_path)
    assert "mixing messages     none" in out and "mixing messages  quant:8" in out
