"""Rebalancing: move placed vertices when load drifts out of balance or the recent cut drifts up.

A one-pass partitioner places a vertex from the few edges it has when it arrives; later edges may say it
belongs elsewhere. Rebalancing re-places chosen vertices from their whole adjacency (read from the
store's blocks, as of the check's stream position) and keeps the partitions within capacity. It runs at
exact stream positions (every ``RebalanceConfig.every_edges`` edges), so the assignment still depends
only on the events, never on batch boundaries. A move changes only partition labels: every query of the
store answers the same before and after. Whoever holds per-vertex data by partition (a sharded store, a
trainer's memory rows) registers a hook to move it::

    store.partitioner.on_move.append(lambda moves: shard.migrate(moves.vertices, moves.old, moves.new))

Every move is logged (``logging`` at INFO, with its reason) and counted (``moved``, ``moves_by_reason``).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from . import rebalance_kernels as R

log = logging.getLogger(__name__)
REASONS = ("imbalance", "window_cut", "manual")


@dataclass(frozen=True)
class Moves:
    """Vertices (internal ids) moved from ``old`` to ``new`` partitions, why, and at which stream edge."""

    vertices: np.ndarray
    old: np.ndarray
    new: np.ndarray
    reason: str
    at_edge: int
    detail: str

    def __len__(self) -> int:
        return len(self.vertices)


class RebalanceState:
    """What rebalancing remembers between checks (checkpointed with the partitioner)."""

    def __init__(self) -> None:
        self.by_reason = dict.fromkeys(REASONS, 0)
        self.checks = 0
        self.last_cut = 0.0  # the window's cut right after the last refinement

    def state(self) -> dict[str, np.ndarray]:
        counts = [self.by_reason[r] for r in REASONS] + [self.checks]
        return {
            "rebalance_counts": np.array(counts, np.int64),
            "rebalance_cut": np.array([self.last_cut]),
        }

    @classmethod
    def from_state(cls, arrays: dict[str, np.ndarray]) -> RebalanceState:
        """The counters ``state()`` saved (none saved: zero); ValueError where they are malformed."""
        counts = arrays.get("rebalance_counts", np.zeros(len(REASONS) + 1, np.int64))
        cut = arrays.get("rebalance_cut", np.zeros(1))
        if counts.shape != (len(REASONS) + 1,) or cut.shape != (1,) or (counts < 0).any():
            raise ValueError("the rebalancing counters have the wrong shape or are negative")
        state = cls()
        state.by_reason = dict(zip(REASONS, counts[:-1].tolist(), strict=True))
        state.checks = int(counts[-1])
        state.last_cut = float(cut[0])
        return state


def window_cut(labels: np.ndarray, recent: np.ndarray) -> float:
    """Fraction of the recent edges (both ends placed, not self-loops) whose ends lie apart."""
    a, b = labels[recent[:, 0]], labels[recent[:, 1]]
    ok = (a >= 0) & (b >= 0) & (recent[:, 0] != recent[:, 1])
    return float((a != b)[ok].mean()) if ok.any() else 0.0


def check(part, labels: np.ndarray, graph, edge_limit: int, reason: str | None = None) -> list[Moves]:
    """Run one rebalancing check of ``part`` (a GreedyPartitioner) against ``graph`` (the store's
    ``TCSRView``); ``reason="manual"`` refines the window whatever its cut. Returns the moves made."""
    cfg = part.config.rebalance
    state: RebalanceState = part.rebalance_state
    state.checks += 1
    done: list[Moves] = []
    budget = cfg.max_moves
    counts = np.zeros(part.num_partitions, np.int64)
    k = part.num_partitions
    mean = part.sizes.sum() / k
    if mean > 0 and part.sizes.max() > cfg.max_imbalance * mean:
        limit = max(math.ceil(mean), math.floor(min(cfg.max_imbalance, 1 + part.config.balance_slack) * mean))
        over = np.flatnonzero(part.sizes > limit)
        cands = np.flatnonzero(np.isin(labels[: len(graph.deg)], over))
        detail = f"max partition {part.sizes.max()} > {cfg.max_imbalance:g} x mean {mean:.1f}; limit {limit}"
        moved, to = np.empty(len(cands), np.int64), np.empty(len(cands), np.int32)
        old = labels[cands].copy()  # cands are sorted, and moves come in their order
        nm = R.drain(cands, graph.start, graph.deg, graph.pool, edge_limit, labels, part.sizes, counts, limit,
                     budget, moved, to)  # fmt: skip
        budget -= nm
        old = old[np.searchsorted(cands, moved[:nm])]
        done.append(_record(part, moved[:nm], old, to[:nm], "imbalance", edge_limit, detail))
    recent = part.recent_edges()
    before = window_cut(labels, recent)
    bound = cfg.max_window_cut
    if budget > 0 and len(recent) and (before > bound or reason == "manual"):
        cands = np.unique(recent.reshape(-1)).astype(np.int64)
        moved, to = np.empty(len(cands), np.int64), np.empty(len(cands), np.int32)
        c = part.config
        n = max(part.vertices_seen, c.expected_nodes)
        alpha = 0.0 if c.alpha is None else c.alpha
        old = labels[cands].copy()
        for _ in range(cfg.passes):
            left = budget - int((labels[cands] != old).sum())
            nm = R.refine(cands, graph.start, graph.deg, graph.pool, edge_limit, labels, part.sizes, counts,
                          n, part.edges_seen, part.method_id, c.balance_slack, c.gamma, alpha, cfg.min_gain,
                          left, moved, to)  # fmt: skip
            if nm <= len(cands) // 100:
                break
        changed = np.flatnonzero(labels[cands] != old)
        state.last_cut = window_cut(labels, recent)
        why = reason or "window_cut"
        after = state.last_cut
        detail = f"window cut {before:.3f} -> {after:.3f} (bound {bound:g}) over {len(recent)} edges"
        done.append(
            _record(part, cands[changed], old[changed], labels[cands[changed]], why, edge_limit, detail)
        )
    return [m for m in done if len(m)]


def _record(part, vertices, old, new, reason, at_edge, detail) -> Moves:
    moves = Moves(vertices.copy(), old.astype(np.int32), new.astype(np.int32), reason, at_edge, detail)
    if len(moves):
        part.moved += len(moves)
        part.rebalance_state.by_reason[reason] += len(moves)
        log.info(
            "partition rebalance at edge %d: moved %d vertices (%s: %s)", at_edge, len(moves), reason, detail
        )
        for hook in part.on_move:
            hook(moves)
    return moves


__all__ = ["REASONS", "Moves", "RebalanceState", "check", "window_cut"]
