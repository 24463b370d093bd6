"""TGN parts: memory semantics (growth, aggregation, delayed update), attention, variants, checkpoints."""

from __future__ import annotations

import copy
import dataclasses
import io
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from streamgnn.errors import ConfigError, EventValidationError, UnknownNodeError
from streamgnn.growth import grown_size
from streamgnn.nn import (
    TGN,
    EmbeddingInput,
    LinkPredictor,
    NeighborHop,
    NodeMemory,
    TemporalAttentionEmbedding,
    TGNConfig,
    TimeEncoder,
    aggregate_last,
    aggregate_mean,
)
from streamgnn.sampling.types import SampledHop, SampledSubgraph

EDGE_DIM = 3
K = 3


def small_config(**kw) -> TGNConfig:
    base = dict(
        memory_dim=8,
        time_dim=4,
        embedding_dim=8,
        edge_feature_dim=EDGE_DIM,
        num_neighbors=K,
        dropout=0.0,
        pair_features=False,  # the TGN module alone (the pair path: tests/test_train_pairs.py)
    )
    return TGNConfig(**{**base, **kw})


def make_stream(seed: int = 0, batches: int = 3, size: int = 4, nodes: int = 6):
    """Batches of (src, dst, t, edge_feat) with increasing times."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for b in range(batches):
        src = torch.randint(0, nodes, (size,), generator=g)
        dst = (src + 1 + torch.randint(0, nodes - 1, (size,), generator=g)) % nodes
        t = torch.arange(size, dtype=torch.float64) + 10.0 * (b + 1)
        out.append((src, dst, t, torch.randn(size, EDGE_DIM, generator=g)))
    return out


def one_hop_input(nodes: torch.Tensor, t: torch.Tensor, past: list, k: int = K) -> EmbeddingInput:
    """Reference neighbor finder: each node's last ``k`` interactions strictly before its query time."""
    n = len(nodes)
    nbr, dt = torch.zeros(n, k, dtype=torch.long), torch.zeros(n, k)
    mask, feat = torch.zeros(n, k, dtype=torch.bool), torch.zeros(n, k, EDGE_DIM)
    for i, (u, tu) in enumerate(zip(nodes.tolist(), t.tolist(), strict=True)):
        hist = [(d if s == u else s, te, f) for s, d, te, f in past if u in (s, d) and te < tu][-k:]
        for j, (w, te, f) in enumerate(hist):
            col = k - len(hist) + j
            nbr[i, col], dt[i, col], mask[i, col], feat[i, col] = w, tu - te, True, f
    return EmbeddingInput(nodes, t, hops=[NeighborHop(nbr, dt, mask, feat)])


def as_events(batch) -> list:
    src, dst, t, feat = batch
    return list(zip(src.tolist(), dst.tolist(), t.tolist(), feat, strict=True))


def run_stream(model: TGN, stream: list) -> list[torch.Tensor]:
    """Test-then-train order without the train step: score each batch, then let memory observe it."""
    past, scores = [], []
    with torch.no_grad():
        for src, dst, t, feat in stream:
            n = len(src)
            z = model(one_hop_input(torch.cat([src, dst]), torch.cat([t, t]), past))
            scores.append(model.predictor(z[:n], z[n:]))
            model.observe(src, dst, t, feat)
            past += as_events((src, dst, t, feat))
    return scores


def test_time_encoder_frequencies_shape_and_zero():
    enc = TimeEncoder(5)
    expected = 1.0 / 10 ** torch.linspace(0, 9, 5)
    assert torch.allclose(enc.lin.weight.squeeze(1), expected)
    out = enc(torch.tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], dtype=torch.float64))
    assert out.shape == (2, 3, 5) and out.dtype == torch.float32
    assert torch.allclose(out[0, 0], torch.ones(5))
    assert torch.allclose(out[0, 1, 0], torch.cos(torch.tensor(1.0)))
    assert enc.lin.weight.requires_grad


def test_aggregators_hand_example():
    msg = torch.tensor([[1.0, 0.0], [2.0, 2.0], [3.0, 1.0], [4.0, 4.0], [5.0, 3.0]])
    index = torch.tensor([0, 0, 2, 0, 2])
    t = torch.tensor([1.0, 3.0, 5.0, 2.0, 5.0], dtype=torch.float64)
    last, has = aggregate_last(msg, index, t, 3)
    assert has.tolist() == [True, False, True]
    assert last.tolist() == [[2.0, 2.0], [0.0, 0.0], [5.0, 3.0]]  # node 2: time tie -> later stored wins
    mean, has = aggregate_mean(msg, index, t, 3)
    assert has.tolist() == [True, False, True]
    assert torch.allclose(mean, torch.tensor([[7 / 3, 2.0], [0.0, 0.0], [4.0, 2.0]]))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3)), min_size=1, max_size=12))
def test_aggregators_match_loop_reference(rows):
    index = torch.tensor([r[0] for r in rows])
    t = torch.tensor([float(r[1]) for r in rows], dtype=torch.float64)
    msg = torch.arange(len(rows) * 2, dtype=torch.float32).view(-1, 2)
    last, _ = aggregate_last(msg, index, t, 5)
    mean, _ = aggregate_mean(msg, index, t, 5)
    for node in range(5):
        mine = [i for i, r in enumerate(rows) if r[0] == node]
        if not mine:
            assert not last[node].any() and not mean[node].any()
            continue
        latest = max(mine, key=lambda i: (rows[i][1], i))
        assert torch.equal(last[node], msg[latest])
        assert torch.allclose(mean[node], msg[mine].mean(0))


@pytest.mark.parametrize("aggregator", ["last", "mean"])
def test_memory_update_matches_hand_computation(aggregator):
    torch.manual_seed(0)
    mem = NodeMemory(2, 1, TimeEncoder(1), aggregator=aggregator)  # w = 1, b = 0: time_enc(dt) = cos(dt)
    mem.store_messages(
        torch.tensor([0, 0]), torch.tensor([1, 2]), torch.tensor([1.0, 3.0]), torch.tensor([[5.0], [7.0]])
    )
    # Memory is still zero, so each message is [0, 0, 0, 0, cos(t - 0), e].
    m1 = torch.tensor([0.0, 0.0, 0.0, 0.0, math.cos(1.0), 5.0])
    m2 = torch.tensor([0.0, 0.0, 0.0, 0.0, math.cos(3.0), 7.0])
    agg0 = m2 if aggregator == "last" else (m1 + m2) / 2
    with torch.no_grad():
        expected0 = mem.gru(agg0.unsqueeze(0), torch.zeros(1, 2))[0]
        expected1 = mem.gru(m1.unsqueeze(0), torch.zeros(1, 2))[0]
        got, last = mem.get(torch.tensor([0, 1, 3, 0]))
    assert torch.allclose(got[0], expected0) and torch.allclose(got[3], expected0)
    assert torch.allclose(got[1], expected1)
    assert torch.equal(got[2], torch.zeros(2))  # no messages: the GRU is not stepped, memory stays as is
    assert last.tolist() == [3.0, 1.0, 0.0, 3.0]
    assert not mem.memory.any() and mem.num_pending == 4  # get() only reads

    # Second step: messages now see committed memory and Δt since the receiver's last update.
    mem.flush()
    mem.store_messages(torch.tensor([0]), torch.tensor([1]), torch.tensor([6.0]), torch.tensor([[2.0]]))
    h0, h1 = mem.memory[0], mem.memory[1]
    with torch.no_grad():
        msg0 = torch.cat([h0, h1, torch.tensor([math.cos(6.0 - 3.0), 2.0])])
        expected = mem.gru(msg0.unsqueeze(0), h0.unsqueeze(0))[0]
        assert torch.allclose(mem.get(torch.tensor([0]))[0][0], expected)


def test_memory_keeps_latest_batch_per_node_and_commits_older():
    mem = NodeMemory(4, 0, TimeEncoder(2))
    mem.store_messages(torch.tensor([0]), torch.tensor([1]), torch.tensor([1.0]))
    mem.store_messages(torch.tensor([0]), torch.tensor([2]), torch.tensor([2.0]))
    # Node 0's first message was committed, node 1 still waits, nodes 0 and 2 hold the second batch's.
    assert mem.memory[0].any() and not mem.memory[1].any() and not mem.memory[2].any()
    assert mem.last_update[:3].tolist() == [1.0, 0.0, 0.0]
    assert sorted(mem.msg_node.tolist()) == [0, 1, 2]
    mem.flush()
    assert mem.num_pending == 0 and mem.last_update[:3].tolist() == [2.0, 1.0, 2.0]


def test_memory_grows_mid_stream_and_keeps_old_rows():
    mem = NodeMemory(4, 0, TimeEncoder(2), capacity=2)
    mem.store_messages(torch.tensor([0]), torch.tensor([1]), torch.tensor([1.0]))
    mem.flush()
    before = mem.memory.clone()
    assert before.any()
    mem.store_messages(torch.tensor([5]), torch.tensor([9]), torch.tensor([2.0]))
    assert mem.capacity >= 10
    assert torch.equal(mem.memory[:2], before) and not mem.memory[2:].any()
    got, _ = mem.get(torch.tensor([1, 9, 100]))
    assert mem.capacity == grown_size(2, 10)  # the shared policy: amortized O(1) per new id
    assert torch.equal(got[0], before[1]) and got[1].any() and not got[2].any()
    mem.ensure_capacity(mem.capacity + 1)
    assert mem.capacity == grown_size(grown_size(2, 10), grown_size(2, 10) + 1)
    assert torch.equal(mem.memory[:2], before)


def test_memory_rejects_bad_input():
    mem = NodeMemory(4, 2, TimeEncoder(2))
    with pytest.raises(EventValidationError):
        mem.store_messages(
            torch.tensor([0, 1]), torch.tensor([1]), torch.tensor([1.0, 2.0]), torch.zeros(2, 2)
        )
    with pytest.raises(ConfigError):
        mem.store_messages(torch.tensor([0]), torch.tensor([1]), torch.tensor([1.0]), torch.zeros(1, 3))
    with pytest.raises(UnknownNodeError):
        mem.get(torch.tensor([-1]))
    with pytest.raises(ConfigError):
        NodeMemory(4, 2, TimeEncoder(2), aggregator="max")


def test_batch_is_predicted_before_its_own_messages_apply():
    torch.manual_seed(0)
    model = TGN(small_config()).eval()
    stream = make_stream()
    altered = copy.deepcopy(stream)
    altered[1] = (*altered[1][:3], altered[1][3] + 5.0)
    base = run_stream(copy.deepcopy(model), stream)
    changed = run_stream(copy.deepcopy(model), altered)
    assert torch.equal(base[0], changed[0]) and torch.equal(base[1], changed[1])
    assert not torch.allclose(base[2], changed[2])  # batch 1 does reach the model, one batch later

    # The same check fails if a batch's messages are stored before it is scored.
    leaky = copy.deepcopy(model)
    run_stream(leaky, stream[:1])
    src, dst, t, feat = stream[1]
    leaky.observe(src, dst, t, feat)
    with torch.no_grad():
        z = leaky(one_hop_input(torch.cat([src, dst]), torch.cat([t, t]), as_events(stream[0])))
        assert not torch.allclose(leaky.predictor(z[:4], z[4:]), base[1])


def test_observed_batch_waits_as_pending_messages():
    torch.manual_seed(0)
    model = TGN(small_config()).eval()
    src, dst, t, feat = make_stream(batches=1)[0]
    nodes = torch.cat([src, dst])
    with torch.no_grad():
        model.observe(src, dst, t, feat)
        committed = model.memory.memory.clone()
        current, last = model.memory.get(nodes)
    assert not committed.any()  # nothing committed yet: the messages wait for the nodes' next read
    assert current.abs().sum() > 0
    expected = [
        max(tt for s, d, tt in zip(src.tolist(), dst.tolist(), t.tolist(), strict=True) if u in (s, d))
        for u in nodes.tolist()
    ]
    assert last.tolist() == expected


def test_gradients_reach_gru_messages_time_and_attention():
    torch.manual_seed(0)
    model = TGN(small_config(message="mlp"))
    stream = make_stream(batches=2)
    run_stream(model, stream[:1])
    src, dst, t, _ = stream[1]
    z = model(one_hop_input(torch.cat([src, dst]), torch.cat([t, t]), as_events(stream[0])))
    model.predictor(z[:4], z[4:]).sum().backward()
    mem, att = model.memory, model.embedding.layers[0]
    for name, p in [
        ("gru", mem.gru.weight_ih),
        ("msg_src", mem.msg_src[0].weight),
        ("msg_dst", mem.msg_dst[0].weight),
        ("time", model.time_enc.lin.weight),
        ("query", att.query.weight),
        ("attn_k", att.attn.k_proj_weight),
        ("attn_v", att.attn.v_proj_weight),
        ("merge", att.merge[0].weight),
        ("predictor", model.predictor.mlp[0].weight),
    ]:
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_observe_with_grad_carries_history_until_detach():
    torch.manual_seed(0)
    model = TGN(small_config(variant="jodie"))
    first, second = make_stream(batches=2)
    model.observe(*first)
    model.observe(*second)  # commits batch 0's messages with grad on: a 2-batch BPTT window
    model.memory.flush()  # still with grad: now memory alone carries the GRU's influence
    assert model.memory.memory.requires_grad and model.memory.num_pending == 0
    z = model(EmbeddingInput(torch.cat([second[0], second[1]]), torch.full((8,), 100.0, dtype=torch.float64)))
    z.sum().backward()
    assert model.memory.gru.weight_hh.grad.abs().sum() > 0
    model.detach()
    assert not model.memory.memory.requires_grad


@pytest.mark.parametrize("variant", ["tgn", "jodie", "tgat"])
def test_variants_forward_backward(variant):
    torch.manual_seed(0)
    cfg = small_config(variant=variant, node_feature_dim=0 if variant == "jodie" else 2, message="mlp")
    model = TGN(cfg)
    assert (model.memory is None) == (variant == "tgat")
    assert cfg.num_layers == {"tgn": 1, "tgat": 2, "jodie": 0}[variant]
    model.observe(*make_stream(batches=1)[0])
    n, hops, rows = 5, [], 5
    for _ in range(cfg.num_layers):
        mask = torch.rand(rows, K) > 0.3
        hops.append(
            NeighborHop(
                torch.randint(0, 8, (rows, K)),
                torch.rand(rows, K) * 50,
                mask,
                torch.randn(rows, K, EDGE_DIM),
                torch.randn(rows, K, 2),
            )
        )
        rows *= K
    inp = EmbeddingInput(
        torch.arange(n), torch.full((n,), 60.0, dtype=torch.float64), torch.randn(n, 2), hops
    )
    z = model(inp)
    assert z.shape == (n, model.out_dim) and torch.isfinite(z).all()
    loss = torch.nn.functional.binary_cross_entropy_with_logits(model.predictor(z, z.flip(0)), torch.ones(n))
    loss.backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values()), [
        k for k, g in grads.items() if g is None
    ]


def test_roots_without_neighbors_are_finite_and_padding_is_ignored():
    torch.manual_seed(0)
    emb = TemporalAttentionEmbedding(4, EDGE_DIM, TimeEncoder(4), 8, num_layers=2).eval()
    n = 3
    mask0 = torch.tensor([[False, False], [False, True], [True, True]])
    mask1 = torch.zeros(n * 2, 2, dtype=torch.bool)
    mask1[3] = True
    hops = [
        NeighborHop(
            torch.zeros(n, 2, dtype=torch.long), torch.rand(n, 2), mask0, torch.randn(n, 2, EDGE_DIM)
        ),
        NeighborHop(
            torch.zeros(n * 2, 2, dtype=torch.long),
            torch.rand(n * 2, 2),
            mask1,
            torch.randn(n * 2, 2, EDGE_DIM),
        ),
    ]
    states = [torch.randn(n, 4, requires_grad=True), torch.randn(n * 2, 4), torch.randn(n * 4, 4)]
    z = emb(states, hops)
    assert torch.isfinite(z).all()
    z.sum().backward()
    assert torch.isfinite(states[0].grad).all()
    # Rewriting every masked slot (ids, Δt, features, states below) must not change any output.
    noisy = [
        NeighborHop(
            h.nbr, torch.where(h.mask, h.dt, 99.0), h.mask, torch.where(h.mask[..., None], h.edge_feat, 9.0)
        )
        for h in hops
    ]
    keep1 = mask0.reshape(-1, 1)
    keep2 = (mask1 & keep1).reshape(-1, 1)
    noisy_states = [states[0], torch.where(keep1, states[1], 7.0), torch.where(keep2, states[2], -7.0)]
    assert torch.allclose(emb(noisy_states, noisy), z, atol=1e-6)
    # All-empty batch (e.g. the very first batch of a stream).
    empty = [NeighborHop(h.nbr, h.dt, torch.zeros_like(h.mask), h.edge_feat) for h in hops]
    assert torch.isfinite(emb(states, empty)).all()


def test_sparse_attention_equals_multihead_attention_over_padded_keys():
    """The layer attends over real neighbors only; the reference is ``nn.MultiheadAttention`` on the dense,
    padded keys with the same parameters (a root without neighbors gets ``merge([0, h_root])``)."""
    torch.manual_seed(0)
    emb = TemporalAttentionEmbedding(4, EDGE_DIM, TimeEncoder(4), 8).eval()
    layer = emb.layers[0]
    with torch.no_grad():
        layer.attn.in_proj_bias.normal_()  # a key bias too: it must cancel
    n, k = 5, 3
    mask = torch.rand(n, k) > 0.4
    mask[0] = False
    hop = NeighborHop(torch.randint(0, 6, (n, k)), torch.rand(n, k) * 9, mask, torch.randn(n, k, EDGE_DIM))
    table = torch.randn(6, 4)
    states = [torch.randn(n, 4), table[hop.nbr.reshape(-1)]]
    with torch.no_grad():
        got = emb(states, [hop])
        kv = torch.cat([states[1].view(n, k, 4), hop.edge_feat, layer.time_enc(hop.dt)], -1)
        query = layer.query(torch.cat([states[0], layer.time_enc(torch.zeros(n))], -1)).unsqueeze(1)
        empty = ~mask.any(1)
        ignore = ~mask
        ignore[:, -1] &= ~empty
        out, _ = layer.attn(query, kv, kv, key_padding_mask=ignore, need_weights=False)
        out = out.squeeze(1).masked_fill(empty.unsqueeze(1), 0.0)
        expected = layer.merge(torch.cat([out, states[0]], -1))
        # States given once per distinct node plus an index: the same embeddings.
        shared = emb([torch.cat([states[0], table]), torch.cat([states[0], table])], [hop],
                     [torch.arange(n), hop.nbr.reshape(-1) + n])  # fmt: skip
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(shared, got, rtol=1e-6, atol=1e-7)


def test_configs_naming_the_removed_merge_switch_load_or_are_refused_with_the_reason():
    """``TGNConfig.merge`` was an ablation switch, removed: an old config's ``merge="mlp"`` (what every
    model does) builds the same model through the one upgrade path (``configs.upgrade``), ``"linear_skip"``
    is refused naming the switch; new dicts omit it, and a current one names it as an unknown key."""
    from streamgnn.configs import upgrade

    def read(model: dict, version: int = 1) -> TGNConfig:
        data = upgrade({"config_version": version, "train": {"model": model}}, "old.yaml", complete=False)
        return TGNConfig.from_dict(data["train"]["model"])

    torch.manual_seed(0)
    plain = TGN(small_config())
    torch.manual_seed(0)
    old = TGN(read({**small_config().to_dict(), "merge": "mlp"}))
    assert old.config == plain.config and "merge" not in dataclasses.asdict(old.config)
    for name, value in plain.state_dict().items():
        assert torch.equal(old.state_dict()[name], value), name
    with pytest.raises(ConfigError, match="old.yaml: TGNConfig.merge='linear_skip'.*removed"):
        read({**small_config().to_dict(), "merge": "linear_skip"})
    with pytest.raises(ConfigError, match="unknown key 'merge'"):
        read({**small_config().to_dict(), "merge": "mlp"}, version=2)


def test_state_dict_round_trip_restores_outputs_and_state():
    torch.manual_seed(0)
    cfg = small_config(aggregator="mean", message="mlp")
    model = TGN(cfg).eval()
    stream = make_stream(batches=4)
    run_stream(model, stream[:2])
    assert model.memory.num_pending > 0
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    restored = TGN(cfg).eval()
    restored.load_state_dict(torch.load(buf))
    assert restored.memory.capacity == model.memory.capacity
    out_a = run_stream(model, stream[2:])
    out_b = run_stream(restored, stream[2:])  # neighbors only from batches 2.., memory carries the rest
    for a, b in zip(out_a, out_b, strict=True):
        assert torch.equal(a, b)
    for (name, a), b in zip(
        model.memory.state_dict().items(), restored.memory.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name
    restored.reset_state()
    assert restored.memory.num_pending == 0 and not restored.memory.memory.any()


def test_from_subgraph_builds_aligned_dense_tree():
    def hop(ptr, nbr, dt, feat):
        m = len(nbr)
        root_index = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))
        return SampledHop(
            np.array(ptr),
            root_index,
            np.array(nbr),
            np.arange(m),
            np.zeros(m),
            np.array(dt, float),
            np.zeros(len(ptr) - 1),
            edge_features=np.array(feat, np.float32).reshape(m, 1),
        )

    # Root 0 has 3 neighbors (k=2 keeps the 2 most recent), root 1 none.
    h0 = hop([0, 3, 3], [10, 11, 12], [3.0, 2.0, 1.0], [0.0, 1.0, 2.0])
    # Hop 1 queries h0's three entries: entry 0 (dropped) -> [20], entry 1 -> [21], entry 2 -> [22, 23].
    h1 = hop([0, 1, 2, 4], [20, 21, 22, 23], [1.0, 1.0, 2.0, 1.0], [3.0, 4.0, 5.0, 6.0])
    sub = SampledSubgraph(np.array([0, 1]), np.array([5.0, 6.0]), [h0, h1])
    inp = EmbeddingInput.from_subgraph(sub, 2)
    nbr, _, dt, mask = h0.to_dense(2)
    assert np.array_equal(inp.hops[0].nbr.numpy(), nbr) and np.array_equal(inp.hops[0].mask.numpy(), mask)
    assert np.allclose(inp.hops[0].dt.numpy(), dt)
    assert inp.hops[1].nbr.tolist() == [[0, 21], [22, 23], [0, 0], [0, 0]]
    assert inp.hops[1].mask.tolist() == [[False, True], [True, True], [False, False], [False, False]]
    assert inp.hops[1].edge_feat[..., 0].tolist() == [[0.0, 4.0], [5.0, 6.0], [0.0, 0.0], [0.0, 0.0]]
    assert inp.t.dtype == torch.float64 and inp.nodes.tolist() == [0, 1]
    with pytest.raises(ConfigError):
        EmbeddingInput.from_subgraph(SampledSubgraph(sub.roots, sub.root_t, [h0, h0]), 2)


def test_link_predictor_is_directed_and_shaped():
    torch.manual_seed(0)
    pred = LinkPredictor(4)
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    assert pred(a, b).shape == (3,)
    assert not torch.allclose(pred(a, b), pred(b, a))
    cand, index = torch.randn(5, 4), torch.tensor([[0, 4], [2, 2], [3, 1]])
    expected = torch.stack([pred(a, cand[index[:, j]]) for j in range(2)], 1)
    torch.testing.assert_close(pred.candidates(a, cand, index), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "kw",
    [
        {"variant": "gat"},
        {"aggregator": "max"},
        {"embedding_dim": 9, "num_heads": 2},
        {"variant": "jodie", "num_layers": 1},
        {"variant": "tgn", "num_layers": 0},
        {"num_neighbors": 0},
    ],
)
def test_config_rejects_inconsistent_values(kw):
    with pytest.raises(ConfigError):
        small_config(**kw)


def test_uniform_time_init_is_pygs_linear_default():
    enc, ref = TimeEncoder(50, init="uniform"), torch.nn.Linear(1, 50)
    torch.manual_seed(0)
    enc.reset_parameters()
    torch.manual_seed(0)
    ref.reset_parameters()
    assert torch.equal(enc.lin.weight, ref.weight) and torch.equal(enc.lin.bias, ref.bias)
    assert enc.lin.weight.abs().max() <= 1 and enc.lin.bias.abs().min() > 0  # U(-1, 1), not 1/10**k and 0
    with pytest.raises(ConfigError, match="init"):
        TimeEncoder(4, init="normal")


def hop_with_times(past: list, nodes: torch.Tensor, t: torch.Tensor) -> EmbeddingInput:
    """``one_hop_input`` plus each neighbor edge's exact time (``NeighborHop.t``)."""
    inp = one_hop_input(nodes, t, past)
    hop = inp.hops[0]
    edge_t = torch.where(hop.mask, t.unsqueeze(1) - hop.dt.double(), torch.zeros((), dtype=torch.float64))
    return EmbeddingInput(
        inp.nodes, inp.t, hops=[NeighborHop(hop.nbr, hop.dt, hop.mask, hop.edge_feat, t=edge_t)]
    )


def test_last_update_neighbor_time_is_the_neighbors_last_update_minus_the_edge_time():
    stream = make_stream(seed=4, batches=4)
    torch.manual_seed(0)
    model = TGN(small_config(neighbor_time="last_update")).eval()
    query = TGN(small_config(neighbor_time="query")).eval()
    query.load_state_dict(model.state_dict())
    past = []
    with torch.no_grad():
        for src, dst, t, feat in stream[:3]:
            model.observe(src, dst, t, feat)
            query.observe(src, dst, t, feat)
            past += as_events((src, dst, t, feat))
        nodes = torch.arange(6)
        t_q = torch.full((6,), 100.0, dtype=torch.float64)
        inp = hop_with_times(past, nodes, t_q)
        hop = inp.hops[0]
        # reference: the neighbor's latest interaction in the stream so far, minus the edge's time
        latest = {u: max(te for s, d, te, _ in past if u in (s, d)) for u in range(6)}
        ages = torch.tensor([[latest[int(w)] for w in row] for row in hop.nbr], dtype=torch.float64) - hop.t
        ages = torch.where(hop.mask, ages, torch.zeros((), dtype=torch.float64)).float()
        assert (ages[hop.mask] >= 0).all() and (ages[hop.mask] == 0).any() and (ages[hop.mask] > 0).any()
        expected = query(
            EmbeddingInput(nodes, t_q, hops=[NeighborHop(hop.nbr, ages, hop.mask, hop.edge_feat)])
        )
        assert torch.allclose(model(inp), expected, atol=1e-6)
        assert torch.allclose(model(one_hop_input(nodes, t_q, past)), expected, atol=1e-6)  # times from dt
        assert not torch.allclose(query(inp), expected, atol=1e-3)  # the query-time ages differ


def test_last_update_neighbor_time_needs_memory():
    with pytest.raises(ConfigError, match="tgat"):
        small_config(variant="tgat", neighbor_time="last_update")
    with pytest.raises(ConfigError, match="neighbor_time"):
        small_config(neighbor_time="edge")


def test_gather_rows_backward_is_the_same_on_every_run():
    """Repeated rows' gradients are summed in one order: ``x[index]``'s CPU backward adds them with
    parallel atomics from 32768 elements on, so with 2 threads its gradients changed from run to run."""
    from streamgnn.nn.gather import gather_rows

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(300, 100, generator=gen, requires_grad=True)
        index = torch.randint(0, 300, (2000, 3), generator=gen)
        upstream = torch.randn(2000, 3, 100, generator=gen)
        grads = []
        for _ in range(5):
            x.grad = None
            out = gather_rows(x, index)
            assert torch.equal(out, x[index])
            out.backward(upstream)
            grads.append(x.grad.clone())
        assert all(torch.equal(grads[0], g) for g in grads[1:])
    finally:
        torch.set_num_threads(threads)
