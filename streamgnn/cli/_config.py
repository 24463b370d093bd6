"""``--config FILE.yaml``: one file for every job of a deployment, whose sections are the Python API's config
dataclasses, overridden by environment variables and then by command-line flags.

    kafka:            # KafkaConfig (below): where the topics are
      bootstrap: kafka:9092
      partitions: 4
    store:            # streamgnn.store.StoreConfig
      num_partitions: 4
    train:            # streamgnn.train.TrainConfig
      batch_size: 200
      checkpoint_dir: /checkpoints
      model:          # streamgnn.nn.TGNConfig
        memory_dim: 100
    serve:            # streamgnn.serve.ServeConfig
      port: 8000

Environment: ``STREAMGNN_<SECTION>__<KEY>[__<KEY>]=value`` (a YAML scalar), e.g.
``STREAMGNN_TRAIN__MODEL__MEMORY_DIM=64``. An unknown section or key, in the file or the environment, is an
error that names it; a value of the wrong type too (``batch_size: "200"``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError, StreamGNNError
from ..serve.config import ServeConfig
from ..store import StoreConfig
from ..train.config import TrainConfig

ENV_PREFIX = "STREAMGNN_"


@dataclass(frozen=True)
class KafkaConfig:
    """The topics a deployment shares: raw events (``partitions`` of them, keyed by graph partition), the
    compacted embeddings topic the trainer publishes and the service reads, and an optional dead-letter
    topic. ``format``: how producers encode events ("binary" or "json"). ``connect_timeout_s``: how long a
    job waits for a first broker answer before it gives up with one line naming the address."""

    bootstrap: str = "localhost:9092"
    events_topic: str = "events"
    partitions: int = 1
    embeddings_topic: str = "embeddings"
    embeddings_partitions: int = 1
    dead_letter_topic: str | None = None
    format: str = "binary"
    connect_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        for name in ("partitions", "embeddings_partitions"):
            if getattr(self, name) < 1:
                raise ConfigError(f"kafka.{name} must be >= 1, got {getattr(self, name)}")
        if self.format not in ("binary", "json"):
            raise ConfigError(f"kafka.format must be 'binary' or 'json', got {self.format!r}")
        if not self.connect_timeout_s > 0:
            raise ConfigError(f"kafka.connect_timeout_s must be > 0, got {self.connect_timeout_s}")

    def check_reachable(self) -> None:
        """Fail at once, in one line naming the address, when no broker answers within
        ``connect_timeout_s`` (instead of a client retrying in the background)."""
        from ..connectors.kafka.reach import check_reachable

        check_reachable(self.bootstrap, self.connect_timeout_s, tls=False)


@dataclass(frozen=True)
class JobConfig:
    """The whole file."""

    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    serve: ServeConfig = field(default_factory=ServeConfig)


def load_config(
    path: str | Path | None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> JobConfig:
    """Defaults < the file at ``path`` < ``STREAMGNN_*__*`` variables of ``env`` < ``overrides``
    (``{"serve.port": 8001}``, from flags)."""
    import yaml

    data: dict = {}
    if path is not None:
        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path} is not valid YAML: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: the top level must be a mapping of sections")
    where = str(path) if path is not None else "config"
    env = os.environ if env is None else env
    for name, text in sorted(env.items()):
        if name.startswith(ENV_PREFIX) and "__" in name:
            keys = name[len(ENV_PREFIX) :].lower().split("__")
            _put(data, keys, yaml.safe_load(text), f"environment variable {name}")
    for dotted, value in (overrides or {}).items():
        _put(data, dotted.split("."), value, f"option for {dotted}")
    return _build(JobConfig, data, where)


def _put(data: dict, keys: list[str], value, origin: str) -> None:
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{origin}: {'.'.join(keys)} goes inside a value that is not a mapping")
    node[keys[-1]] = value


def _build(cls, data, where: str):
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of {cls.__name__} keys, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - fields)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key {unknown[0]!r} for {cls.__name__}; known keys: {', '.join(sorted(fields))}"
        )
    values = {key: _coerce(value, hints[key], f"{where}: {key}") for key, value in data.items()}
    try:
        return cls(**values)
    except StreamGNNError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _coerce(value, hint, where: str):
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, where)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is not type(None):
                try:
                    return _coerce(value, arg, where)
                except ConfigError:
                    continue
        raise ConfigError(f"{where}: expected {_name(hint)}, got {value!r}")
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{where}: expected one of {list(args)}, got {value!r}")
        return value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return tuple(_coerce(v, args[0], where) for v in value)
    ok = {
        int: lambda v: isinstance(v, int) and not isinstance(v, bool),
        float: lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        str: lambda v: isinstance(v, str),
        bool: lambda v: isinstance(v, bool),
    }.get(hint)
    if ok is None:
        return value
    if hint is float and isinstance(value, str) and value.lower() in ("inf", "+inf", "-inf", "nan"):
        return float(value)
    if not ok(value):
        raise ConfigError(f"{where}: expected {_name(hint)}, got {value!r}")
    return float(value) if hint is float else value


def _name(hint) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


# ---------------------------------------------------------------------------------------------- argparse


def add_config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE.yaml",
        help="settings shared by every job (sections kafka, store, train, serve: the Python config "
        "dataclasses' keys; STREAMGNN_SECTION__KEY variables and flags override it), e.g. cluster.yaml",
    )


def override(parser, *flags: str, key: str, **kw) -> None:
    """A flag that overrides config key ``key`` ("serve.port") when given."""
    parser.add_argument(*flags, dest=f"cfg:{key}", default=None, **kw)


def config_from_args(args: argparse.Namespace) -> JobConfig:
    given = {dest[4:]: v for dest, v in vars(args).items() if dest.startswith("cfg:") and v is not None}
    return load_config(args.config, overrides=given)
