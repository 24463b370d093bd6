"""The TGB diagnosis (``benchmarks.tgb_groups``): each test edge's group and the heuristics' reciprocal
ranks against a brute-force replay of the history, for any small stream and batch cut; the tie rule is
TGB's ``Evaluator``'s."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamgnn.benchmarks.tgb_groups import GROUPS, Diagnosis, group_of, reciprocal_rank
from streamgnn.events import EventBatch


def _brute(history: list[tuple[int, int, float]], src: int, dst: int, negs, window: int):
    """The group and heuristic ranks of ``(src, dst)`` read straight off the earlier events."""
    mine = [(d, t) for s, d, t in history if s == src]
    last = {d: max(t for e, t in mine if e == d) for d, _ in mine}
    count = {d: sum(e == d for e, _ in mine) for d in last}
    recent = [d for _, d, _ in history[-window:]] if window else []
    pop = {d: recent.count(d) for d in set(recent)}

    def rr(key) -> float:
        p = key(dst)
        above = sum(key(n) > p for n in negs)
        ties = sum(key(n) == p for n in negs)
        return 1.0 / (1 + above + 0.5 * ties)

    rank = 1 + sum(t > last[dst] for t in last.values()) if dst in last else 0
    heur = {
        "recency": rr(lambda d: (d in last, last[d] if d in last else pop.get(d, 0))),
        "frequency": rr(lambda d: (count.get(d, 0), 0 if d in last else pop.get(d, 0))),
        "edgebank": rr(lambda d: (d in last,)),
    }
    return group_of(dst in last, rank), heur


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(20, 80),
    users=st.integers(1, 6),
    pages=st.integers(2, 12),
    batch=st.integers(1, 9),
    window=st.integers(1, 30),
    seed=st.integers(0, 2**16),
)
def test_groups_and_heuristics_match_a_replay_of_the_history(n, users, pages, batch, window, seed):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, users, n)
    dst = users + rng.integers(0, pages, n)
    t = np.sort(rng.integers(0, n // 2 + 1, n)).astype(float)  # repeated times: ties in recency
    events = EventBatch.from_columns(src=src, dst=dst, t=t, eid=np.arange(n))
    cut = n // 2
    diag = Diagnosis(events, np.arange(cut), window)
    history = [(int(s), int(d), float(x)) for s, d, x in zip(src[:cut], dst[:cut], t[:cut], strict=True)]
    expected = []
    for lo in range(cut, n, batch):
        part = events.take(np.arange(lo, min(lo + batch, n)))
        negs = [np.setdiff1d(np.unique(dst), [d]) for d in part.dst]  # every other page, as tgbl-wiki's
        ours = rng.random(len(part)).tolist()
        diag.batch(part, negs, ours)
        expected += [
            (*_brute(history, int(s), int(d), ng, window), o)
            for s, d, ng, o in zip(part.src, part.dst, negs, ours, strict=True)
        ]
        history += [(int(s), int(d), float(x)) for s, d, x in zip(part.src, part.dst, part.t, strict=True)]
    got = diag.arrays()
    assert list(got["group"]) == [g for g, _, _ in expected]
    np.testing.assert_allclose(got["ours"], [o for _, _, o in expected])
    for h in ("recency", "frequency", "edgebank"):
        np.testing.assert_allclose(got[h], [e[h] for _, e, _ in expected])
    table = diag.table()
    assert table["all"]["edges"] == n - cut == sum(table[g]["edges"] for g in GROUPS)
    assert table["repeat"]["edges"] == table["all"]["edges"] - table["new"]["edges"]


def test_ties_count_half_as_tgbs_evaluator_counts_them():
    evaluate = pytest.importorskip("tgb.linkproppred.evaluate", reason="py-tgb is not installed")
    evaluator = evaluate.Evaluator(name="tgbl-wiki")
    rng = np.random.default_rng(1)
    for _ in range(20):
        scores = rng.integers(0, 4, 30).astype(float)  # many ties
        tgb = evaluator.eval({"y_pred_pos": scores[:1], "y_pred_neg": scores[1:], "eval_metric": ["mrr"]})
        assert reciprocal_rank(scores[None, :1], scores[None, 1:]) == pytest.approx(tgb["mrr"])
