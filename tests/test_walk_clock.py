"""TPNet's stream-time walk decay (``TGNConfig.walk_clock="time"``) against a dense brute-force replay, and
TPNet's MLP-Mixer over the neighbors' tokens (``TGNConfig.walk_mixer``) against a loop written out."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from test_sampling import build, ingest, timed
from test_walks import replayed_with_neighbors

from streamgnn import EventBatch
from streamgnn.errors import ConfigError
from streamgnn.nn import TGNConfig
from streamgnn.nn.pairs import PairEncoder
from streamgnn.nn.relative import RelativeEncoder
from streamgnn.sampling.pairs import PairFeatures
from streamgnn.sampling.walks import WalkFeatures
from streamgnn.store import TemporalGraphStore

RATES = (0.0, 0.05, 0.4)  # per time unit
HOPS = 3


def brute_timed(P: np.ndarray, edges, u: int, v: int, tq: float) -> np.ndarray:
    """TPNet's walk matrices replayed densely: every ``A_k`` (``k`` events) decays by ``exp(-rate k dt)``
    over a gap ``dt`` (each of its walks' events ages), and a time group adds ``M A_{k-1}``; decayed to
    ``tq`` at the end. So a walk weighs ``exp(-rate * sum over its events of (tq - event time))``.
    Returns the Gram matrix of u's hops then v's, per channel."""
    m = HOPS + 1
    out = np.zeros((len(RATES), 2 * m, 2 * m))
    if u < 0 or v < 0:
        return out
    evs = sorted((te, s, d) for s, d, te in edges if te < tq)
    n = len(P)
    for c, rate in enumerate(RATES):
        A = [np.eye(n)] + [np.zeros((n, n)) for _ in range(HOPS)]
        at, g = None, 0
        while g < len(evs):
            e = g
            while e < len(evs) and evs[e][0] == evs[g][0]:
                e += 1
            if at is not None:
                A = [A[0]] + [a * math.exp(-rate * k * (evs[g][0] - at)) for k, a in enumerate(A[1:], 1)]
            at = evs[g][0]
            M = np.zeros((n, n))
            for _, s, d in evs[g:e]:
                M[s, d] += 1
                M[d, s] += 1
            A = [A[0]] + [A[k] + M @ A[k - 1] for k in range(1, HOPS + 1)]
            g = e
        if at is not None:
            A = [A[0]] + [a * math.exp(-rate * k * (tq - at)) for k, a in enumerate(A[1:], 1)]
        X = np.array([a @ P for a in A])
        both = np.concatenate([X[:, u], X[:, v]])
        out[c] = both @ both.T
    return out


@settings(max_examples=60, deadline=None)
@replayed_with_neighbors
def test_time_decay_matches_brute_force_however_queries_and_batches_interleave(raw, splits, asked, data):
    """Queries after each batch at any times (pending events on scratch rows, rows of candidates sharing a
    source), some naming neighbors: the pair's products and each neighbor's are the dense replay's."""
    events = timed(raw)
    cuts = [0, *sorted({s for s in splits if s < len(events)}), len(events)]
    store, ref = build([])
    walks = WalkFeatures(hops=HOPS, dim=8, decays=RATES, clock="time")
    for (a, b), qs in zip(zip(cuts[:-1], cuts[1:], strict=True), [*asked, *[[]] * len(cuts)], strict=False):
        ingest(store, ref, events[a:b], a)
        if not qs or not store.num_nodes:
            continue
        src, dst, t = (np.array(c) for c in zip(*qs, strict=True))
        t = 2.0 * t - 1.0
        nbr = np.array(data.draw(st.lists(st.integers(-1, 12), min_size=2 * len(src), max_size=2 * len(src))))
        got, rel = walks.relative(store, src, dst, t, nbr.reshape(len(src), 2, 1))
        n, P = store.num_nodes, walks.vectors(store.num_nodes)
        table = store.edges()
        stored = list(zip(table.src.tolist(), table.dst.tolist(), table.t.tolist(), strict=True))
        m = HOPS + 1
        for i, (u, v, tq) in enumerate(zip(src.tolist(), dst.tolist(), t.tolist(), strict=True)):
            u, v = (x if x < n else -1 for x in (u, v))
            want = brute_timed(P, stored, u, v, tq)
            np.testing.assert_allclose(got[i], want, rtol=1e-9, atol=1e-9, err_msg=str((u, v, tq)))
            w = int(nbr[2 * i])  # u's neighbor: its hops against u's, then against v's
            if min(u, v) >= 0 and 0 <= w < n:
                cross = [brute_timed(P, stored, w, x, tq)[:, :m, m:].reshape(-1) for x in (u, v)]
                np.testing.assert_allclose(
                    rel[i, 0, 0, : 2 * len(RATES) * m * m], np.concatenate(cross), rtol=1e-4, atol=1e-5
                )


def test_a_walk_weighs_its_events_ages_in_stream_time_and_the_unit_is_the_rates():
    """1 - 2 at t=1, 2 - 3 at t=2, asked at t=10: the walk 1 -> 2 -> 3 keeps ``exp(-rate (9 + 8))`` of
    its weight (TPNet's score); the same stream in hours with the rate per hour gives the same, and the
    per-event clock gives ``exp(-rate * 2)`` (two events since the walk's first) whatever the times."""
    got = {}
    for clock, unit in (("time", 1.0), ("time", 3600.0), ("events", 1.0), ("events", 3600.0)):
        store = TemporalGraphStore()
        store.ingest(
            EventBatch.from_columns(src=[1, 2], dst=[2, 3], t=unit * np.array([1.0, 2.0]), eid=[0, 1])
        )
        u, w = store.node_index([1, 3])
        walks = WalkFeatures(hops=2, dim=64, decays=(0.0, 0.1 / unit), clock=clock)
        got[clock, unit] = walks.products(store, np.array([u]), np.array([w]), np.array([10.0 * unit]))[0]
    for unit in (1.0, 3600.0):
        plain = got["time", unit][0, 0, 5]  # <P[1], 3's two-event walks>: the walk's own weight
        assert abs(plain) > 0.1 and got["events", unit][0, 0, 5] == plain
        assert got["time", unit][1, 0, 5] == pytest.approx(plain * math.exp(-0.1 * 17), rel=1e-9)
        assert got["events", unit][1, 0, 5] == pytest.approx(plain * math.exp(-0.1 / unit * 2), rel=1e-9)
    np.testing.assert_allclose(got["time", 1.0], got["time", 3600.0], rtol=1e-9, atol=1e-12)


def test_the_config_key_reaches_the_walk_state_and_sharding_refuses_it():
    store = TemporalGraphStore()
    assert PairFeatures.of(store, TGNConfig()).walks.clock == "events"
    timed_walks = PairFeatures.of(store, TGNConfig(walk_clock="time", walk_decays=(1e-7,))).walks
    assert timed_walks.clock == "time" and timed_walks.settings != WalkFeatures(2, 64, (1e-7,)).settings
    with pytest.raises(ConfigError, match="walk_clock"):
        TGNConfig(walk_clock="seconds")
    with pytest.raises(ConfigError, match="walk clock"):
        WalkFeatures(2, 8, (0.0,), clock="seconds")
    from streamgnn.shard import ShardConfig, ShardedTrainer
    from streamgnn.train import TrainConfig

    model = TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, pair_dim=4, walk_dim=8, walk_clock="time")
    with pytest.raises(ConfigError, match="walk_clock=events under train.sharding"):
        ShardedTrainer(TrainConfig(model=model, sharding=ShardConfig(num_partitions=2)))


def brute_mixed(enc: RelativeEncoder, rel: np.ndarray, cooc: np.ndarray) -> np.ndarray:
    """``enc``'s output written out in float64 loops over its weights: per endpoint, each token the
    two-layer ReLU MLP of its (signed log) walk products and log counts, zero for padding; then each mixer
    layer (a LayerNorm and GELU MLP across tokens per channel, then across channels per token, residual);
    then the mean over the real tokens."""
    W = {k: v.detach().double().numpy() for k, v in enc.state_dict().items()}
    gelu = np.vectorize(lambda x: 0.5 * x * (1 + math.erf(x / math.sqrt(2))))

    def lin(x, name):
        return x @ W[name + ".weight"].T + W[name + ".bias"]

    def norm(x, name):
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5) * W[name + ".weight"] + W[name + ".bias"]

    n, _, k, _ = rel.shape
    out = np.zeros((n, 2, W["mlp.2.bias"].shape[0]))
    for i in range(n):
        for s in range(2):
            valid = (rel[i, s] != 0).any(-1)
            x = np.concatenate(
                [np.sign(rel[i, s]) * np.log1p(np.abs(rel[i, s])), np.log1p(cooc[i, s, :k])], -1
            )
            tok = lin(np.maximum(lin(x, "mlp.0"), 0), "mlp.2") * valid[:, None]  # [k, dim]
            for layer in range(len(enc.mixers)):
                p = f"mixers.{layer}."
                h = norm(tok.T, p + "token_norm")  # [dim, k]
                tok = tok + lin(gelu(lin(h, p + "token_mlp.0")), p + "token_mlp.2").T
                h = norm(tok, p + "channel_norm")
                tok = tok + lin(gelu(lin(h, p + "channel_mlp.0")), p + "channel_mlp.2")
            if valid.any():
                out[i, s] = tok[valid].mean(0)
    return out.reshape(n, -1)


def test_the_mixer_matches_the_loop_written_out_and_leaves_padding_out():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    k, width = 4, 5
    enc = RelativeEncoder(width, dim=6, mixer=k)
    for p in enc.parameters():  # LayerNorm's own start (ones and zeros) would hide a swapped weight
        torch.nn.init.normal_(p, std=0.5)
    rel = rng.normal(0, 3, (7, 2, k, width)).astype(np.float32)
    rel[rng.random((7, 2, k)) < 0.4] = 0.0  # padding among the tokens
    rel[0, 1] = 0.0  # an endpoint with no neighbor: zeros
    cooc = rng.integers(0, 5, (7, 2, k + 2, 2))
    got = enc(torch.from_numpy(rel), torch.from_numpy(cooc)).detach().numpy()
    np.testing.assert_allclose(got, brute_mixed(enc, rel.astype(np.float64), cooc), rtol=1e-4, atol=1e-4)
    assert not got[0, 6:].any()
    mean_only = RelativeEncoder(width, dim=6)
    mean_only.mlp.load_state_dict(enc.mlp.state_dict())
    assert not np.allclose(mean_only(torch.from_numpy(rel), torch.from_numpy(cooc)).detach().numpy(), got)


def test_the_mixer_key_builds_the_encoder_and_needs_neighbors():
    on = TGNConfig(pair_dim=4, walk_dim=8, walk_neighbors=3, walk_mixer=True)
    enc, plain = PairEncoder.of(on), PairEncoder.of(TGNConfig(pair_dim=4, walk_dim=8, walk_neighbors=3))
    assert len(enc.relative.mixers) == 2 and not len(plain.relative.mixers)
    assert enc.relative.mixers[0].token_norm.normalized_shape == (3,) and enc.out_dim == plain.out_dim
    for bad in (dict(walk_mixer=True), dict(walk_neighbors=2, walk_mixer=1)):
        with pytest.raises(ConfigError, match="walk_mixer"):
            TGNConfig(**bad)
