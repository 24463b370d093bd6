"""``--config FILE.yaml``: one file for every job of a deployment, whose sections are the Python API's config
dataclasses, overridden by environment variables and then by command-line flags.

    config_version: 2 # the layout the file is written in (none: 1); older ones are upgraded (configs.STEPS)
    kafka:            # KafkaConfig (below): where the topics are
      bootstrap: kafka:9092
      partitions: 4
    store:            # streamgnn.store.StoreConfig
      num_partitions: 4
    train:            # streamgnn.train.TrainConfig
      batch_size: 200
      checkpoint_dir: /checkpoints
      model:          # streamgnn.nn.TGNConfig (variant: dygformer: a streamgnn.nn.DyGFormerConfig)
        memory_dim: 100
    resume:           # streamgnn.train.resume.ResumeConfig: how streamgnn train resumes
      mismatch: refuse   # allow: resume a checkpoint of another source or trainer kind
    serve:            # streamgnn.serve.ServeConfig
      port: 8000
    produce:          # ProduceConfig (below): streamgnn produce
      source: jodie_wikipedia
      rate: 1000
    partition:        # PartitionSection (below): streamgnn.jobs.router.RouterConfig for streamgnn partition
      partitioner: {name: fennel, buffer_edges: 4}   # streamgnn.partition.PartitionerConfig
    snapshots:        # SnapshotsConfig (below): streamgnn snapshots
      spec: {kind: window, every: 86400}             # streamgnn.snapshots.SnapshotSpec
    agents:           # AgentsConfig (below): streamgnn agents
      source_loc: {nodes: 100}                       # streamgnn.agents.source_loc.SourceLocConfig
    task:             # streamgnn.tasks.TaskConfig: a labelled task streamgnn train learns (docs/tasks.md)
      kind: node_classification
      labels_file: labels.jsonl

Environment: ``STREAMGNN_<SECTION>__<KEY>[__<KEY>]=value`` (a YAML scalar), e.g.
``STREAMGNN_TRAIN__MODEL__MEMORY_DIM=64``. An unknown section or key, in the file or the environment, is an
error that names it; a value of the wrong type too (``batch_size: "200"``), a key given twice (YAML would
keep the last one silently) and a file that is not UTF-8. Each command reads the sections
it needs (``kafka`` and its own), but every section of the file is checked, so a typo in a shared file fails
every job that reads it, at once.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Literal

import yaml

from ..agents.experiments import DecentralizedSetup, FlockingSetup, SweepConfig
from ..agents.source_loc import SourceLocConfig
from ..configs import Config, field_default, from_dict, upgrade
from ..errors import ConfigError
from ..jobs.router import RouterConfig
from ..serve.config import ServeConfig
from ..snapshots import NextLinks, NodeTarget, SnapshotSpec
from ..store import StoreConfig
from ..tasks.config import TaskConfig
from ..train.config import TrainConfig
from ..train.resume import ResumeConfig
from ._args import check_output_dir
from ._flags import CONFIG_KEY, FLAG

ENV_PREFIX = "STREAMGNN_"


@dataclass(frozen=True)
class KafkaConfig(Config):
    """The topics a deployment shares: events (``partitions`` of them, keyed by graph partition; None: an
    existing topic's count, 1 for a new one, so producing into what ``streamgnn topics`` made just works),
    the compacted embeddings topic the trainer publishes and the service reads, and an optional dead-letter
    topic. ``raw_topic`` (``raw_partitions``): where producers write when a partition router
    (``streamgnn partition``) fills the events topic from it; None: producers write the events topic.
    ``format``: how producers encode events ("binary" or "json"). ``connect_timeout_s``: how long a job
    waits for a first broker answer before it gives up with one line naming the address."""

    bootstrap: str = "localhost:9092"
    events_topic: str = "events"
    partitions: int | None = None
    raw_topic: str | None = None
    raw_partitions: int = 1
    embeddings_topic: str = "embeddings"
    embeddings_partitions: int = 1
    dead_letter_topic: str | None = None
    format: Literal["binary", "json"] = "binary"
    connect_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        for name in ("partitions", "embeddings_partitions", "raw_partitions"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ConfigError(f"kafka.{name} must be >= 1, got {getattr(self, name)}")
        if not self.connect_timeout_s > 0:
            raise ConfigError(f"kafka.connect_timeout_s must be > 0, got {self.connect_timeout_s}")

    def check_reachable(self) -> None:
        """Fail at once, in one line naming the address, when no broker answers within
        ``connect_timeout_s`` (instead of a client retrying in the background)."""
        from ..connectors.kafka.reach import check_reachable

        check_reachable(self.bootstrap, self.connect_timeout_s, tls=False)


@dataclass(frozen=True)
class ProduceConfig:
    """``streamgnn produce`` (``produce_dataset``'s arguments; the topic, its partition count, the message
    format and the connect timeout are the ``kafka`` section's): ``source`` a dataset name or an events
    file, ``rate`` events per second (None: as fast as the broker takes them), ``batch_size`` events per
    binary message, ``log_every_s`` seconds between status lines (0: none)."""

    source: str | None = None
    rate: float | None = None
    batch_size: int = 1000
    log_every_s: float = 10.0

    def __post_init__(self) -> None:
        if self.rate is not None and not 0 < self.rate < float("inf"):
            raise ConfigError(f"produce.rate must be a finite number > 0 (or unset), got {self.rate}")
        if self.batch_size < 1:
            raise ConfigError(f"produce.batch_size must be >= 1, got {self.batch_size}")
        if self.log_every_s < 0:
            raise ConfigError(f"produce.log_every_s must be >= 0, got {self.log_every_s}")


@dataclass(frozen=True)
class PartitionSection(RouterConfig):
    """``streamgnn partition``: the router's options (``jobs.router.RouterConfig``, defined there once); it
    reads ``kafka.raw_topic`` and writes the ``kafka`` section's events topic with ``kafka.partitions``
    partitions in ``kafka.format``. The command's own: ``log_every_s`` seconds between status lines (0:
    none)."""

    log_every_s: float = 10.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.log_every_s < 0:
            raise ConfigError(f"partition.log_every_s must be >= 0, got {self.log_every_s}")


@dataclass(frozen=True)
class SnapshotsConfig:
    """``streamgnn snapshots``: ``spec`` (a ``SnapshotSpec``: what each snapshot is and when it is cut;
    it needs ``every`` or ``times``), and the labels: ``target`` none, ``links`` (next-snapshot links,
    a ``NextLinks``) or ``node`` (a feature column ahead, a ``NodeTarget``). The allowed lateness is the
    ``store`` section's ``allowed_lateness`` (0 for this command unless set)."""

    spec: SnapshotSpec | None = None
    target: Literal["none", "links", "node"] = "none"
    links: NextLinks = field(default_factory=NextLinks)
    node: NodeTarget = field(default_factory=NodeTarget)


@dataclass(frozen=True)
class AgentsConfig:
    """``streamgnn agents``: ``source_loc`` the source-localization task (``source-loc`` and ``train``),
    ``sweep`` the trained variants and failure sweep (``source-loc`` and ``flocking``), ``flocking`` the
    flock and its episodes, ``decentralized`` the gossip training of ``agents train``."""

    source_loc: SourceLocConfig = field(default_factory=SourceLocConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    flocking: FlockingSetup = field(default_factory=FlockingSetup)
    decentralized: DecentralizedSetup = field(default_factory=DecentralizedSetup)


@dataclass(frozen=True)
class JobConfig:
    """The whole file."""

    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    resume: ResumeConfig = field(default_factory=ResumeConfig)
    serve: ServeConfig = field(default_factory=ServeConfig)
    produce: ProduceConfig = field(default_factory=ProduceConfig)
    partition: PartitionSection = field(default_factory=PartitionSection)
    snapshots: SnapshotsConfig = field(default_factory=SnapshotsConfig)
    agents: AgentsConfig = field(default_factory=AgentsConfig)
    task: TaskConfig | None = None  # a labelled task streamgnn train learns beside link prediction


def load_config(
    path: str | Path | None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
    defaults: Mapping[str, object] | None = None,
) -> JobConfig:
    """The dataclasses' defaults < a command's own ``defaults`` (``{"store.allowed_lateness": 0.0}``) <
    the file at ``path`` < ``STREAMGNN_*__*`` variables of ``env`` < ``overrides`` (``{"serve.port": 8001}``,
    from flags)."""
    data: dict = {}
    if path is not None:
        path = Path(path)
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw.count(b"\n", 0, exc.start) + 1
            raise ConfigError(
                f"{path} is not UTF-8 text: byte 0x{raw[exc.start]:02x} on line {line}; save it as UTF-8"
            ) from None
        data = _parse_yaml(text, str(path)) or {}
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: the top level must be a mapping of sections")
        data = upgrade(data, str(path), complete=False)  # the file's keys, as this version names them
    where = str(path) if path is not None else "config"
    for dotted, value in (defaults or {}).items():
        _put(data, dotted.split("."), value, f"default for {dotted}", keep=True)
    env = os.environ if env is None else env
    for name, text in sorted(env.items()):
        if name.startswith(ENV_PREFIX) and "__" in name:
            keys = name[len(ENV_PREFIX) :].lower().split("__")
            origin = f"environment variable {name}"
            _put(data, keys, _parse_yaml(text, origin), origin)
    for dotted, value in (overrides or {}).items():
        _put(data, dotted.split("."), value, f"option for {dotted}")
    return from_dict(JobConfig, data, where)


def _parse_yaml(text: str, where: str):
    """``text`` as YAML, with any mistake in one line naming ``where``, the line and the column; a key given
    twice in one mapping is a mistake too (YAML would keep the last one silently)."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = ": ".join(str(part) for part in (exc.context, exc.problem) if part)
        raise ConfigError(f"{where} is not valid YAML: {at}{what}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where} is not valid YAML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{where} is not valid YAML: it nests too deeply") from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (naming it and both lines)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            lines: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` may repeat base's keys
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = lines.get(key)
                except TypeError:  # an unhashable key: the base class names it
                    continue
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} (first on line {first})", key_node.start_mark
                    )
                lines[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _put(data: dict, keys: list[str], value, origin: str, keep: bool = False) -> None:
    """Set ``data[k0][k1]... = value``; with ``keep``, only where the file has not set it."""
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            if keep:  # the file put something else there: its own mistake is named when it is built
                return
            raise ConfigError(f"{origin}: {'.'.join(keys)} goes inside a value that is not a mapping")
    if not (keep and keys[-1] in node):
        node[keys[-1]] = value


# ---------------------------------------------------------------------------------------------- argparse


# Keys that name a folder: a file in the way is refused before any work, from a flag, the file or the
# environment alike (the flags that set them are checked as they are parsed, with their own names).
FOLDERS = ("train.checkpoint_dir", "partition.checkpoint_dir", "serve.checkpoint_dir")


def show_config_defaults(parser: argparse.ArgumentParser) -> None:
    """Append "(default X)" to the help of every flag that overrides a config key, X taken from the config
    dataclasses (or the command's own ``config_defaults``), so that help never repeats a default by hand.
    Run once the whole parser is built (a command sets its ``config_defaults`` after its flags)."""
    own = parser.get_default("config_defaults") or {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                show_config_defaults(command)
        elif action.dest.startswith(CONFIG_KEY) and action.help and action.help != argparse.SUPPRESS:
            key = action.dest.removeprefix(CONFIG_KEY).split(",")[0]
            value = own.get(key, field_default(JobConfig, key))
            if value is not None and not isinstance(value, bool) and not dataclasses.is_dataclass(value):
                shown = ",".join(map(str, value)) if isinstance(value, tuple) else value
                action.help += f" (default {shown})"


def _flag_error(args: argparse.Namespace, given: dict, defaults, exc: ConfigError) -> ConfigError | None:
    """``exc`` naming the flag whose value the config refuses (a value its type let through, such as
    ``--batch-size 0``): the flag without which the config builds, else the one without which this mistake
    goes away (the file has another). None when no flag is at fault (the file or the environment)."""
    flags = {
        name.removeprefix(FLAG + CONFIG_KEY): f for name, f in vars(args).items() if name.startswith(FLAG)
    }
    changed = None
    for dotted in given:
        try:
            load_config(
                args.config, overrides={k: v for k, v in given.items() if k != dotted}, defaults=defaults
            )
        except ConfigError as other:
            changed = changed or (dotted if str(other) != str(exc) else None)
            continue
        changed = dotted
        break
    if changed is None:
        return None
    flag = next((f for keys, f in flags.items() if changed in keys.split(",")), changed)
    where = f"{args.config if args.config is not None else 'config'}: "  # load_config's, not the flag's
    return ConfigError(f"argument {flag}: {str(exc).removeprefix(where)}")


def config_from_args(args: argparse.Namespace, defaults: Mapping[str, object] | None = None) -> JobConfig:
    """The command's ``JobConfig``: its defaults (``defaults``, else ``config_defaults`` that its parser
    set, e.g. ``p.set_defaults(config_defaults={"kafka.partitions": 8})``) < ``--config`` < environment <
    its flags."""
    if defaults is None:
        defaults = getattr(args, "config_defaults", None)
    given = {
        key: str(value) if isinstance(value, PurePath) else value  # a checked folder is a str key in YAML
        for dest, value in vars(args).items()
        if dest.startswith(CONFIG_KEY) and value is not None
        for key in dest.removeprefix(CONFIG_KEY).split(",")
    }
    try:
        cfg = load_config(args.config, overrides=given, defaults=defaults)
    except ConfigError as exc:
        raise _flag_error(args, given, defaults, exc) or exc from None
    for key in FOLDERS:
        value = cfg
        for name in key.split("."):
            value = getattr(value, name)
        if value is not None:
            check_output_dir(value, key, new=key != "serve.checkpoint_dir")  # the service only reads it
    return cfg
