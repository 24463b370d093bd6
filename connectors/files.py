"""File sources: replay CSV, JSON-lines and shipped datasets as a stream of EventBatches.

Every source is re-iterable (each ``iter()`` reads from the start) and replays either as fast as possible
(``speed=None``) or paced so that stream time advances ``speed`` times faster than wall time, which turns a
file into a realistic live stream for tests and demos. Rows that cannot be events are collected on
``source.dead_letters`` (reset on each pass) instead of stopping the stream. Each is an
``streamgnn.sources.EventSource`` (a ``ReplaySource``): its position counts the events handed out, and
``seek`` to it resumes a pass after them.
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import io
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import IO

import numpy as np

from streamgnn import datasets
from streamgnn.codec import decode_json_lines
from streamgnn.errors import ConfigError, ConnectorError
from streamgnn.events import KIND_NAMES, DeadLetter, EventBatch
from streamgnn.sources import ReplaySource

__all__ = ["CsvSource", "DatasetSource", "JsonLinesSource", "replay"]


def _check_speed(speed: float | None) -> None:
    if speed is not None and not speed > 0:
        raise ConfigError(f"speed must be positive (stream seconds per wall second) or None, got {speed}")


def _check(batch_size: int, speed: float | None) -> None:
    if batch_size < 1:
        raise ConfigError(f"batch_size must be at least 1, got {batch_size}")
    _check_speed(speed)


def replay(batches: Iterable[EventBatch], speed: float | None) -> Iterator[EventBatch]:
    """Yield ``batches``, with ``speed`` set no sooner than their events happen, scaled to wall time.

    A batch is released once ``(latest t in it - first t of the stream) / speed`` wall seconds have passed
    since the first batch arrived, so the stream keeps its original rhythm, compressed ``speed`` times.
    Times that are not finite do not pace (validation dead-letters them downstream).
    """
    _check_speed(speed)
    if speed is None:
        return iter(batches)
    return _paced(batches, speed)


def _paced(batches: Iterable[EventBatch], speed: float) -> Iterator[EventBatch]:
    origin: tuple[float, float] | None = None  # (stream time, wall time) of the first event
    for batch in batches:
        times = batch.t[np.isfinite(batch.t)]
        if times.size:
            if origin is None:
                origin = (float(times.min()), time.monotonic())
            delay = origin[1] + (float(times.max()) - origin[0]) / speed - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        yield batch


def _open_binary(path: Path) -> IO[bytes]:
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        return opener(path, "rb")
    except OSError as exc:
        raise ConnectorError(
            f"cannot read {path}: {exc.strerror}; check the path and its permissions"
        ) from exc


def _relocate(
    letters: list[DeadLetter], lines: list[int], payloads: list[str], where: str
) -> list[DeadLetter]:
    """Point dead letters from ``EventBatch.validate`` (row indices) at file lines."""
    return [
        dataclasses.replace(
            letter,
            where=f"{where}:line {lines[letter.index]}",
            index=lines[letter.index] - 1,
            payload=payloads[letter.index],
        )
        for letter in letters
    ]


_CSV_FIELDS = ("src", "dst", "t", "eid", "kind", "weight")


@dataclass
class CsvSource(ReplaySource):
    """Events from a delimited text file (``.gz`` is decompressed on the fly).

    ``columns`` names the event field held by each column in file order (``None`` skips a column); it
    needs ``src``, ``dst`` and ``t`` and may add ``eid``, ``kind`` (0/1/2 or a kind name) and ``weight``.
    Without an ``eid`` column, events are numbered by data row from 0. ``delimiter=None`` splits on runs
    of whitespace (KONECT/SNAP edge lists). Lines starting with ``comment`` are skipped.
    """

    path: str | Path
    columns: Sequence[str | None] = ("src", "dst", "t")
    delimiter: str | None = ","
    batch_size: int = 10_000
    speed: float | None = None
    header: bool = False
    comment: str | None = None
    string_ids: bool = False
    dead_letters: list[DeadLetter] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        _check(self.batch_size, self.speed)
        self.path = Path(self.path)
        named = [c for c in self.columns if c is not None]
        unknown = sorted(set(named) - set(_CSV_FIELDS))
        if unknown:
            raise ConfigError(
                f"unknown CSV column names {unknown}; use {', '.join(_CSV_FIELDS)} or None to skip"
            )
        if len(set(named)) != len(named):
            raise ConfigError(f"CSV columns {list(self.columns)} name a field twice")
        missing = [f for f in ("src", "dst", "t") if f not in named]
        if missing:
            raise ConfigError(f"CSV columns {list(self.columns)} lack {missing}; src, dst and t are required")

    def __iter__(self) -> Iterator[EventBatch]:
        self.dead_letters = []
        return self._begin(replay(self._pass(self._batches()), self.speed))

    @property
    def position_key(self) -> str:
        return f"file:{self.path}"

    def _csv_rows(self, text: IO[str], where: str) -> Iterator[tuple[int, list[str]]]:
        reader = csv.reader(text, delimiter=self.delimiter)
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                self._dead(where, reader.line_num, "", f"unreadable CSV row: {exc}")
                continue
            yield reader.line_num, row

    def _rows(self, text: IO[str], where: str) -> Iterator[tuple[int, list[str]]]:
        """(line number, fields) of every data row; the header is the first row not blank or a comment."""
        if self.delimiter is None:
            rows: Iterable[tuple[int, list[str]]] = ((n, line.split()) for n, line in enumerate(text, 1))
        else:
            rows = self._csv_rows(text, where)
        header = self.header
        for n, row in rows:
            if not row or (self.comment and row[0].lstrip().startswith(self.comment)):
                continue
            if header:
                header = False
                continue
            yield n, row

    def _batches(self) -> Iterator[EventBatch]:
        where = str(self.path)
        # An undecodable byte becomes U+FFFD: it spoils one row instead of stopping the stream. utf-8-sig
        # drops the byte-order mark spreadsheet exports begin with, which would otherwise spoil the first row.
        with io.TextIOWrapper(
            _open_binary(self.path), encoding="utf-8-sig", errors="replace", newline=""
        ) as text:
            ordinal = 0
            rows = self._rows(text, where)
            while chunk := list(islice(rows, self.batch_size)):
                batch = self._convert(chunk, ordinal, where)
                ordinal += len(chunk)
                if len(batch):
                    yield batch

    def _convert(self, chunk: list[tuple[int, list[str]]], ordinal: int, where: str) -> EventBatch:
        width = len(self.columns)
        node = str.strip if self.string_ids else _int64
        converters = {"src": node, "dst": node, "t": float, "eid": _int64, "kind": _kind, "weight": float}
        plan = [(i, name, converters[name]) for i, name in enumerate(self.columns) if name is not None]
        values: dict[str, list] = {name: [] for _, name, _ in plan}
        eids: list[int] = []
        lines: list[int] = []
        payloads: list[str] = []
        sep = self.delimiter or " "
        for k, (n, row) in enumerate(chunk):
            if len(row) != width:
                self._dead(
                    where, n, sep.join(row), f"expected {width} fields ({list(self.columns)}), got {len(row)}"
                )
                continue
            try:
                parsed = [(name, convert(row[i])) for i, name, convert in plan]
            except ValueError as exc:
                self._dead(where, n, sep.join(row), f"bad value: {exc}")
                continue
            for name, value in parsed:
                values[name].append(value)
            eids.append(ordinal + k)
            lines.append(n)
            payloads.append(sep.join(row))
        count = len(lines)
        ids = object if self.string_ids else np.int64
        with np.errstate(over="ignore"):  # weights beyond float32 become inf, which validate() dead-letters
            weight = np.array(values["weight"], dtype=np.float32) if "weight" in values else None
        batch = EventBatch(
            np.array(values.get("kind", [0] * count), dtype=np.int8),
            np.array(values["src"], dtype=ids),
            np.array(values["dst"], dtype=ids),
            np.array(values["t"], dtype=np.float64),
            np.array(values.get("eid", eids), dtype=np.int64),
            weight,
        )
        valid, letters = batch.validate(where)
        self.dead_letters += _relocate(letters, lines, payloads, where)
        return valid

    def _dead(self, where: str, n: int, payload: str, reason: str) -> None:
        self.dead_letters.append(
            DeadLetter(reason=reason, where=f"{where}:line {n}", payload=payload, index=n - 1)
        )


def _int64(value: str) -> int:
    number = int(value)
    if not -(2**63) <= number < 2**63:
        raise ValueError(f"{number} is outside the int64 range")
    return number


def _kind(value: str) -> int:
    value = value.strip()
    if value in KIND_NAMES:
        return int(KIND_NAMES[value])
    if value in ("0", "1", "2"):
        return int(value)
    raise ValueError(f"unknown kind {value!r}; use edge_add, edge_delete, node_update or 0/1/2")


@dataclass
class JsonLinesSource(ReplaySource):
    """Events from a JSON-lines file in the streamgnn wire format (``.gz`` is decompressed on the fly).

    Each batch decodes ``batch_size`` lines; malformed lines become dead letters naming their file line.
    """

    path: str | Path
    batch_size: int = 10_000
    speed: float | None = None
    dead_letters: list[DeadLetter] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        _check(self.batch_size, self.speed)
        self.path = Path(self.path)

    def __iter__(self) -> Iterator[EventBatch]:
        self.dead_letters = []
        return self._begin(replay(self._pass(self._batches()), self.speed))

    @property
    def position_key(self) -> str:
        return f"file:{self.path}"

    def _batches(self) -> Iterator[EventBatch]:
        first_line = 1
        with _open_binary(self.path) as f:
            while chunk := list(islice(f, self.batch_size)):
                batch, letters = decode_json_lines(b"".join(chunk), str(self.path), first_line=first_line)
                first_line += len(chunk)
                self.dead_letters += letters
                if len(batch):
                    yield batch


@dataclass
class DatasetSource(ReplaySource):
    """A shipped dataset (see ``streamgnn.datasets.names()``) replayed in time order."""

    name: str
    batch_size: int = 10_000
    speed: float | None = None
    dedup: bool = False
    drop_self_loops: bool = False
    dead_letters: list[DeadLetter] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        _check(self.batch_size, self.speed)
        datasets.info(self.name)  # fail at construction on an unknown name

    def __iter__(self) -> Iterator[EventBatch]:
        batches = datasets.iter_batches(
            self.name, self.batch_size, dedup=self.dedup, drop_self_loops=self.drop_self_loops
        )
        return self._begin(replay(self._pass(batches), self.speed))

    @property
    def position_key(self) -> str:
        return f"dataset:{self.name}"

    def _total(self) -> int | None:
        if self.dedup or self.drop_self_loops:
            return None  # known once read
        return datasets.info(self.name).rows
