"""Config dataclasses to plain dicts and back, in one place: the YAML file's sections, checkpoint manifests
and JSON summaries all go through ``to_dict``/``from_dict`` (msgspec's ``to_builtins``/``convert`` do the
typed work in C).

Why a layer over msgspec: it ignores keys a dataclass does not have, and names a wrong value by its type
only. Here a typo is an error that names the key, the class and where it was found, and a wrong value is
named with what was expected. A config written to disk carries its version (``stamp``); one written by an
older streamgnn is read through ``upgrade``, the one path for old keys (see "Config versions" below). Dicts
are JSON-safe: a non-finite float is written as the string "inf", "-inf"
or "nan", and any float field reads those strings back (YAML and environment variables write them so too).

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Knobs(Config):
...     taps: int = 3
...     gain: float = 1.0
>>> Knobs.from_dict({"taps": 4, "gain": "inf"}).to_dict()
{'taps': 4, 'gain': 'inf'}
>>> Knobs.from_dict({"tabs": 4}, where="knobs.yaml")
Traceback (most recent call last):
...
streamgnn.errors.ConfigError: knobs.yaml: unknown key 'tabs' for Knobs; known keys: gain, taps
>>> Knobs.from_dict({"taps": "4"})
Traceback (most recent call last):
...
streamgnn.errors.ConfigError: taps: expected int, got '4'
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import types
import typing
from collections.abc import Mapping

import msgspec

from .errors import ConfigError, StreamGNNError

NON_FINITE = {"inf": math.inf, "+inf": math.inf, "-inf": -math.inf, "nan": math.nan}


class Config:
    """A base for config dataclasses: ``to_dict`` and ``from_dict`` as methods (the functions below), and
    the one check of every choice: a field typed ``Literal[...]`` (or ``Literal[...] | None``) holds one of
    its values, and a field typed as a ``Family`` member one of its registered classes, however the config
    was built (``from_dict`` or in Python), before the class's own ``__post_init__`` runs, in the
    converter's words (``mode: expected one of [...], got ...``)."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("__post_init__")
        if own is not None and not getattr(own, "_checks_choices", False):

            def __post_init__(self) -> None:
                check_choices(self)
                own(self)

            __post_init__._checks_choices = True
            cls.__post_init__ = __post_init__

    def __post_init__(self) -> None:
        check_choices(self)

    def to_dict(self) -> dict:
        return to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping, where: str = ""):
        return from_dict(cls, data, where)


@functools.cache
def _choices(cls) -> tuple[tuple[str, tuple], ...]:
    """``(field, its values)`` of each ``Literal`` field of ``cls`` (a ``Literal`` within an optional too)."""
    out = []
    for name, hint in _hints(cls).items():
        options = (
            typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
        )
        for option in options:
            if typing.get_origin(option) is typing.Literal:
                out.append((name, typing.get_args(option) + ((None,) if type(None) in options else ())))
    return tuple(out)


@functools.cache
def _numbers(cls) -> tuple[tuple[str, str], ...]:
    """``(field, its type's name)`` of each field of ``cls`` typed ``int`` or ``float`` (or optional), where
    a ``bool`` would pass unnoticed (``True`` is an int: ``checkpoint_min_pause_s=True`` read as 1 s)."""
    out = []
    for name, hint in _hints(cls).items():
        options = (
            typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
        )
        numbers = [o.__name__ for o in options if o in (int, float)]
        if numbers and bool not in options:
            out.append((name, " | ".join(numbers)))
    return tuple(out)


def check_choices(config) -> None:
    """Raise ``ConfigError`` where a ``Literal`` field of the dataclass ``config`` holds another value, a
    number field a ``bool`` (``from_dict`` refuses one; a config built in Python would take it as 0 or 1),
    or a ``Family`` field an instance of a class the family has not registered."""
    for name, expected in _numbers(type(config)):
        if isinstance(getattr(config, name), bool):
            raise ConfigError(f"{name}: expected {expected}, got {getattr(config, name)!r}")
    for name, values in _choices(type(config)):
        value = getattr(config, name)
        if value not in values or isinstance(value, bool) != any(isinstance(v, bool) for v in values):
            shown = [v for v in values if v is not None]
            raise ConfigError(f"{name}: expected one of {shown}, got {value!r}")
    for name, family in _families(type(config)).items():
        family.check(getattr(config, name), name)


class Family:
    """The config dataclasses one field may hold, told apart by their ``variant`` field: a field typed
    ``Annotated[Config, family]`` holds an instance of a class ``register`` was given, and ``from_dict``
    builds it from a mapping by the ``variant`` it names (none named: the first registered class, with its
    default variant). The field's class (``TrainConfig``) then names none of its members, so adding one (a
    model) is one registration where its code lives (``train.models.register``), not an edit of the field.

    A class's variants are the values its ``variant`` field may take (its ``Literal``, or its default);
    two classes may not claim one variant. An unknown variant is an error naming where it was found and the
    known variants, rather than a default class's complaint about its own field."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.classes: dict[str, type] = {}  # variant -> the config class that has it, in registration order

    def register(self, cls: type) -> None:
        hint = _hints(cls).get("variant")
        variants = typing.get_args(hint) if typing.get_origin(hint) is typing.Literal else ()
        variants = variants or (getattr(_defaults(cls), "variant", None),)
        if not dataclasses.is_dataclass(cls) or not all(isinstance(v, str) for v in variants):
            raise ConfigError(f"{self.name}: {cls.__name__} is not a config dataclass with a str 'variant'")
        taken = sorted(v for v in variants if self.classes.get(v, cls) is not cls)
        if taken:
            raise ConfigError(f"{self.name}: variant {taken[0]!r} is {self.classes[taken[0]].__name__}'s")
        self.classes.update(dict.fromkeys(variants, cls))

    def default(self):
        """An instance of the first registered class at its defaults (a dataclass field's default)."""
        if not self.classes:
            raise ConfigError(f"{self.name}: no config class is registered")
        return next(iter(self.classes.values()))()

    def members(self) -> tuple[type, ...]:
        return tuple(dict.fromkeys(self.classes.values()))

    def from_dict(self, data: Mapping, where: str = ""):
        """The registered class ``data["variant"]`` names (the first one where none), built from ``data``."""
        prefix = f"{where}: " if where else ""
        if not isinstance(data, Mapping):
            raise ConfigError(f"{prefix}expected a mapping of {self.name} config keys, got {data!r}")
        variant = data.get("variant")
        if variant is None and self.classes:
            return from_dict(self.members()[0], data, where)
        if not isinstance(variant, str) or variant not in self.classes:
            known = ", ".join(sorted(self.classes))
            raise ConfigError(
                f"{prefix}variant: unknown {self.name} variant {variant!r}; known variants: {known}"
            )
        return from_dict(self.classes[variant], data, where)

    def check(self, value, where: str) -> None:
        if not isinstance(value, self.members()):
            names = ", ".join(sorted(cls.__name__ for cls in self.members()))
            raise ConfigError(
                f"{where}: expected a registered {self.name} config ({names}), got {type(value).__name__}"
            )


@functools.cache
def _families(cls) -> dict[str, Family]:
    """``{field: its Family}`` of each field of ``cls`` typed ``Annotated[..., family]``."""
    return {
        name: extra
        for name, hint in typing.get_type_hints(cls, include_extras=True).items()
        if typing.get_origin(hint) is typing.Annotated
        for extra in hint.__metadata__
        if isinstance(extra, Family)
    }


def to_dict(config) -> dict:
    """The dataclass ``config`` as plain dicts, lists and scalars (non-finite floats as strings), every
    field included: one built by ``from_dict`` holds the fields it was not given as class defaults, which
    ``to_builtins`` alone would leave out (a checkpoint's config would then lack them)."""
    return _json_safe(msgspec.to_builtins(_fields(config)))


def _fields(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _fields(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
    if isinstance(value, dict):
        return {key: _fields(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_fields(item) for item in value]
    return value


def from_dict(cls, data: Mapping, where: str = ""):
    """A ``cls`` from ``data``: unknown keys, wrong types and values its ``__post_init__`` refuses are a
    ``ConfigError`` naming ``where`` (a file, "STREAMGNN_..."), the path of keys and the class."""
    prepared = _prepare(cls, data, [where] if where else [])
    if not _built(cls):
        try:
            return msgspec.convert(prepared, cls)
        except msgspec.ValidationError as exc:
            raise _explain(exc, cls, prepared, where) from None
    # msgspec knows no ``Family`` (``model``: one of the registered model configs): such a field, and one
    # holding such a field below, is already built by ``_prepare``; the others are converted one by one
    hints, values = _hints(cls), {}
    for key, value in prepared.items():
        if key in _built(cls):  # a family's value is checked by the class (``check_choices``)
            values[key] = value
            if key not in _families(cls) and not isinstance(value, hints[key]):
                label = ": ".join([*([where] if where else []), key])
                raise ConfigError(
                    f"{label}: expected a mapping of {_describe(hints[key])} keys, got {value!r}"
                )
            continue
        try:
            values[key] = msgspec.convert(value, hints[key])
        except msgspec.ValidationError as exc:
            at = _AT.search(str(exc))
            inner = at.group(1) if at else ""
            moved = msgspec.ValidationError(f"{str(exc)[: at.start()] if at else exc} - at `$.{key}{inner}`")
            moved.__cause__ = exc.__cause__
            raise _explain(moved, cls, prepared, where) from None
    try:
        return cls(**values)
    except StreamGNNError as exc:
        raise ConfigError(f"{where}: {exc}" if where else str(exc)) from None


def field_default(cls, dotted: str):
    """The default of the field at ``dotted`` ("train.model.memory_dim") below dataclass ``cls``, or None
    where there is none (a required field, or a path through a field without a dataclass default)."""
    value = _defaults(cls)
    for key in dotted.split("."):
        if not dataclasses.is_dataclass(value) or not hasattr(value, key):
            return None
        value = getattr(value, key)
    return value


@functools.cache
def _defaults(cls):
    try:
        return cls()
    except (TypeError, StreamGNNError):  # a required field: no instance of defaults
        return None


def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


@functools.cache
def _built(cls) -> frozenset:
    """The fields of ``cls`` that ``_prepare`` builds into instances itself: a ``Family`` (a choice of
    model, which msgspec cannot convert), or a dataclass with one somewhere below."""
    return frozenset(_families(cls)) | frozenset(
        key for key, hint in _hints(cls).items() if any(_built(option) for option in _dataclasses_of(hint))
    )


def _dataclasses_of(hint) -> list:
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    return [option for option in options if dataclasses.is_dataclass(option)]


def _prepare(cls, data, where: list[str]) -> dict:
    """``data`` checked key by key against ``cls`` (recursively into dataclass fields), with "inf"-like
    strings of float fields as floats: what msgspec then converts."""
    label = ": ".join(where)
    prefix = f"{label}: " if label else ""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{prefix}expected a mapping of {cls.__name__} keys, got {type(data).__name__}")
    data = dict(data)
    fields = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = [key for key in data if key not in fields]  # in the given order (keys may be numbers)
    if unknown:
        raise ConfigError(
            f"{prefix}unknown key {unknown[0]!r} for {cls.__name__}; known keys: {', '.join(sorted(fields))}"
        )
    hints, families = _hints(cls), _families(cls)
    return {
        key: families[key].from_dict(value, ": ".join([*where, key]))
        if key in families and isinstance(value, Mapping)  # (an instance: checked by the class)
        else _prepare_value(hints[key], value, [*where, key])
        for key, value in data.items()
    }


def _prepare_value(hint, value, where: list[str]):
    mapped = _dataclasses_of(hint)
    if any(_built(option) for option in mapped):  # built here (see ``from_dict``)
        if isinstance(value, tuple(mapped)) or not isinstance(value, Mapping):
            return value
        return from_dict(mapped[0], value, ": ".join(where))
    if dataclasses.is_dataclass(hint):
        return value if isinstance(value, hint) else _prepare(hint, value, where)
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    if isinstance(value, Mapping) and mapped:  # a mapping is that dataclass: its own mistakes are named
        return _prepare(mapped[0], value, where)
    if float in options and isinstance(value, str) and value.lower() in NON_FINITE:
        return NON_FINITE[value.lower()]
    return value


_AT = re.compile(r" - at `\$(.*)`$")
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def _explain(exc: msgspec.ValidationError, cls, data, where: str) -> ConfigError:
    """msgspec's error as one line in the words of the CLI: ``where: key: key: what is wrong``."""
    message = str(exc)
    at = _AT.search(message)
    steps = [name or int(index) for name, index in _STEP.findall(at.group(1))] if at else []
    label = ": ".join(str(part) for part in ([where] if where else []) + steps)
    prefix = f"{label}: " if label else ""
    cause = exc.__cause__
    if isinstance(cause, StreamGNNError):  # a __post_init__ check: its own words
        return ConfigError(f"{prefix}{cause}")
    hint, value = cls, data
    for step in steps:
        hint, value = _step(hint, value, step)
    if hint is None:
        return ConfigError(f"{prefix}{message[: at.start()] if at else message}")
    return ConfigError(f"{prefix}expected {_describe(hint)}, got {value!r}")


def _step(hint, value, step):
    """The type hint and value one key (or list index) further down."""
    if hint is None:
        return None, None
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    for option in options:
        if dataclasses.is_dataclass(option) and isinstance(value, Mapping) and isinstance(step, str):
            return _hints(option).get(step), value.get(step)
        if typing.get_origin(option) in (tuple, list) and isinstance(step, int):
            return typing.get_args(option)[0], value[step]
    return None, None


def _describe(hint) -> str:
    if typing.get_origin(hint) is typing.Literal:
        return f"one of {list(typing.get_args(hint))}"
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " | ".join(_describe(arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return "None"
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def _json_safe(value):
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


# ---------------------------------------------------------------------------------------- config versions
#
# Every config streamgnn writes to disk carries its version under ``config_version`` (``stamp``): the
# configs in checkpoints, and a YAML job file may name it at its top level. A config without a stamp is the
# oldest version, 1. ``upgrade`` takes a job config's dict (sections ``train``, ``kafka``, ...) from its
# version to ``CONFIG_VERSION`` one ``Step`` at a time, and ``from_record`` reads one section saved alone (a
# checkpoint's config) through the same steps, at the place a job file gives it. A version
# newer than this streamgnn knows is refused, naming the file, rather than read with keys it would
# misunderstand.
#
# A step does two things. ``move`` renames, moves or removes keys (in every config). ``then`` names the
# values the keys it added had before it: a checkpoint's config is a complete record (``to_dict`` writes
# every field), so a key it lacks did not exist when it was written and the run resumes with the value it
# had then. A YAML file names only what its author chose: a key it lacks takes today's default, so ``then``
# is not applied to it (``complete=False``).
#
# To rename, move or remove a key, or to change what runs do where a key is not given: append a ``Step``
# (its version one more than the last's) that says what and why.
#
# The configs checkpoints hold, each read by ``from_record`` at the place of its section in a job config
# (those no job file has take a section of their own, which no step touches yet): the trainers' training
# config (online and sharded: the manifest's ``config``, "train"), a sharded rank's ``shard``
# ("train.sharding"), the store's (in every store and trainer checkpoint, "store"), the partition router's
# partitioner ("partition.partitioner"), a labelled task's head ("task"), a snapshot stream's spec
# ("snapshots.spec"), the snapshot trainer's config ("snapshot_train") and GraphNN's ("graph_nn"). What
# else a container writes is not a config and needs no stamp: the router's event ``Schema`` is what it
# learned of the stream (older manifests are read by its own fallback), a task's live features hold
# measured values (``tau``, ``rated``), and the rest is state (offsets, counts, arrays, the trainer kind).
# Reports, summaries and a snapshot folder's ``signal.json`` quote configs for people and tools; streamgnn
# never reads them back as configs, so they carry no stamp either.

VERSION_KEY = "config_version"


@dataclasses.dataclass(frozen=True)
class Step:
    """The upgrade to ``version`` from the one before: ``move`` (renames, moves and removals, on a copy of
    the job config's dict) and ``then`` (``{dotted key from the job's root: the value it had before this
    version}`` for the keys this version added; complete records only)."""

    version: int
    why: str
    move: typing.Callable[[dict], dict]
    then: Mapping[str, object] = dataclasses.field(default_factory=dict)


def _drop_merge(data: dict) -> dict:
    """``train.model.merge`` was an ablation switch, removed (#21): "mlp", what every model does, is dropped;
    another value names a model this streamgnn no longer builds."""
    train = data.get("train")
    model = train.get("model") if isinstance(train, Mapping) else None
    if not isinstance(model, Mapping) or "merge" not in model:
        return data
    model = dict(model)
    merge = model.pop("merge")
    if merge != "mlp":
        raise ConfigError(
            f"TGNConfig.merge={merge!r} is no longer built: the switch was removed (its ablation made no "
            "difference) and every model uses the MLP merge; drop 'merge' from the config"
        )
    return {**data, "train": {**train, "model": model}}


STEPS: tuple[Step, ...] = (
    Step(
        2,
        "the MLP merge became the only one (train.model.merge removed); the model's time and pair options "
        "and the negative pool were added, with defaults that depart from what runs did before: then, the "
        "paper's TGN (query-time ages, geometric time init, no pair features; DyGFormer had none of these "
        "keys) and every negative from the seen pool's one strategy",
        _drop_merge,
        {
            "train.model.neighbor_time": "query",
            "train.model.time_init": "geometric",
            "train.model.pair_features": False,
            "train.model.pair_endpoints": False,
            "train.model.pair_walks": False,
            "train.train_negative_pool": "seen",
            "train.train_negative_fraction": 1.0,
        },
    ),
    Step(
        3,
        "the learning floor under a budget (train.follow.min_learn_fraction) was added with default 0.2: "
        "then, a budget learned only the share its measured costs allowed (no floor), and a checkpoint of "
        "such a run resumes with the share it ran with",
        lambda data: data,
        {"train.follow.min_learn_fraction": 0.0},
    ),
    Step(
        4,
        "a time floor between checkpoints (train.checkpoint_min_pause_s) was added, by default 10 s with the "
        "default interval: then, a checkpoint fell every checkpoint_every batches whatever the time",
        lambda data: data,
        {"train.checkpoint_min_pause_s": 0.0},
    ),
)
CONFIG_VERSION = STEPS[-1].version


def version_of(data: Mapping, where: str = "") -> int:
    """The version ``data`` is stamped with (1 where it has none), refused where it is not one this
    streamgnn reads; the error names ``where`` (the file) so the reader knows which to fix."""
    prefix = f"{where}: " if where else ""
    version = data.get(VERSION_KEY, 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ConfigError(f"{prefix}{VERSION_KEY} must be a whole number >= 1, got {version!r}")
    if version > CONFIG_VERSION:
        raise ConfigError(
            f"{prefix}{VERSION_KEY} {version} is newer than this streamgnn reads ({CONFIG_VERSION}): "
            "upgrade streamgnn to read it"
        )
    return version


def upgrade(data: Mapping, where: str = "", *, complete: bool) -> dict:
    """The job config ``data`` as ``CONFIG_VERSION`` lays it out, its stamp removed: every ``Step`` after its
    version, in order; with ``complete`` (a record, not a file a person wrote) the keys a step added take
    the values they had before it. The configs checkpoints hold come here too, each at its place in a job
    config (listed under "Config versions" above, with why the rest a checkpoint holds needs no stamp).

    >>> upgrade({"train": {"model": {"merge": "mlp"}}}, complete=False)
    {'train': {'model': {}}}
    >>> upgrade({"config_version": 5}, "ckpt-000002/manifest.json", complete=True)
    Traceback (most recent call last):
    ...
    streamgnn.errors.ConfigError: ckpt-000002/manifest.json: config_version 5 is newer than this streamgnn \
reads (4): upgrade streamgnn to read it
    """
    version = version_of(data, where)
    data = {key: value for key, value in data.items() if key != VERSION_KEY}
    for step in STEPS[version - 1 :]:
        try:
            data = step.move(data)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}" if where else str(exc)) from None
        if complete:
            data = _fill(data, step.then)
    return data


def from_record(cls, data: Mapping, where: str = "", section: str = "train"):
    """A ``cls`` from ``data``, one section of a job config saved alone with its stamp (a checkpoint's
    config), upgraded as a complete record at ``section``, its dotted place in a job config (see "Config
    versions"); ``where``: the file, named by any refusal."""
    if not isinstance(data, Mapping):
        prefix = f"{where}: " if where else ""
        raise ConfigError(f"{prefix}expected a mapping of {cls.__name__} keys, got {type(data).__name__}")
    version = version_of(data, where)
    path = section.split(".")
    record: dict = {key: value for key, value in data.items() if key != VERSION_KEY}
    for key in reversed(path):
        record = {key: record}
    upgraded = upgrade({VERSION_KEY: version, **record}, where, complete=True)
    for key in path:
        upgraded = upgraded[key]
    return from_dict(cls, upgraded, where)


def _fill(data: dict, then: Mapping[str, object]) -> dict:
    """``data`` with each dotted key of ``then`` that it lacks set to that value (copies along the way); a
    model that is not a TGN variant (DyGFormer's, TPNet's: ``_TGN_VARIANTS``) takes none of the ``model.``
    ones, which are TGN's fields."""
    for dotted, value in then.items():
        data = _set_absent(data, dotted.split("."), value)
    return data


_TGN_VARIANTS = ("tgn", "jodie", "tgat")  # ``TGNConfig.variant``'s: the steps' ``model.`` keys are its fields


def _set_absent(node: Mapping, path: list[str], value) -> dict:
    node = dict(node)
    head, *rest = path
    below = node.get(head, {})
    if not rest:
        node.setdefault(head, value)
    elif isinstance(below, Mapping) and (head != "model" or below.get("variant", "tgn") in _TGN_VARIANTS):
        node[head] = _set_absent(below, rest, value)
    return node


def stamp(data: Mapping) -> dict:
    """``data`` (a config's ``to_dict``) as written to disk: with ``config_version`` first."""
    return {VERSION_KEY: CONFIG_VERSION, **data}
