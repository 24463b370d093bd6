"""Ctrl-C (SIGINT) at any stage of ``streamgnn demo`` ends it with one line and exit status 130, no
traceback, and nothing left listening: a real process, interrupted once its output says a stage began."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys

import pytest

STAGES = {
    # the broker is up and the stream produced: the trainer and its Kafka source are starting
    "training": ([], r"^broker (127\.0\.0\.1:\d+): "),
    # the report is written: the source is closing and the service starting (its lines not printed yet)
    "before the service is up": (["--serve", "--port", "0"], r"^report: "),
}


@pytest.mark.parametrize("stage", list(STAGES))
def test_ctrl_c_at_any_stage_ends_the_demo_in_one_line(tmp_path, stage):
    extra, cue = STAGES[stage]
    cmd = [
        sys.executable,
        "-m",
        "streamgnn.cli",
        "demo",
        "--events",
        "600",
        "--quiet",
        "--out",
        str(tmp_path),
    ]
    proc = subprocess.Popen(
        [*cmd, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
    )
    try:
        seen, broker = [], None
        for line in proc.stdout:  # wait for the stage's own line, then interrupt
            seen.append(line)
            if m := re.match(r"^broker (127\.0\.0\.1:\d+): ", line):
                broker = m.group(1)
            if re.match(cue, line):
                proc.send_signal(signal.SIGINT)
                break
        assert broker and re.match(cue, seen[-1]), "".join(seen)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 130, (out, err)
        assert "Traceback" not in err + out, err
        assert err.strip().splitlines()[-1] == "streamgnn demo: interrupted", err
        assert "serving the embeddings" not in out
        host, port = broker.rsplit(":", 1)
        with socket.socket() as s:  # the local broker was stopped on the way out
            assert s.connect_ex((host, int(port))) != 0, f"{broker} still answers"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_ctrl_c_while_the_commands_load_ends_in_one_line():
    """The commands load torch and Numba (seconds) before any command runs: a Ctrl-C then is one line and
    status 130 too. The SIGINT arrives as the parser starts to load them (a real signal to the process)."""
    code = (
        "import os, signal, sys\n"
        "from streamgnn import cli\n"
        "build = cli.build_parser\n"
        "def interrupted(argv):\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    return build(argv)\n"
        "cli.build_parser = interrupted\n"
        "sys.exit(cli.main(['demo', '--help']))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip().splitlines() == ["streamgnn: interrupted"], done.stderr
    assert "usage" not in done.stdout  # it ended there: no help was printed
