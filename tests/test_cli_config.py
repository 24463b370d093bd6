"""One CLI: every subcommand explains itself with an example, `--config` files map onto the config
dataclasses (unknown keys and wrong types named, environment and flags override), errors are one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from streamgnn.cli import build_parser, command_modules, main
from streamgnn.cli._config import config_from_args, load_config
from streamgnn.errors import ConfigError


@pytest.mark.parametrize("command", [c for c in command_modules() if c != "bench"])
def test_every_subcommand_helps_with_an_example(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: streamgnn {command}") and "example" in out


def test_top_level_and_bench_help(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0 and "learning on graphs that never stop changing" in capsys.readouterr().out
    assert main(["bench", "--help"]) == 0  # bench passes flags on, so it answers --help itself
    out = capsys.readouterr().out
    assert out.startswith("usage: streamgnn bench") and "example" in out and "serve" in out
    assert main(["bench"]) == 2  # a name is needed to run one
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "store", "--help"])  # the benchmark's own options, under this command's name
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("usage: streamgnn bench store [-h]")


def test_config_file_maps_onto_the_dataclasses(tmp_path):
    path = tmp_path / "c.yaml"
    # merge: a removed switch an older file may still name with the value every model now has
    path.write_text(
        "train:\n  batch_size: 50\n  model: {memory_dim: 32, merge: mlp}\nstore: {allowed_lateness: inf}\n"
    )
    cfg = load_config(path, env={"STREAMGNN_TRAIN__MODEL__TIME_DIM": "16", "STREAMGNN_KAFKA_BOOTSTRAP": "x"})
    assert cfg.train.batch_size == 50 and cfg.train.model.memory_dim == 32 and cfg.train.model.time_dim == 16
    assert cfg.store.allowed_lateness == float("inf") and cfg.kafka.bootstrap == "localhost:9092"
    cfg = load_config(path, env={"STREAMGNN_TRAIN__BATCH_SIZE": "70"}, overrides={"train.batch_size": 90})
    assert cfg.train.batch_size == 90  # flags win over the environment, which wins over the file


@pytest.mark.parametrize(
    "text, env, message",
    [
        ("train: {batch_sise: 5}\n", {}, "unknown key 'batch_sise' for TrainConfig"),
        ("train: {model: {memory_dims: 5}}\n", {}, "train: model: unknown key 'memory_dims' for TGNConfig"),
        ("trian: {}\n", {}, "unknown key 'trian' for JobConfig"),
        ("train: {batch_size: '200'}\n", {}, "train: batch_size: expected int, got '200'"),
        ("train: {batch_size: 0}\n", {}, "batch_size must be >= 1"),
        ("serve: {metric: l2}\n", {}, "serve: metric: expected one of ['cosine', 'dot'], got 'l2'"),
        (
            "train: {model: {variant: gru}}\n",
            {},
            "c.yaml: train: model: variant: unknown model variant 'gru'; known variants: dygformer, jodie",
        ),
        ("train: {model: {merge: linear_skip}}\n", {}, "c.yaml: TGNConfig.merge='linear_skip' is no"),
        ("[1, 2]\n", {}, "the top level must be a mapping"),
        ("train: {\n", {}, "is not valid YAML"),
        ("", {"STREAMGNN_SERVE__PORTT": "1"}, "unknown key 'portt' for ServeConfig"),
    ],
)
def test_config_mistakes_are_named(tmp_path, text, env, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path, env=env)
    assert message in str(err.value)


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert main(["serve", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read config file" in capsys.readouterr().err
    (tmp_path / "c.yaml").write_text("serve: {colour: blue}\n")
    assert main(["serve", "--config", str(tmp_path / "c.yaml")]) == 2
    assert "unknown key 'colour' for ServeConfig" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--file", str(tmp_path / "nope.csv")])
    assert exit_.value.code == 2 and "argument --file: no file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--dataset", "x", "--file", str(tmp_path / "c.yaml")])
    assert exit_.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


# What ``streamgnn ARGS`` loads, in a fresh process: the console script's ``main``, then its modules.
LOADS = """
import json, sys
from streamgnn.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(m for m in ("torch", "numba") if m in sys.modules)), file=sys.stderr)
"""


@pytest.mark.parametrize("argv", [["--help"], ["bench", "--help"], ["datasets"], ["train", "--help"]])
def test_a_command_loads_torch_and_numba_only_where_it_needs_them(argv, monkeypatch):
    """Only the command a run names is built (``build_parser``): ``streamgnn --help``, ``bench --help``
    and ``datasets`` load neither library (seconds of CPU each, in every process); ``train --help`` shows
    the config classes' defaults, which load both. The help is the one of the parser with every command
    built."""
    env = {**os.environ, "COLUMNS": "100"}
    done = subprocess.run(
        [sys.executable, "-c", LOADS, *argv], env=env, capture_output=True, text=True, check=True
    )
    loaded = json.loads(done.stderr.strip().splitlines()[-1])
    assert loaded == (["numba", "torch"] if argv[0] == "train" else [])
    monkeypatch.setenv("COLUMNS", "100")
    whole = build_parser()
    if argv == ["--help"]:
        assert done.stdout == whole.format_help()
    elif argv[0] == "train":
        assert done.stdout == whole._subparsers._group_actions[0].choices["train"].format_help()
        assert "(default 200)" in done.stdout  # --batch-size's, from TrainConfig


@pytest.mark.parametrize("command", command_modules())
def test_a_command_built_alone_helps_as_when_every_command_is_built(command):
    alone = build_parser([command])._subparsers._group_actions[0].choices[command]
    built = build_parser()._subparsers._group_actions[0].choices[command]
    assert alone.format_help() == built.format_help()


def test_parser_builds_every_command():
    assert {"serve", "train", "ingest", "topics", "bench", "demo", "produce"} <= set(
        build_parser()._subparsers._group_actions[0].choices
    )


# Each subcommand's sections, as its parser reads them: (argv before --config, file, check of the JobConfig).
SECTIONS = [
    (["produce"], "produce: {source: collegemsg, rate: 50.0}\nkafka: {events_topic: raw, partitions: 3}",
     lambda c: c.produce.source == "collegemsg" and c.produce.rate == 50.0 and c.kafka.partitions == 3),
    (["ingest", "--kafka", "--store", "s"], "store: {num_partitions: 3, partitioner: {name: ldg}}",
     lambda c: c.store.num_partitions == 3 and c.store.partitioner.name == "ldg"),
    (["partition"], "kafka: {raw_topic: r}\npartition: {partitioner: {name: ldg, buffer_edges: 4}}",
     lambda c: c.partition.partitioner.buffer_edges == 4 and c.kafka.partitions == 8),  # its own default
    (["snapshots", "x", "--out", "o"], "snapshots: {spec: {every: 10, kind: window}, target: links}",
     lambda c: c.snapshots.spec.every == 10.0 and c.snapshots.target == "links"
     and c.store.allowed_lateness == 0.0),  # a replay's default, not the store's infinity
    (["agents", "source-loc"], "agents: {source_loc: {nodes: 12}, sweep: {probs: [0, 0.5], fit: {lr: 0.1}}}",
     lambda c: c.agents.source_loc.nodes == 12 and c.agents.sweep.probs == (0.0, 0.5)
     and c.agents.sweep.fit.lr == 0.1),
    (["agents", "flocking"], "agents: {flocking: {env: {agents: 9}, test_episodes: 2}}",
     lambda c: c.agents.flocking.env.agents == 9 and c.agents.flocking.test_episodes == 2
     and c.agents.sweep.fit.steps == 600 and c.agents.sweep.taps == 3),  # the task's own defaults
    (["agents", "train"],
     "agents: {decentralized: {compressions: [none, 'topk:0.1'], train: {mix_rate: 0.5}}}",
     lambda c: c.agents.decentralized.compressions == ("none", "topk:0.1")
     and c.agents.decentralized.train.mix_rate == 0.5),
    (["train", "--kafka"], "train: {model: {variant: jodie}}", lambda c: c.train.model.variant == "jodie"),
    (["serve"], "serve: {port: 8123}", lambda c: c.serve.port == 8123),
    (["topics"], "kafka: {dead_letter_topic: dlq}", lambda c: c.kafka.dead_letter_topic == "dlq"),
    (["partition"], "partition: {allowed_lateness: 60}", lambda c: c.partition.allowed_lateness == 60.0),
]  # fmt: skip


@pytest.mark.parametrize(
    "argv, text, check", SECTIONS, ids=lambda v: " ".join(v) if isinstance(v, list) else ""
)
def test_each_subcommand_reads_its_sections_from_the_config_file(tmp_path, argv, text, check):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    args = build_parser().parse_args([*argv, "--config", str(path)])
    assert check(config_from_args(args))


def test_flags_override_the_file_and_one_flag_can_set_several_keys(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "kafka: {partitions: 4}\nagents: {decentralized: {train: {seed: 1}}, source_loc: {seed: 1}}\n"
    )
    args = build_parser().parse_args(
        ["partition", "--config", str(path), "--partitions", "2", "--buffer-edges", "3"]
    )
    cfg = config_from_args(args)
    assert cfg.kafka.partitions == 2 and cfg.partition.partitioner.buffer_edges == 3
    assert (
        config_from_args(build_parser().parse_args(["partition", "--config", str(path)])).kafka.partitions
        == 4
    )
    args = build_parser().parse_args(
        ["agents", "train", "--config", str(path), "--seed", "7", "--batch", "5"]
    )
    cfg = config_from_args(args).agents
    assert cfg.decentralized.train.seed == cfg.source_loc.seed == 7 and cfg.decentralized.train.batch == 5
    assert cfg.decentralized.train.tracking  # the seed no longer lands in another field
    args = build_parser().parse_args(["snapshots", "x", "--out", "o", "--every", "5", "--undirected"])
    spec = config_from_args(args).snapshots.spec
    assert spec.every == 5.0 and spec.undirected and not spec.degree_features


def test_demo_takes_the_train_section_over_its_own_settings(tmp_path):
    from streamgnn.cli import demo

    path = tmp_path / "c.yaml"
    path.write_text("train: {batch_size: 100, publish_every: 5}\n")
    cfg = demo.train_config(build_parser().parse_args(["demo", "--events", "3000", "--config", str(path)]))
    assert cfg.batch_size == 100 and cfg.publish_every == 5  # the file's
    # the demo's own for 3,000 events: on a budget, windows of its 1% sample (at least 50 events)
    assert cfg.window_events == 50 and cfg.checkpoint_every == 200 and cfg.follow.mode == "budget"
    every = demo.train_config(
        build_parser().parse_args(["demo", "--events", "3000", "--follow", "every_event"])
    )
    assert every.follow.mode == "every_event" and every.window_events == 500  # test-then-train: every event


@pytest.mark.parametrize(
    "argv, text, message",
    [
        (["produce"], "produce: {rat: 5}", "produce: unknown key 'rat' for ProduceConfig"),
        (["produce"], "produce: {rate: fast}", "produce: rate: expected float | None, got 'fast'"),
        (["ingest", "--dataset", "collegemsg", "--store", "s"], "store: {num_partitons: 2}",
         "unknown key 'num_partitons'"),
        (["partition"], "partition: {partitioner: {buffer_edge: 4}}",
         "partition: partitioner: unknown key 'buffer_edge' for PartitionerConfig"),
        (["snapshots", "x", "--out", "o"], "snapshots: {spec: {every: 10, wieght: count}}",
         "snapshots: spec: unknown key 'wieght' for SnapshotSpec"),
        (["snapshots", "x", "--out", "o"], "snapshots: {target: edges}",
         "expected one of ['none', 'links', 'node']"),
        (["agents", "source-loc", "--out", "a"], "agents: {source_loc: {node: 5}}",
         "agents: source_loc: unknown key 'node' for SourceLocConfig"),
        (["agents", "flocking", "--out", "a"], "agents: {flocking: {env: {agents: many}}}",
         "agents: flocking: env: agents: expected int, got 'many'"),
        (["demo"], "train: {lr: high}", "train: lr: expected float, got 'high'"),
    ],
)  # fmt: skip
def test_every_subcommand_names_the_file_and_the_bad_key_in_one_line(
    tmp_path, monkeypatch, capsys, argv, text, message
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text(text + "\n")
    assert main([*argv, "--config", "c.yaml"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("streamgnn: error: c.yaml: ") and message in err, err


def test_snapshots_run_from_a_config_file(tmp_path):
    from streamgnn.codec import encode_json_lines
    from streamgnn.events import EventBatch
    from streamgnn.snapshots.files import read_signal

    events = EventBatch.from_columns(
        src=np.arange(50) % 7,
        dst=(np.arange(50) * 3) % 11 + 7,
        t=np.arange(50, dtype=float),
        eid=np.arange(50),
    )
    (tmp_path / "e.jsonl").write_bytes(encode_json_lines(events))
    (tmp_path / "c.yaml").write_text(
        "snapshots: {spec: {every: 10, kind: window, weight: count}, target: links, links: {negatives: 2}}\n"
    )
    out = tmp_path / "sig"
    argv = ["snapshots", str(tmp_path / "e.jsonl"), "--out", str(out), "--config", str(tmp_path / "c.yaml")]
    assert main([*argv, "--quiet"]) == 0
    signal = read_signal(out)
    # cut at t = 10, 20, 30, 40 (and 50, which has no next snapshot to label): windows of 10 events each
    assert len(signal.edge_weights) == 4 and all(w.sum() == 10 for w in signal.edge_weights)
    assert signal.meta["spec"]["kind"] == "window" and signal.meta["target"] == "links"
    assert signal.meta["lateness"] == 0.0


@pytest.mark.parametrize(
    "argv",
    [
        ["partition", "--in-topic", "raw"],
        ["snapshots", "events", "--out", "sig", "--every", "60"],
        ["ingest", "--kafka", "--store", "s"],
        ["train", "--kafka"],
        ["topics"],
        ["serve"],
    ],
    ids=lambda argv: argv[0],
)
def test_an_unreachable_broker_is_one_line_naming_the_address(tmp_path, monkeypatch, capsys, argv):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STREAMGNN_KAFKA__CONNECT_TIMEOUT_S", "0.5")  # a refused port is retried this long
    assert main([*argv, "--bootstrap", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no Kafka broker reachable at 127.0.0.1:1" in err, err
