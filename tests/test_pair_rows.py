"""Scoring encodes each distinct (source, candidate, time) pair once (``tgn_model.PairRows``): its logits
equal those of encoding every pair."""

from __future__ import annotations

import numpy as np
import torch

from streamgnn.datasets import load
from streamgnn.train import OnlineTrainer, TrainConfig
from streamgnn.train.tgn_model import TGNLinkModel

ENCODE = TGNLinkModel._encode


def every_pair(self, *pairs):
    """The encoding before distinct pairs: every pair through the encoder (as training does)."""
    if torch.is_grad_enabled():
        return ENCODE(self, *pairs)
    with torch.enable_grad():
        out = ENCODE(self, *pairs)
    return [None if x is None else x.detach() for x in out]


def scored(monkeypatch=None, encode=None):
    data = load("jodie_wikipedia")[:3000]
    trainer = OnlineTrainer(TrainConfig(seed=5))
    if encode is not None:
        monkeypatch.setattr(TGNLinkModel, "_encode", encode)
    out, distinct = [], []
    read = trainer.link_model.read_pairs

    def reading(src, cand, t):
        rows = read(src, cand, t)
        distinct.append((len(rows.raw[0]), rows.index.numel()))
        return rows

    trainer.link_model.read_pairs = reading
    for k, lo in enumerate(range(0, len(data), 200)):
        result = trainer.step(data[lo : lo + 200], train=k % 2 == 0, score=k >= 5)
        out.append(np.c_[result.pos, result.neg, result.rr])
    return np.concatenate(out), distinct


def test_scores_equal_encoding_every_pair(monkeypatch):
    fast, distinct = scored()
    slow, _ = scored(monkeypatch, every_pair)
    assert len(fast) > 1000
    np.testing.assert_allclose(fast[:, :2], slow[:, :2], rtol=1e-5, atol=1e-5)
    assert abs(np.nanmean(fast[:, 2]) - np.nanmean(slow[:, 2])) < 1e-3  # MRR (ranks may swap exact near-ties)
    assert sum(d for d, _ in distinct) < 0.6 * sum(n for _, n in distinct)  # most pairs repeat
