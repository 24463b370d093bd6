"""Scoring and training encode and project each distinct (source, candidate, time) pair once
(``tgn_model.PairRows``): the logits, and a training step's gradient, equal those of encoding every
pair."""

from __future__ import annotations

import numpy as np
import torch

from streamgnn.datasets import load
from streamgnn.train import OnlineTrainer, TrainConfig
from streamgnn.train.tgn_model import TGNLinkModel

ENCODE = TGNLinkModel._encode


def every_pair(self, *pairs):
    """The encoding before distinct pairs: every pair through the encoder, as its own row."""
    out = []
    for p in pairs:
        if p is None:
            out.append((None, None))
            continue
        flat = p.index.reshape(-1)
        rows = torch.arange(len(flat)).view(p.index.shape)
        out.append((self.model.pair_encoder(*(x[flat] for x in p.raw)), rows))
    return out


def scoring_every_pair(self, *pairs):
    """Every pair encoded apart when scoring; training as it is (its gradient has its own test)."""
    return ENCODE(self, *pairs) if torch.is_grad_enabled() else every_pair(self, *pairs)


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
    slow, _ = scored(monkeypatch, scoring_every_pair)
    assert len(fast) > 1000
    np.testing.assert_allclose(fast[:, :2], slow[:, :2], rtol=1e-5, atol=1e-5)
    assert abs(np.nanmean(fast[:, 2]) - np.nanmean(slow[:, 2])) < 1e-3  # MRR (ranks may swap exact near-ties)
    assert sum(d for d, _ in distinct) < 0.6 * sum(n for _, n in distinct)  # most pairs repeat


def test_a_training_step_has_the_gradient_of_encoding_every_pair(monkeypatch):
    """Training encodes the distinct pairs it uses once; their gradients add up in the gather: the same
    gradient as every pair through the encoder (to float rounding: the sums' order differs)."""
    data = load("jodie_wikipedia")[:1200]
    grads = []
    for encode in (None, every_pair):
        trainer = OnlineTrainer(TrainConfig(seed=5))
        for lo in range(0, 1000, 200):  # the same steps in both runs: the same state and parameters
            trainer.step(data[lo : lo + 200], train=True, score=False)
        if encode is not None:
            monkeypatch.setattr(TGNLinkModel, "_encode", encode)
        optimizer = trainer.link_model.optimizer
        params = list(trainer.model.parameters())
        monkeypatch.setattr(optimizer, "step", recording(optimizer.step, params, grads))
        trainer.step(data[1000:1200], train=True, score=False)
    fast, slow = grads
    assert len(fast) == len(slow) and any(g.abs().sum() > 0 for g in fast)
    for a, b in zip(fast, slow, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def recording(step, params, grads):
    """``step`` (an optimizer's), recording the gradients of ``params`` in ``grads`` first."""

    def recorded(*a, **kw):
        grads.append([torch.zeros(0) if p.grad is None else p.grad.clone() for p in params])
        return step(*a, **kw)

    return recorded
