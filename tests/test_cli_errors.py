"""Every command meets a wrong path, port, config encoding or YAML mistake with one line on stderr and exit
status 2, before any work, and leaves no folder behind; a run from a file counts the lines it could not
read, by line number, and fails when none was valid."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from streamgnn.cli import main
from streamgnn.codec import encode_json_lines
from streamgnn.events import EventBatch

# {taken}: a file; {folder}: a folder; {latin}: a config file in Latin-1; {dup}: a config file with a key
# given twice; {missing}: nothing there. Each case: (argv, what the one line must say).
CONFIG_CASES = {
    "produce": ["produce", "collegemsg"],
    "ingest": ["ingest", "--dataset", "collegemsg", "--store", "{new}"],
    "partition": ["partition", "--in-topic", "raw"],
    "snapshots": ["snapshots", "collegemsg", "--out", "{new}", "--every", "60"],
    "train": ["train", "--dataset", "collegemsg", "--out", "{new}"],
    "serve": ["serve"],
    "topics": ["topics"],
    "demo": ["demo", "--out", "{new}"],
    "agents source-loc": ["agents", "source-loc", "--out", "{new}"],
    "agents flocking": ["agents", "flocking", "--out", "{new}"],
    "agents train": ["agents", "train", "--out", "{new}"],
}
CASES = [
    *[
        pytest.param(
            [*argv, "--config", "{latin}"], "is not UTF-8 text: byte 0xe9 on line 2", id=f"{n}-latin1"
        )
        for n, argv in CONFIG_CASES.items()
    ],
    *[
        pytest.param([*argv, "--config", "{dup}"], "duplicate key 'kafka' (first on line 1)", id=f"{n}-dup")
        for n, argv in CONFIG_CASES.items()
    ],
    *[
        pytest.param([*argv, "--config", "{folder}"], "Is a directory", id=f"{n}-config-folder")
        for n, argv in CONFIG_CASES.items()
    ],
    *[
        pytest.param([*argv, "--config", "{unknown}"], "unknown key 'nosuchkey'", id=f"{n}-unknown-key")
        for n, argv in CONFIG_CASES.items()
    ],
    *[
        pytest.param([*argv, "--config", "{garbage}"], "is not UTF-8 text", id=f"{n}-garbage-config")
        for n, argv in CONFIG_CASES.items()
    ],
    pytest.param(["topics", "--config", "{list}"], "the top level must be a mapping", id="config-list"),
    pytest.param(
        ["train", "--kafka", "--config", "{missing}"], "cannot read config file", id="config-missing"
    ),
    pytest.param(["train", "--kafka", "--config", "{yaml}"], "line 2, column 1", id="config-yaml-syntax"),
    pytest.param(["serve", "--config", "{port}"], "serve.port must be in [0, 65535]", id="config-port"),
    pytest.param(
        ["train", "--kafka", "--config", "{ckpt}"], "train.checkpoint_dir", id="config-file-for-folder"
    ),
    pytest.param(["train", "--dataset", "collegemsg", "--out", "{taken}"], "is a file", id="train-out-file"),
    pytest.param(
        ["train", "--dataset", "collegemsg", "--out", "{taken}/x"], "is a file", id="train-out-under"
    ),
    pytest.param(
        ["train", "--dataset", "x", "--checkpoint-dir", "{taken}"], "is a file", id="train-ckpt-file"
    ),
    pytest.param(["train", "--file", "{folder}"], "is a folder", id="train-file-folder"),
    pytest.param(["train", "--file", "{missing}"], "no file", id="train-file-missing"),
    pytest.param(
        ["train", "--dataset", "x", "--metrics-port", "65536"], "must be a port", id="train-port-big"
    ),
    pytest.param(
        ["train", "--dataset", "x", "--metrics-port", "0"], "must be a port, 1 to", id="train-port-0"
    ),
    pytest.param(["ingest", "--dataset", "collegemsg", "--store", "{taken}"], "is a file", id="ingest-store"),
    pytest.param(
        ["ingest", "--file", "{folder}", "--store", "{new}"], "is a folder", id="ingest-file-folder"
    ),
    pytest.param(["snapshots", "collegemsg", "--out", "{taken}"], "is a file", id="snapshots-out-file"),
    pytest.param(
        ["snapshots", "{folder}", "--out", "{new}", "--every", "9"], "no events file", id="snap-src"
    ),
    pytest.param(["serve", "--port", "65536"], "must be a port, 0 (any free one) or 1", id="serve-port-big"),
    pytest.param(["serve", "--port", "-1"], "must be a port", id="serve-port-negative"),
    pytest.param(["serve", "--checkpoint-dir", "{taken}"], "serve.checkpoint_dir", id="serve-ckpt-file"),
    pytest.param(
        ["partition", "--in-topic", "r", "--checkpoint", "{taken}"], "is a file", id="partition-ckpt"
    ),
    pytest.param(["partition", "--in-topic", "r", "--report", "{folder}"], "is a folder", id="partition-rep"),
    pytest.param(["partition", "--in-topic", "r", "--plot", "{missing}/p.png"], "does not exist", id="plot"),
    pytest.param(["produce", "{folder}"], "is a folder; give an events file", id="produce-folder"),
    pytest.param(["produce", "{missing}.jsonl"], "no events file at", id="produce-missing"),
    pytest.param(["serve", "--log-every", "nan"], "must be a finite number of seconds", id="serve-log-nan"),
    pytest.param(["agents", "train", "--lr", "nan"], "must be a finite number > 0", id="agents-lr-nan"),
    pytest.param(["topics", "--partitions", "0"], "must be a positive integer", id="topics-partitions"),
    pytest.param(["demo", "--out", "{taken}/x"], "is a file", id="demo-out"),
    pytest.param(["agents", "flocking", "--out", "{taken}"], "is a file", id="agents-out"),
    # a folder that cannot be made although permissions allow it (as root, or a read-only mount)
    *[
        pytest.param([*argv, "/proc/nope/x"], "'/proc' is not writable", id=f"unwritable-{i}")
        for i, argv in enumerate(
            [
                ["train", "--dataset", "collegemsg", "--out"],
                ["train", "--dataset", "collegemsg", "--checkpoint-dir"],
                ["ingest", "--dataset", "collegemsg", "--store"],
                ["snapshots", "collegemsg", "--every", "9", "--out"],
                ["demo", "--out"],
                ["agents", "source-loc", "--out"],
                ["partition", "--in-topic", "r", "--checkpoint"],
            ]
        )
    ],
    *[
        pytest.param([*argv, port], "must be a port", id=f"port-{argv[0]}-{port}")
        for argv in (
            ["broker", "--port"],
            ["demo", "--port"],
            ["serve", "--port"],
            ["train", "--dataset", "x", "--metrics-port"],
        )  # fmt: skip
        for port in ("-1", "65536", "abc")
    ],
    *[
        pytest.param(argv, "no valid event in", id=f"empty-file-{argv[0]}")
        for argv in (
            ["produce", "{empty}"],
            ["ingest", "--file", "{empty}", "--store", "{new}"],
            ["train", "--file", "{empty}", "--out", "{new}", "--quiet"],
            ["snapshots", "{empty}", "--out", "{new}", "--every", "9", "--quiet"],
        )
    ],
    # a value its type lets through but the config refuses: the flag is named, not the config key alone
    *[
        pytest.param(argv, message, id=f"flag-value-{argv[-2]}")
        for argv, message in (
            (
                ["train", "--dataset", "x", "--batch-size", "0"],
                "argument --batch-size: train: batch_size must",
            ),
            (["train", "--dataset", "x", "--checkpoint-every", "-1"], "argument --checkpoint-every: train:"),
            (
                ["snapshots", "{taken}", "--out", "{new}", "--every", "9", "--start", "nan"],
                "argument --start:",
            ),
            (["agents", "flocking", "--out", "{new}", "--keep", "-1"], "argument --keep: agents: sweep:"),
            (
                ["train", "--dataset", "x", "--config", "{port}", "--batch-size", "0"],
                "argument --batch-size: train",
            ),
            (["serve", "--config", "{port}", "--log-every", "1"], "port.yaml: serve: serve.port must be"),
        )
    ],
    pytest.param(["datasets", "--bogus"], "unrecognized arguments: --bogus", id="datasets-flag"),
    pytest.param(["bench", "nosuch"], "invalid choice: 'nosuch'", id="bench-name"),
    # a benchmark's own flags: one line too, not argparse's usage block
    pytest.param(
        ["bench", "store", "--bogus"], "streamgnn bench store: error: unrecognized", id="bench-flag"
    ),
    pytest.param(["bench", "train", "--epochs", "x"], "--epochs: must be a positive", id="bench-value"),
    pytest.param(["bench", "soak", "--events", "-5"], "--events must be at least", id="bench-check"),
]


@pytest.fixture
def paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STREAMGNN_KAFKA__CONNECT_TIMEOUT_S", "0.5")  # none of these may get that far
    (tmp_path / "taken").write_text("a file")
    (tmp_path / "folder").mkdir()
    (tmp_path / "latin.yaml").write_bytes("kafka: {}\ntrain: {device: 'caf\xe9'}\n".encode("latin-1"))
    (tmp_path / "dup.yaml").write_text("kafka: {partitions: 2}\nkafka: {partitions: 3}\n")
    (tmp_path / "yaml.yaml").write_text("train: {\n")
    (tmp_path / "port.yaml").write_text("serve: {port: 70000}\n")
    (tmp_path / "ckpt.yaml").write_text("train: {checkpoint_dir: taken}\n")
    (tmp_path / "unknown.yaml").write_text("kafka: {nosuchkey: 1}\n")
    (tmp_path / "garbage.yaml").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    (tmp_path / "empty").write_text("")
    names = ("taken", "folder", "empty", "latin", "dup", "yaml", "port", "ckpt", "unknown", "garbage", "list")
    where = {n: str(tmp_path / (n if n in ("taken", "folder", "empty") else f"{n}.yaml")) for n in names}
    return {**where, "missing": str(tmp_path / "missing"), "new": str(tmp_path / "new" / "out")}


def run(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse refuses it while parsing
        return exc.code


@pytest.mark.parametrize("argv, message", CASES)
def test_a_wrong_path_port_or_config_is_one_line_and_exit_2(paths, tmp_path, capsys, argv, message):
    before = sorted(tmp_path.rglob("*"))
    code = run([a.format(**paths) for a in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "error: " in err and "Traceback" not in err, err
    assert message in err, err
    assert sorted(tmp_path.rglob("*")) == before  # no folder made, nothing written


def test_a_yaml_duplicate_in_a_nested_mapping_and_from_the_environment(tmp_path, monkeypatch, capsys):
    from streamgnn.cli._config import load_config
    from streamgnn.errors import ConfigError

    path = tmp_path / "c.yaml"
    path.write_text("train:\n  model: {memory_dim: 8}\n  batch_size: 5\n  model: {time_dim: 4}\n")
    with pytest.raises(ConfigError, match=r"line 4, column 3: duplicate key 'model' \(first on line 2\)"):
        load_config(path, env={})
    with pytest.raises(ConfigError, match="environment variable STREAMGNN_TRAIN__MODEL is not valid YAML"):
        load_config(None, env={"STREAMGNN_TRAIN__MODEL": "{a: 1, a: 2}"})
    path.write_text("train:\n  <<: {batch_size: 5}\n  batch_size: 6\n")  # a merge may repeat a key
    assert load_config(path, env={}).train.batch_size == 6


def test_a_failed_run_removes_the_folders_it_made_but_keeps_what_it_wrote(tmp_path, capsys):
    from streamgnn.cli._args import check_output_dir, forget_new_folders, remove_new_empty_folders

    forget_new_folders()
    check_output_dir(tmp_path / "a" / "b")
    check_output_dir(tmp_path / "kept" / "c")
    (tmp_path / "a" / "b" / "empty").mkdir(parents=True)
    (tmp_path / "kept" / "c").mkdir(parents=True)
    (tmp_path / "kept" / "c" / "checkpoint").write_text("resume from me")
    remove_new_empty_folders()
    assert not (tmp_path / "a").exists() and (tmp_path / "kept" / "c" / "checkpoint").exists()


# ------------------------------------------------------------------------------------------- dead letters


def _csv(tmp_path):
    """Six data lines: line 2 has two fields, line 4 a text id, line 6 deletes an edge never added (the
    store refuses it); lines 1, 3 and 5 are events."""
    path = tmp_path / "e.csv"
    path.write_text(
        "1,2,10,edge_add\n3,4\n5,6,11,edge_add\nx,7,12,edge_add\n7,8,13,edge_add\n8,9,14,edge_delete\n"
    )
    return path


def test_ingest_counts_unreadable_lines_and_refusals_with_their_line_numbers(tmp_path, capsys):
    path = _csv(tmp_path)
    store = tmp_path / "store"
    argv = [
        "ingest",
        "--file",
        str(path),
        "--columns",
        "src,dst,t,kind",
        "--store",
        str(store),
        "--log-every",
        "0",
    ]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert f"4 events read, 3 dead letters (first at {path}:line 2: expected 4 fields" in out, out
    said = re.findall(r"^dead letter at (.*?):line (\d+): (.*)$", err, flags=re.M)
    assert [(w, int(n)) for w, n, _ in said] == [(str(path), 2), (str(path), 4)], err
    assert "bad value" in said[1][2]
    refused = err.splitlines()[-1]  # the store's refusal of line 6 (row 5 of the file: eid 5)
    assert refused.startswith("dead letter at ingest (eid 5): delete") and len(err.splitlines()) == 3, err

    from streamgnn.store import TemporalGraphStore

    assert TemporalGraphStore.load(store).num_edges == 3


def test_a_file_with_no_valid_line_fails_in_one_line_and_leaves_nothing(tmp_path, capsys):
    garbage = tmp_path / "g.jsonl"
    garbage.write_text("garbage\n{not json\n\n[1, 2]\n")
    for argv in (
        ["ingest", "--file", str(garbage), "--store", str(tmp_path / "store")],
        ["snapshots", str(garbage), "--out", str(tmp_path / "sig"), "--every", "10", "--quiet"],
        ["train", "--file", str(garbage), "--out", str(tmp_path / "report"), "--quiet"],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        last = err.splitlines()[-1]
        assert last.startswith(f"streamgnn: error: no valid event in {garbage}: ") and "Traceback" not in err
        assert re.search(rf"(\d+) dead letters \(first at {re.escape(str(garbage))}:line 1: ", last), last
        assert sorted(p.name for p in tmp_path.iterdir()) == ["g.jsonl"]  # no store, signal or report


def test_snapshots_summary_counts_dead_letters(tmp_path, capsys):
    events = EventBatch.from_columns(
        src=np.arange(30) % 5, dst=np.arange(30) % 7 + 5, t=np.arange(30, dtype=float), eid=np.arange(30)
    )
    lines = encode_json_lines(events).splitlines(keepends=True)
    path = tmp_path / "e.jsonl"
    path.write_bytes(b"".join(lines[:10]) + b"not an event\n" + b"".join(lines[10:]))
    argv = ["snapshots", str(path), "--out", str(tmp_path / "sig"), "--every", "10", "--quiet"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert f"; 1 dead letter (first at {path}:line 11: invalid JSON" in out, out
    assert f"dead letter at {path}:line 11: invalid JSON" in err


def test_train_summary_names_the_files_it_wrote(tmp_path, capsys):
    path = tmp_path / "e.csv"
    rng = np.random.default_rng(0)
    rows = [
        f"{s},{d},{t}"
        for t, (s, d) in enumerate(zip(rng.integers(0, 20, 300), rng.integers(20, 40, 300), strict=True))
    ]
    path.write_text("\n".join(rows[:100] + ["1,2"] + rows[100:]) + "\n")
    out_dir = tmp_path / "report"
    (tmp_path / "c.yaml").write_text(
        "train: {batch_size: 50, window_events: 100, model: {memory_dim: 8, time_dim: 4, embedding_dim: 8}}\n"
    )
    argv = ["train", "--file", str(path), "--out", str(out_dir), "--config", str(tmp_path / "c.yaml")]
    assert main([*argv, "--quiet", "--log-every", "0"]) == 0
    out = capsys.readouterr().out
    assert "300 events in" in out and "; 1 dead letter\n" in out, out
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["summary_path"] == str(out_dir / "summary.json")
    assert summary["plot_path"] == str(out_dir / "metrics.png") and (out_dir / "metrics.png").stat().st_size
    assert summary["dead_letters"] == 1


def test_datasets_lists_every_name_the_loaders_take(capsys):
    from streamgnn import datasets
    from streamgnn.datasets import pgt

    assert main(["datasets"]) == 0
    listed = {line.split()[0] for line in capsys.readouterr().out.splitlines() if line and line[0] != " "}
    assert set(datasets.names()) | set(pgt._LOADERS) <= listed and "pedalme" in listed


def test_the_installed_command_says_it_in_one_line(tmp_path):
    """End to end, as a shell runs it: no traceback from the interpreter either."""
    (tmp_path / "c.yaml").write_bytes(b"serve: {host: '\xff'}\n")
    done = subprocess.run(
        [sys.executable, "-m", "streamgnn.cli", "serve", "--config", str(tmp_path / "c.yaml")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
    assert "is not UTF-8 text: byte 0xff on line 1" in done.stderr


def test_ingest_from_kafka_counts_what_the_source_could_not_decode(
    kafka_bootstrap, make_topic, make_events, tmp_path, capsys
):
    """The summary said "0 dead letters" for messages the source dead-lettered while decoding."""
    from kafka import KafkaProducer

    topic = make_topic(1)
    events = make_events(50)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    producer.send(topic, b"not an event")  # offset 0: decoded (and dead-lettered) before the events
    producer.send(topic, encode_json_lines(events))
    producer.flush()
    producer.close()
    store = str(tmp_path / "store")
    argv = ["ingest", "--kafka", "--bootstrap", kafka_bootstrap, "--topic", topic, "--store", store]
    assert main([*argv, "--events", "50", "--log-every", "0"]) == 0
    assert "50 events read, 1 dead letter;" in capsys.readouterr().out
