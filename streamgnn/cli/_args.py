"""Argument types shared by the subcommands and the benchmark scripts: each refuses a bad value with a
one-line message while the arguments are parsed, so a mistake costs nothing (an output path is checked
before a benchmark runs, not after).

>>> import argparse
>>> p = argparse.ArgumentParser()
>>> _ = p.add_argument("--repeats", type=positive_int)
>>> p.parse_args(["--repeats", "3"]).repeats
3
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import tempfile
from pathlib import Path

from ..errors import ConfigError

_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (NaN and infinity are refused: a rate of NaN would never throttle)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def seconds(text: str) -> float:
    """A finite number of seconds >= 0 (where 0 means "every time" or "off", as the option says)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, got {text!r}")
    return value


def non_negative(text: str) -> float:
    """A number >= 0, infinity included (an allowed lateness of ``inf`` admits any order)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}")
    return value


def topic_name(text: str) -> str:
    """A legal Kafka topic name: 1 to 249 of ``a-z A-Z 0-9 . _ -``, not ``.`` or ``..``."""
    if not _TOPIC.match(text) or text in (".", ".."):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a Kafka topic name: use 1 to 249 letters, digits, '.', '_' or '-' "
            "(not '.' or '..')"
        )
    return text


def device(text: str) -> str:
    """A torch device this machine has, e.g. ``cpu``, ``cuda``, ``cuda:1``."""
    import torch

    try:
        dev = torch.device(text)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a torch device (e.g. cpu, cuda, cuda:1)") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise argparse.ArgumentTypeError(f"{text!r}: this machine has no CUDA device")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise argparse.ArgumentTypeError(
            f"{text!r}: this machine has {torch.cuda.device_count()} CUDA devices"
        )
    if dev.type not in ("cpu", "cuda"):
        raise argparse.ArgumentTypeError(f"{text!r}: only cpu and cuda devices are supported")
    return text


def port(text: str) -> int:
    """A TCP port to listen on, 1 to 65535."""
    return _port(text, 1)


def port_or_any(text: str) -> int:
    """A TCP port to listen on, 1 to 65535, or 0: any free one (the command says which it bound)."""
    return _port(text, 0)


def _port(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not low <= value <= 65535:
        span = "0 (any free one) or 1 to 65535" if low == 0 else "1 to 65535"
        raise argparse.ArgumentTypeError(f"must be a port, {span}; got {text!r}")
    return value


def input_file(text: str) -> Path:
    """A file that exists and can be read (not a folder)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; name a file")
    if not path.exists():
        raise argparse.ArgumentTypeError(f"no file {text!r}")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"cannot read {text!r}: permission denied")
    return path


def output_file(text: str) -> Path:
    """A file path that can be written: its folder exists and is writable, and it is not a folder."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; name a file")
    folder = path.parent
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: folder {str(folder)!r} does not exist")
    if not writable(folder):
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: folder {str(folder)!r} is not writable")
    return path


def writable(folder: Path) -> bool:
    """Whether files can be made in ``folder``: permissions alone do not say it (root, a read-only mount,
    /proc), so try it."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".streamgnn-write-test-", dir=folder))
    except OSError:
        return False
    return True


def output_dir(text: str) -> Path:
    """A folder to write into: an existing folder, or one that can be created (no file in the way). A folder
    it would create is remembered, so that a run that fails leaves no empty folder behind."""
    try:
        return check_output_dir(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def check_output_dir(text: str | Path, what: str = "", new: bool = True) -> Path:
    """``output_dir``'s check for a path from anywhere (``what`` names it, e.g. a config key); ``new``:
    remember the folder if it does not exist yet (see ``remove_new_empty_folders``)."""
    path = Path(text)
    name = f"{what} {str(text)!r}" if what else repr(str(text))
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        where = "is a file" if probe == path else f"cannot be created: {str(probe)!r} is a file"
        raise ConfigError(f"{name} {where}; name a folder")
    if not writable(probe):
        raise ConfigError(f"cannot write into {name}: {str(probe)!r} is not writable")
    if new and probe != path:
        top = path
        while top.parent != probe:
            top = top.parent
        _NEW_FOLDERS.append(top.absolute())
    return path


# The topmost folder each output path of the running command would create (see ``check_output_dir``).
_NEW_FOLDERS: list[Path] = []


def forget_new_folders() -> None:
    _NEW_FOLDERS.clear()


def remove_new_empty_folders() -> None:
    """After a failed run: remove the folders it was to create that hold no file (empty folders in them
    only). Anything it wrote, such as a checkpoint to resume from, stays."""
    for top in _NEW_FOLDERS:
        if top.is_dir() and not any(p.is_file() or p.is_symlink() for p in top.rglob("*")):
            shutil.rmtree(top, ignore_errors=True)
    _NEW_FOLDERS.clear()
