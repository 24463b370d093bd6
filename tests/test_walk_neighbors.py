"""The neighbors' relative walk products (``WalkFeatures.relative``, ``TGNConfig.walk_neighbors``): each
one against a dense brute-force replay of the walk matrices, the neighbors the pair reader picks (each
endpoint's latest, as co-occurrence counts them), the config switch through the pair encoder to the
logits, and the refusal under sharding."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from test_sampling import timed
from test_walks import HOPS, RATES, asked_after_batches, brute_products, replayed_with_neighbors

from streamgnn import EventBatch
from streamgnn.errors import ConfigError
from streamgnn.nn import TGNConfig
from streamgnn.nn.pairs import PairEncoder
from streamgnn.sampling.pairs import PairFeatures
from streamgnn.sampling.walks import WalkFeatures
from streamgnn.store import TemporalGraphStore

M = HOPS + 1


def brute_relative(P, stored, u: int, v: int, w: int, side: int, tq: float) -> np.ndarray:
    """Neighbor ``w`` of endpoint ``side``'s row: per channel its hops against the own endpoint's, then
    against the other's, then its hops' squared norms; zeros for an unknown node."""
    if min(u, v, w) < 0:
        return np.zeros(len(RATES) * (2 * M * M + M))
    own, other = (u, v) if side == 0 else (v, u)
    cross = [brute_products(P, stored, w, x, tq)[:, :M, M:].reshape(-1) for x in (own, other)]
    norms = np.diagonal(brute_products(P, stored, w, w, tq)[:, :M, :M], axis1=1, axis2=2).reshape(-1)
    return np.concatenate([*cross, norms])


@settings(max_examples=60, deadline=None)
@replayed_with_neighbors
def test_matches_brute_force_for_any_neighbors(raw, splits, asked, data):
    """Queries after each batch, at any times (pending events in scratch rows, rows of candidates that
    reuse the source's products), each naming any neighbors (repeats, unknown ids, -1): every value is
    the dense replay's, and the pair's own products are ``products``'."""
    events = timed(raw)
    walks = WalkFeatures(hops=HOPS, dim=8, decays=RATES)
    for store, (src, dst, t), stored in asked_after_batches(events, splits, asked):
        k = data.draw(st.integers(0, 3))
        nbr = np.array(
            data.draw(st.lists(st.integers(-1, 12), min_size=2 * k * len(src), max_size=2 * k * len(src)))
        )
        nbr = nbr.reshape(len(src), 2, k)
        if len(src) > 1 and k:  # a row of candidates keeps its source's neighbors, as the reader gives them
            same = (src[1:] == src[:-1]) & (t[1:] == t[:-1])
            for i in np.flatnonzero(same) + 1:
                nbr[i, 0] = nbr[i - 1, 0]
        got, rel = walks.relative(store, src, dst, t, nbr)
        np.testing.assert_array_equal(got, WalkFeatures(HOPS, 8, RATES).products(store, src, dst, t))
        n, P = store.num_nodes, walks.vectors(store.num_nodes)
        for i, (u, v, tq) in enumerate(zip(src.tolist(), dst.tolist(), t.tolist(), strict=True)):
            u, v = (x if x < n else -1 for x in (u, v))
            for side in range(2):
                for j in range(k):
                    w = int(nbr[i, side, j])
                    want = brute_relative(P, stored, u, v, w if w < n else -1, side, tq)
                    np.testing.assert_allclose(
                        rel[i, side, j], want, rtol=1e-4, atol=1e-5, err_msg=str((u, v, w))
                    )


def example_store() -> tuple[TemporalGraphStore, np.ndarray]:
    """1 - 2, then 1 - 3, then 3 - 4: u = 1's latest neighbors are 3 then 2; v = 4's is 3."""
    store = TemporalGraphStore()
    store.ingest(EventBatch.from_columns(src=[1, 1, 3], dst=[2, 3, 4], t=[1.0, 2.0, 3.0], eid=[0, 1, 2]))
    return store, store.node_index([1, 2, 3, 4])


def test_the_reader_gives_each_endpoints_latest_neighbors_and_the_walks_that_join_them():
    """u's neighbor 3 met v (a walk of one event from 3 to v: about 1 in 512 random dimensions), u's
    neighbor 2 did not; tokens sit where co-occurrence counts the same neighbors, padding is zeros."""
    store, (n1, n2, n3, n4) = example_store()
    cfg = TGNConfig(pair_neighbors=3, walk_neighbors=2, walk_dim=512, walk_hops=2, walk_decays=(0.0,))
    pairs = PairFeatures.of(store, cfg)
    raw = pairs.read(np.array([n1]), np.array([n4]), np.array([5.0]))
    rel, cooc = raw[3][0], raw[1][0]
    want = WalkFeatures(2, 512, (0.0,)).relative(
        store, np.array([n1]), np.array([n4]), 5.0, np.array([[[n3, n2], [n3, -1]]])
    )[1][0]
    np.testing.assert_array_equal(rel, want)
    assert ((rel != 0).any(-1) == (cooc[:, :2, 0] > 0)).all()
    other = M * M  # the block against the other endpoint; [a=0, b=1]: P[w] with v's one-event walks
    assert rel[0, 0, other + 1] == pytest.approx(1.0, abs=0.25)  # 3 -> 4
    assert abs(rel[0, 1, other + 1]) < 0.25  # 2 never met 4
    assert rel[0, 0, 1] == pytest.approx(1.0, abs=0.25)  # against u itself: 3 -> 1
    assert rel[1, 0, 1] == pytest.approx(1.0, abs=0.25)  # v's neighbor 3 against v: 3 -> 4
    assert rel[1, 0, other + 1] == pytest.approx(1.0, abs=0.25)  # and against u: 3 -> 1
    assert not rel[1, 1].any()  # v has one neighbor: padding


def test_the_config_switch_reaches_reader_encoder_and_logits():
    """``walk_neighbors`` adds one part after the walk products and two ``pair_dim`` to the encoder's
    output; pairs alike but for one neighbor's walks score differently; wrong parts are refused."""
    from streamgnn.nn import LinkPredictor

    torch.manual_seed(0)
    store, (n1, _, _, n4) = example_store()
    for decayed in (False, True):
        off = TGNConfig(pair_neighbors=3, pair_dim=4, walk_dim=8, pair_decayed=decayed)
        on = TGNConfig(pair_neighbors=3, pair_dim=4, walk_dim=8, pair_decayed=decayed, walk_neighbors=2)
        raw = PairFeatures.of(store, on).read(np.array([n1, n4]), np.array([n4, n1]), 5.0)
        assert len(raw) == len(PairFeatures.of(store, off).read(np.array([n1]), np.array([n4]), 5.0)) + 1
        enc = PairEncoder.of(on)
        assert enc.out_dim == PairEncoder.of(off).out_dim + 8
        parts = [torch.from_numpy(x) for x in raw]
        out = enc(*parts)
        assert out.shape == (2, enc.out_dim) and torch.isfinite(out).all()
        with pytest.raises(ConfigError, match="parts after co-occurrence"):
            enc(*parts[:3], *parts[4:])
    twin = [p[:1].repeat(2, *[1] * (p.dim() - 1)) for p in parts]
    twin[3][1, 0, 0, 1] += 20.0  # one neighbor of u with more walks to u
    vectors = enc(*twin)
    logits = LinkPredictor(6, pair_dim=enc.out_dim)(torch.ones(2, 6), torch.ones(2, 6), vectors)
    assert logits[0] != logits[1]


def test_bad_settings_are_refused_by_name():
    for bad in (dict(walk_neighbors=-1), dict(walk_neighbors=21), dict(walk_neighbors=2, pair_walks=False)):
        with pytest.raises(ConfigError, match="walk_neighbors"):
            TGNConfig(**bad)
    store, (n1, *_) = example_store()
    walks = WalkFeatures(2, 8, (0.0,))
    with pytest.raises(ConfigError, match="walk neighbors"):
        walks.relative(store, np.array([n1]), np.array([n1]), 5.0, np.zeros((1, 3, 2), np.int64))
    with pytest.raises(ConfigError, match="walk neighbors"):
        PairFeatures(store, neighbors=3, walks=walks, walk_neighbors=4)
    with pytest.raises(ConfigError, match="relative needs walks"):
        PairEncoder(history_dim=4, neighbors=3, dim=4, relative=5)


def test_sharded_training_refuses_it_by_name():
    from streamgnn.shard import ShardConfig, ShardedTrainer
    from streamgnn.train import TrainConfig

    model = TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, pair_dim=4, walk_dim=8, walk_neighbors=2)
    with pytest.raises(ConfigError, match="walk_neighbors=0 under train.sharding"):
        ShardedTrainer(TrainConfig(model=model, sharding=ShardConfig(num_partitions=2)))


def test_docstring_example_runs():
    import doctest

    from streamgnn.nn import relative

    assert doctest.testmod(relative).failed == 0
