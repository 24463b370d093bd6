"""SnapshotTrainer: PGT layers train on our signals as on PGT's, online test-then-train over a live source,
truncated BPTT, and checkpoints that resume bit for bit."""

import numpy as np
import pytest
import torch
from torch_geometric_temporal.nn import recurrent as R

from streamgnn.checkpoint import read_latest
from streamgnn.codec import encode_json_lines
from streamgnn.connectors.files import JsonLinesSource
from streamgnn.datasets import pgt
from streamgnn.errors import ConfigError
from streamgnn.events import EventBatch, EventKind
from streamgnn.snapshots import (
    NextLinks,
    NodeTarget,
    SnapshotSpec,
    SnapshotTrainConfig,
    SnapshotTrainer,
    build_signal,
)
from streamgnn.snapshots.baselines import SnapshotEdgeBank, SnapshotPreferentialAttachment, evaluate_links
from streamgnn.store import StoreConfig, TemporalGraphStore

torch.set_num_threads(1)


def test_the_same_model_learns_the_same_on_our_chickenpox_signal_as_on_pgts():
    store = TemporalGraphStore()
    store.ingest(pgt.series_events("chickenpox"))
    ours = build_signal(store, SnapshotSpec(every=1.0, start=0.0), target=NodeTarget(lags=4), until=60.0)
    theirs = pgt.chickenpox(lags=4)[:57]
    cfg = SnapshotTrainConfig(lr=0.01, epochs=2, carry_state=False, train_ratio=0.8)  # PGT's example recipe
    results = []
    for signal in (ours, theirs):
        torch.manual_seed(3)
        results.append(SnapshotTrainer(R.GConvGRU(4, 8, 1), cfg).fit(signal, progress=False).summary)
    assert results[0]["test_mse"] == pytest.approx(results[1]["test_mse"], rel=1e-6)
    assert results[0]["train_mse"] == pytest.approx(results[1]["train_mse"], rel=1e-6)


def regression_signal(n=10, periods=14, seed=0):
    """Node values follow their neighbours' last values: learnable from the graph and the lags."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, 3 * n), rng.integers(0, n, 3 * n)
    values = rng.normal(size=n)
    kind, s, d, t, f = [], [], [], [], []
    for p in range(periods):
        for v in range(n):
            (
                kind.append(EventKind.NODE_UPDATE),
                s.append(v),
                d.append(v),
                t.append(float(p)),
                f.append(values[v]),
            )
        if p == 0:
            for a, b in zip(src, dst, strict=True):
                kind.append(EventKind.EDGE_ADD), s.append(a), d.append(b), t.append(0.0), f.append(0.0)
        nxt = np.zeros(n)
        np.add.at(nxt, dst, values[src])
        values = np.tanh(nxt)
    store = TemporalGraphStore()
    feats = np.array(f, np.float32)[:, None]
    kinds = np.array(kind, np.int8)
    store.ingest(
        EventBatch.from_columns(kind=kinds, src=s, dst=d, t=t, eid=np.arange(len(t)), features=feats)
    )
    return build_signal(
        store, SnapshotSpec(every=1.0, start=0.0), target=NodeTarget(lags=2), until=periods - 1.0
    )


LAYERS = {
    "GConvGRU": lambda: R.GConvGRU(2, 8, 2),
    "GConvLSTM": lambda: R.GConvLSTM(2, 8, 2),
    "TGCN": lambda: R.TGCN(2, 8),
    "DCRNN": lambda: R.DCRNN(2, 8, 1),
    "A3TGCN": lambda: R.A3TGCN(1, 8, periods=2),
    "EvolveGCNH": lambda: R.EvolveGCNH(10, 2),
}


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_every_pgt_layer_trains_with_state_carried_and_truncated_bptt(layer):
    signal = regression_signal()
    torch.manual_seed(0)
    trainer = SnapshotTrainer(LAYERS[layer](), SnapshotTrainConfig(lr=0.02, epochs=1, bptt=3))
    first = trainer.fit(signal, progress=False).mean("loss", "train")
    trainer.config = SnapshotTrainConfig(lr=0.02, epochs=12, bptt=3)
    last = trainer.fit(signal, progress=False).mean("loss", "train")
    assert last < 0.8 * first, (first, last)
    head_bias = list(trainer.optimizer.state_dict()["state"].values())[-1]
    assert head_bias["step"] == 13 * 3  # 9 training snapshots in windows of 3: 3 steps a pass


def stream_file(path, n_events=3000, nodes=40, seed=0):
    """30 periods of 100 s; destinations are popular or not (a degree-aware model can learn which)."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, nodes, n_events)
    dst = np.minimum(rng.zipf(1.5, n_events) - 1, nodes - 1)
    t = np.sort(rng.uniform(0, 3000, n_events))
    path.write_bytes(
        encode_json_lines(EventBatch.from_columns(src=src, dst=dst, t=t, eid=np.arange(n_events)))
    )
    return path


def link_trainer(ckpt=None, every=0):
    torch.manual_seed(1)
    cfg = SnapshotTrainConfig(task="link", lr=0.01, bptt=2, checkpoint_dir=ckpt, checkpoint_every=every)
    return SnapshotTrainer(R.GConvGRU(2, 16, 2), cfg)


SPEC = SnapshotSpec(kind="window", every=100.0, start=100.0, degree_features=True, weight="count")
TARGET = NextLinks(negatives=5, seed=2)


def test_online_link_prediction_over_a_live_file_source_resumes_bit_for_bit(tmp_path):
    path = stream_file(tmp_path / "events.jsonl")

    def source():
        return JsonLinesSource(path, batch_size=250)

    full = link_trainer()
    store = TemporalGraphStore(StoreConfig(allowed_lateness=0.0))
    whole = full.run_live(source(), store, SPEC, target=TARGET, progress=False)
    aucs = [m.auc for m in whole.metrics]
    assert len(aucs) == 29 and np.mean(aucs[-10:]) > 0.65 > aucs[0]  # it learns popularity as it goes

    ckpt = str(tmp_path / "ckpt")
    cut = link_trainer(ckpt, every=4)
    cut.run_live(
        source(),
        TemporalGraphStore(StoreConfig(allowed_lateness=0.0)),
        SPEC,
        target=TARGET,
        progress=False,
        max_snapshots=13,
    )  # fmt: skip  (stops after the checkpoint at 12)
    resumed = SnapshotTrainer.resume(ckpt, cell=R.GConvGRU(2, 16, 2), target=TARGET)
    assert resumed.steps == 12
    rest = resumed.run_live(source(), progress=False)
    assert [m.auc for m in rest.metrics] == [m.auc for m in whole.metrics]
    for a, b in zip(resumed.model.parameters(), full.model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert resumed.stream.store.content_hash() == full.stream.store.content_hash()
    assert read_latest(tmp_path / "ckpt")[0] == "ckpt-000029"  # the end of the stream is kept too
    assert cut.plot(tmp_path / "metrics.png").stat().st_size > 0

    memory = build_signal(full.stream.store, SPEC, target=TARGET)  # the same snapshots, offline
    bank = evaluate_links(SnapshotEdgeBank(), list(memory), start=0)
    pa = evaluate_links(SnapshotPreferentialAttachment(), list(memory), start=0)
    assert [round(m.auc, 12) for m in bank][:3] != [round(m.auc, 12) for m in pa][:3]
    assert np.nanmean([m.auc for m in bank]) > 0.6 and np.nanmean([m.mrr for m in pa]) > 0


def test_classification_and_config_errors():
    signal = regression_signal()
    for snaps in (signal,):
        data = list(snaps)
        for d in data:
            d.y = (d.y > 0).long()
        trainer = SnapshotTrainer(R.GConvGRU(2, 8, 1), SnapshotTrainConfig(task="classification", outputs=2))
        result = trainer.fit(data, progress=False)
        assert 0.0 <= result.summary["test_accuracy"] <= 1.0
    with pytest.raises(ConfigError, match="task"):
        SnapshotTrainConfig(task="forecast")
    with pytest.raises(ConfigError, match="bptt"):
        SnapshotTrainConfig(bptt=0)
    with pytest.raises(ConfigError, match="checkpoint_dir"):
        SnapshotTrainConfig(checkpoint_every=3)
    with pytest.raises(ConfigError, match="relation types"):
        SnapshotTrainer(R.LRGCN(2, 8, 1, 1), SnapshotTrainConfig())
    with pytest.raises(ConfigError, match="nothing to train"):
        SnapshotTrainer(R.GConvGRU(2, 8, 1), SnapshotTrainConfig()).fit(data[:1], progress=False)
