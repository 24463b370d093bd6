"""One CLI: every subcommand explains itself with an example, `--config` files map onto the config
dataclasses (unknown keys and wrong types named, environment and flags override), errors are one line."""

from __future__ import annotations

import pytest

from streamgnn.cli import build_parser, command_modules, main
from streamgnn.cli._config import load_config
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


def test_config_file_maps_onto_the_dataclasses(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  batch_size: 50\n  model: {memory_dim: 32}\nstore: {allowed_lateness: inf}\n")
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
        ("serve: {metric: l2}\n", {}, "serve.metric must be one of"),
        ("train: {model: {variant: gru}}\n", {}, "expected one of ['tgn', 'jodie', 'tgat']"),
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
    assert main(["serve", "--bootstrap", "127.0.0.1:1"]) == 2
    assert "no Kafka broker reachable at 127.0.0.1:1" in capsys.readouterr().err
    assert main(["train", "--file", str(tmp_path / "nope.csv")]) == 2
    assert "no events file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--dataset", "x", "--file", "y"])
    assert exit_.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_parser_builds_every_command():
    assert {"serve", "train", "ingest", "topics", "bench", "demo", "produce"} <= set(
        build_parser()._subparsers._group_actions[0].choices
    )
