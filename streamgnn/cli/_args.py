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
from pathlib import Path

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


def output_file(text: str) -> Path:
    """A file path that can be written: its folder exists and is writable, and it is not a folder."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; name a file")
    folder = path.parent
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: folder {str(folder)!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: folder {str(folder)!r} is not writable")
    return path


def output_dir(text: str) -> Path:
    """A folder to write into: an existing folder, or one that can be created (no file in the way)."""
    path = Path(text)
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        where = "is a file" if probe == path else f"cannot be created: {str(probe)!r} is a file"
        raise argparse.ArgumentTypeError(f"{text!r} {where}; name a folder")
    if not os.access(probe, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write into {text!r}: {str(probe)!r} is not writable")
    return path
