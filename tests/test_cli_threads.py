"""Every ``streamgnn`` command sets passive OpenMP waiting and explicit pool sizes before torch and Numba
load (``streamgnn.cli._threads``), and a user's own settings win. Checked in fresh processes: the libraries
read these variables once, when they load."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from streamgnn.cli._threads import POOL_VARIABLES

# what the console script runs (``streamgnn = streamgnn.cli:main``, whose parser loads the commands),
# then what the libraries took
PROBE = """
import json, os, sys
import streamgnn.cli
from streamgnn.cli._threads import POOL_VARIABLES
streamgnn.cli.build_parser()  # what main() does first: the commands load torch
loaded_torch = "torch" in sys.modules
import numba, torch
print(json.dumps({
    "env": {k: os.environ.get(k) for k in ("OMP_WAIT_POLICY", *POOL_VARIABLES)},
    "cpus": len(os.sched_getaffinity(0)),
    "torch_loaded_by_cli": loaded_torch,
    "torch_threads": torch.get_num_threads(),
    "numba_threads": numba.config.NUMBA_NUM_THREADS,
}))
"""


def probe(**env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY" and k not in POOL_VARIABLES}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_cli_sets_passive_waiting_and_pool_sizes_before_torch_loads():
    got = probe()
    cpus = str(got["cpus"])
    assert got["env"] == {"OMP_WAIT_POLICY": "passive", **dict.fromkeys(POOL_VARIABLES, cpus)}
    # torch was loaded by the CLI's own imports, after the settings: its pool has the size they name
    assert got["torch_loaded_by_cli"]
    assert got["torch_threads"] == got["cpus"]
    assert got["numba_threads"] == got["cpus"]


def test_a_users_own_settings_win():
    got = probe(OMP_WAIT_POLICY="active", OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    assert got["env"]["OMP_WAIT_POLICY"] == "active"
    assert got["env"]["OMP_NUM_THREADS"] == "1"
    assert got["torch_threads"] == 1
    assert got["numba_threads"] == 1
    # what the user left unset is set to the user's thread count (torch reads MKL's too)
    assert got["env"]["MKL_NUM_THREADS"] == "1"


def test_train_and_demo_pin_torch_to_their_thread_flag():
    from streamgnn.cli import build_parser

    parser = build_parser()
    for argv in (["train", "--dataset", "jodie_wikipedia"], ["demo"]):
        assert parser.parse_args(argv).threads == 1
        assert parser.parse_args([*argv, "--threads", "2"]).threads == 2
