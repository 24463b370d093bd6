"""Parsers for the shipped dataset files: fast whole-file numeric parsing, no per-row Python."""

from __future__ import annotations

import gzip
import os
import re
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import CodecError, ConfigError

DATA_DIR = Path(__file__).with_name("data")
DATA_ENV = "STREAMGNN_DATA"  # the folder of the dataset files too big to ship
_COMMENT = re.compile(r"(?m)^%[^\n]*(\n|$)")


@dataclass(frozen=True)
class RawEdges:
    """A file's edges in file order; arrays are read-only because they are cached and shared."""

    src: np.ndarray
    dst: np.ndarray
    t: np.ndarray
    weight: np.ndarray | None = None
    label: np.ndarray | None = None

    def __post_init__(self) -> None:
        for arr in (self.src, self.dst, self.t, self.weight, self.label):
            if arr is not None:
                arr.flags.writeable = False


def data_path(filename: str) -> Path:
    path = DATA_DIR / filename
    if not path.is_file():
        raise FileNotFoundError(
            f"dataset file {path} is missing; the package ships it, so reinstall streamgnn or restore "
            "streamgnn/datasets/data from git"
        )
    return path


def external_text(filename: str, dataset: str, origin: str) -> str:
    """The text of a dataset file not shipped (too big), read from the folder ``$STREAMGNN_DATA`` names,
    as ``filename`` or gzipped as ``filename.gz``; absent: a one-line error naming the file, where it
    goes and where it comes from (``origin``)."""
    folder = os.environ.get(DATA_ENV)
    if folder:
        for path in (Path(folder) / filename, Path(folder) / f"{filename}.gz"):
            if path.is_file():
                raw = path.read_bytes()
                try:
                    return (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode()
                except (OSError, EOFError, UnicodeDecodeError) as exc:
                    raise CodecError(
                        f"{path}: not readable as {'gzipped ' * (path.suffix == '.gz')}text"
                    ) from exc
    where = f"{Path(folder) / filename} does not exist" if folder else f"${DATA_ENV} is not set"
    raise ConfigError(
        f"dataset {dataset!r} is not shipped (too big): put {filename} (or {filename}.gz) in the folder "
        f"${DATA_ENV} names ({where}); it is {origin}"
    )


def read_gzip_text(filename: str) -> str:
    return gzip.decompress(data_path(filename).read_bytes()).decode()


def read_zip_texts(filename: str) -> list[tuple[str, str]]:
    """Every member of a zip as (name, text), sorted by name (the daily files sort by date)."""
    with zipfile.ZipFile(data_path(filename)) as zf:
        return [(name, zf.read(name).decode()) for name in sorted(zf.namelist()) if not name.endswith("/")]


def drop_header(text: str) -> str:
    return text[text.index("\n") + 1 :]


def drop_comments(text: str) -> str:
    """Drop KONECT-style ``%`` comment lines."""
    return _COMMENT.sub("", text)


def table(text: str, ncols: int, dtype: type, what: str) -> np.ndarray:
    """Parse ``ncols`` numbers per line, separated by commas and/or any whitespace, into an (n, ncols) array.

    ``np.fromstring`` parses the whole text in C. Recent numpy raises ValueError on a bad token; older
    numpy only emits a DeprecationWarning, so that warning is made an error too.
    """
    text = text.replace(",", " ").strip()
    if not text:
        return np.empty((0, ncols), dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        try:
            flat = np.fromstring(text, dtype=dtype, sep=" ")
        except (ValueError, DeprecationWarning) as exc:
            raise CodecError(f"{what}: a value is not a valid {np.dtype(dtype).name} number") from exc
    rows = text.count("\n") + 1
    if flat.size != rows * ncols:
        raise CodecError(f"{what}: expected {ncols} values on each of {rows} lines, found {flat.size} values")
    return flat.reshape(rows, ncols)


def as_ids(values: np.ndarray, what: str) -> np.ndarray:
    """Float columns hold the ids of files with float timestamps; refuse any id that is not a whole number."""
    if values.dtype.kind == "f" and not np.array_equal(values, np.round(values)):
        raise CodecError(f"{what}: node ids must be whole numbers")
    return values.astype(np.int64)
