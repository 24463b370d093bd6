"""What a finished online run leaves behind for a person: ``metrics.png`` (AP/AUC/MRR and loss per window
against stream time) and ``summary.json``. Shared by every job that trains on a stream (replicated, sharded,
the demo), so it sits below them all."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from .metrics import WindowMetrics
from .trainer import OnlineResult


def plot_windows(
    windows: list[WindowMetrics], path: str | Path, baselines: dict[str, list[WindowMetrics]] | None = None
) -> Path:
    """AP/AUC/MRR and loss per window against stream time, as a PNG (Agg; touches no global backend);
    each baseline's AP and MRR dashed beside them."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = Path(path)
    fig = Figure(figsize=(9, 6), tight_layout=True)
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True)
    x = np.array([w.t_end for w in windows], np.float64)
    for name in ("ap", "auc", "mrr"):
        top.plot(x, [getattr(w, name) for w in windows], marker=".", label=name.upper())
    for base, base_windows in (baselines or {}).items():
        bx = [w.t_end for w in base_windows]
        for name, color in (("ap", "tab:blue"), ("mrr", "tab:green")):
            values = [getattr(w, name) for w in base_windows]
            top.plot(
                bx, values, linestyle="--" if base == "edgebank" else ":", color=color, label=f"{base} {name}"
            )
    top.set_ylabel("score (per window)")
    top.set_ylim(0.0, 1.0)
    top.grid(alpha=0.3)
    top.legend(loc="lower right")
    bottom.plot(x, [w.loss for w in windows], color="tab:red", marker=".")
    bottom.set_ylabel("training loss")
    bottom.set_xlabel("stream time (the events' t; seconds in every bundled dataset)")
    bottom.grid(alpha=0.3)
    events = windows[-1].end_events if windows else 0
    top.set_title(f"online test-then-train link prediction ({events:,} scored events)")
    if len(windows) < 2:  # one window is one dot: say why rather than draw an empty-looking chart
        top.text(
            0.5, 0.5, f"{len(windows)} metrics window(s): run more events or lower TrainConfig.window_events",
            transform=top.transAxes, ha="center", va="center",
        )  # fmt: skip
    fig.savefig(path, dpi=110)
    return path


def write_summary(result: OnlineResult, path: str | Path) -> Path:
    """``result`` as JSON; NaN (an undefined metric) is written as null."""
    path = Path(path)
    path.write_text(json.dumps(_plain(result.as_dict()), indent=1))
    return path


def _plain(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
