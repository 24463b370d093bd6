"""What a finished online run leaves behind for a person: ``metrics.png`` (AP/AUC/MRR and loss per window
against stream time) and ``summary.json``. Shared by every job that trains on a stream (replicated, sharded,
the demo), so it sits below them all."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np

from .edgebank import BASELINE_LABELS
from .metrics import WindowMetrics
from .trainer import OnlineResult


def write_report(result: OnlineResult, out_dir: str | Path) -> OnlineResult:
    """``metrics.png`` and ``summary.json`` in ``out_dir`` (created); ``result`` with their paths, which the
    summary names too."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plot = plot_windows(result.windows, out / "metrics.png", result.baseline_windows)
    result = dataclasses.replace(result, plot_path=plot, summary_path=out / "summary.json")
    write_summary(result, result.summary_path)
    return result


def plot_windows(
    windows: list[WindowMetrics],
    path: str | Path,
    baselines: dict[str, list[WindowMetrics]] | None = None,
    model: str = "TGN",
) -> Path:
    """AP (with AUC) and MRR per window against stream time, each baseline's beside the model's on the same
    negatives (so a reader sees at a glance whether the model beats a lookup table), and the training loss;
    a PNG (Agg; touches no global backend)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = Path(path)
    fig = Figure(figsize=(9, 8), tight_layout=True)
    FigureCanvasAgg(fig)
    ap_ax, mrr_ax, loss_ax = fig.subplots(3, 1, sharex=True)
    x = np.array([w.t_end for w in windows], np.float64)
    lone = len(windows) < 2  # one window is a point, not a line: mark every series so it shows
    ap_ax.plot(x, [w.auc for w in windows], color="tab:gray", linewidth=1, marker="." if lone else None,
               label=f"{model} AUC")  # fmt: skip
    for ax, name in ((ap_ax, "ap"), (mrr_ax, "mrr")):
        values = [getattr(w, name) for w in windows]
        ax.plot(x, values, color="tab:blue", marker=".", label=f"{model} {name.upper()}")
        for i, (base, base_windows) in enumerate((baselines or {}).items()):
            values = [getattr(w, name) for w in base_windows]
            ax.plot([w.t_end for w in base_windows], values, linestyle=("--", ":")[i % 2], color=f"C{i + 1}",
                    marker="x" if lone else None,
                    label=f"{BASELINE_LABELS.get(base, base)} {name.upper()}")  # fmt: skip
        ax.set_ylabel(f"{name.upper()} (per window)")
        ax.set_ylim(0.0, 1.0)
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize="small")  # TGN's MRR often runs along the bottom
    loss_ax.plot(x, [w.loss for w in windows], color="tab:red", marker=".")
    loss_ax.set_ylabel("training loss")
    loss_ax.set_xlabel("stream time (the events' t; seconds in every bundled dataset)")
    loss_ax.grid(alpha=0.3)
    events = windows[-1].end_events if windows else 0
    beside = " vs baselines on the same negatives" if baselines else ""
    ap_ax.set_title(f"online test-then-train link prediction ({events:,} scored events): {model}{beside}")
    mrr_ax.set_title("MRR: rank of the true destination among fixed negatives", fontsize="medium")
    loss_ax.set_title(f"{model} training loss", fontsize="medium")
    if len(windows) < 2:  # one window is one dot: say why rather than draw an empty-looking chart
        ap_ax.text(
            0.5, 0.5, f"{len(windows)} metrics window(s): run more events or lower TrainConfig.window_events",
            transform=ap_ax.transAxes, ha="center", va="center",
        )  # fmt: skip
    fig.savefig(path, dpi=110)
    return path


def scores_text(result: OnlineResult, model: str = "TGN") -> str:
    """The model's online AP/AUC/MRR and each baseline's AP/MRR on the same positives and negatives; on a
    budget, what was learned and evaluated, with the sampled figures' intervals."""
    m = result.metrics
    parts = [f"{model} online AP {m.ap:.4f}  AUC {m.auc:.4f}  MRR {m.mrr:.4f}"]
    parts += [
        f"{BASELINE_LABELS.get(n, n)} AP {b.ap:.4f}  MRR {b.mrr:.4f}" for n, b in result.baselines.items()
    ]
    if result.follow is not None and result.follow.mode != "every_event":  # the figures are of a sample
        parts.append(result.follow.text())
    return "; ".join(parts)


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


def latency_text(result: OnlineResult) -> str:
    """Arrival-to-queryable latency, or why there is none (no event was processed)."""
    if not math.isfinite(result.latency_p50_ms):
        return "no events processed, so no latency"
    return f"arrival->queryable p50 {result.latency_p50_ms:.0f} ms, p99 {result.latency_p99_ms:.0f} ms"
