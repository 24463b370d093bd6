"""Labels as records on the wire: JSON lines decoded and admitted, every bad one a dead letter.

One object per label: ``{"node": id, "t": time, "y": value}``, with ``"dst": id`` for an edge label; for
node affinity ``y`` is a list of ``classes`` non-negative numbers (counts or shares: scaled to sum to 1 on
admission). A label is admitted when its fields are what the task takes (a class in ``0..classes-1``, a
finite value, such a list), its
time is a finite number not before ``after`` (a label older than what the job has already scored is late:
its moment has passed), and its node (and edge destination) is one the store has seen. Anything else
becomes a ``DeadLetter`` naming the line and the reason; the other lines still decode, and the admitted
labels come back sorted by time (stably), ready for ``Labels``' consumers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import numpy as np

from ..events import DeadLetter
from .labels import Labels
from .task import Classification, Task

FIELDS = frozenset({"node", "t", "y", "dst"})


def _id(value) -> bool:
    if isinstance(value, int) and not isinstance(value, bool):
        return -(2**63) <= value < 2**63
    return isinstance(value, str) and value != ""


def _problem(obj, task: Task, after: float | None) -> str | None:
    """Why a decoded line is not a label for ``task`` (None: it is one)."""
    if not isinstance(obj, dict):
        return "not a JSON object"
    extra = sorted(set(obj) - FIELDS)
    if extra:
        return f"unknown field {extra[0]!r} (a label has node, t, y and, on an edge, dst)"
    missing = [f for f in ("node", "t", "y") if f not in obj]
    if missing:
        return f"missing field {missing[0]!r}"
    if task.on_edges != ("dst" in obj):
        return "an edge label needs 'dst'" if task.on_edges else "a node label has no 'dst'"
    if not all(_id(obj[f]) for f in ("node", "dst") if f in obj):
        return "node ids are int64 ints or non-empty strings"
    t = obj["t"]
    if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
        return f"time {t!r} is not a finite number"
    if after is not None and t < after:
        return f"late label: time {t} is before {after}, what the job has already scored"
    y = obj["y"]
    if task.label_shape:
        return _distribution_problem(y, task.label_shape[0])
    if isinstance(y, bool) or not isinstance(y, int | float) or not math.isfinite(y):
        return f"label value {y!r} is not a finite number"
    if isinstance(task, Classification) and (y != int(y) or not 0 <= y < task.classes):
        return f"label value {y!r} is not a class in 0..{task.classes - 1}"
    return None


def _distribution_problem(y, classes: int) -> str | None:
    """Why ``y`` is not a list of ``classes`` non-negative finite numbers, not all 0 (None: it is one)."""
    if not isinstance(y, list) or len(y) != classes:
        return f"label value {y!r} is not a list of {classes} shares (one per class)"
    if any(isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0 for v in y):
        return f"label value {y!r}: each share is a finite number >= 0"
    total = sum(y)
    if not total > 0:
        return f"label value {y!r}: the shares are all 0 (no class to rank)"
    if not math.isfinite(total):
        return f"label value {y!r}: the shares' sum is not finite"
    return None


def decode_labels(
    payload: bytes | str,
    task: Task,
    *,
    known: Callable[[np.ndarray], np.ndarray] | None = None,
    after: float | None = None,
    where: str = "labels",
) -> tuple[Labels, list[DeadLetter]]:
    """The labels of a JSON-lines ``payload`` for ``task`` and a dead letter for each bad line (module
    docstring). ``known``: ids -> bool mask of nodes the store has seen (e.g. ``store.node_index(ids,
    strict=False) >= 0``); None admits any node."""
    letters: list[DeadLetter] = []
    good: list[dict] = []
    text = payload if isinstance(payload, str) else bytes(payload).decode("utf-8", errors="replace")
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            reason = f"not JSON ({exc.msg if hasattr(exc, 'msg') else type(exc).__name__})"
        else:
            reason = _problem(obj, task, after)
        if reason is None:
            good.append({**obj, "line": n, "text": line})
        else:
            letters.append(DeadLetter(reason=reason, where=f"{where}:line {n}", payload=line, index=n - 1))
    if known is not None and good:
        for end in ("node", "dst") if task.on_edges else ("node",):
            seen = np.asarray(known(_ids([g[end] for g in good])), bool)
            for g in [g for g, ok in zip(good, seen, strict=True) if not ok]:
                reason = (
                    f"unknown {'node' if end == 'node' else 'edge destination'} {g[end]!r}: no event has it"
                )
                n = g["line"]
                letters.append(
                    DeadLetter(reason=reason, where=f"{where}:line {n}", payload=g["text"], index=n - 1)
                )
            good = [g for g, ok in zip(good, seen, strict=True) if ok]
    letters.sort(key=lambda d: d.index)
    good.sort(key=lambda g: g["t"])
    y = np.array([g["y"] for g in good], np.int64 if isinstance(task, Classification) else np.float64)
    if task.label_shape:  # shares: each row scaled to sum to 1
        y = y.reshape(len(good), *task.label_shape)
        y = y / y.sum(axis=1, keepdims=True)
    t = np.array([g["t"] for g in good], np.float64)
    dst = _ids([g["dst"] for g in good]) if task.on_edges else None
    origin = np.array([f"{where}:line {g['line']}" for g in good], dtype=object)
    return Labels(_ids([g["node"] for g in good]), t, y, dst, origin), letters


def _ids(values: list) -> np.ndarray:
    """int64 ids, or an object array where any is a string (as ``EventBatch`` holds them)."""
    if all(isinstance(v, int) for v in values):
        return np.array(values, np.int64)
    return np.array(values, dtype=object)
