"""A labelled task trained jointly with link prediction (issue 35, ``task.joint_weight``, ``tasks.joint``):
the task's loss reaches the model's parameters through the one step, offline (``pretrain``) and on the
live job, from the state before the batch that holds each label's event (no leak), checkpointed with the
rest; a model without learned embeddings is refused by name."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_tasks_live import node_labels, run, scores, write_events, write_lines

from streamgnn.configs import from_dict
from streamgnn.errors import ConfigError
from streamgnn.events import EventBatch
from streamgnn.nn import DyGFormerConfig, TGNConfig
from streamgnn.tasks import EdgeClassification, Labels, NodeClassification, evaluate, pretrain
from streamgnn.tasks.config import TaskConfig
from streamgnn.tasks.joint import JointHead, TrainingLabels, training_labels
from streamgnn.train import OnlineTrainer, TrainConfig, fit_offline
from streamgnn.train.dygformer_model import DyGFormerLinkModel
from streamgnn.train.edgebank import EdgeBank
from streamgnn.train.offline import ChronologicalSplit
from streamgnn.train.protocol import JointTerm
from streamgnn.train.step import Attached

torch.set_num_threads(1)

MODEL = TGNConfig(
    memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3, pair_features=False, dropout=0.0
)


def config(**kw) -> TrainConfig:
    return TrainConfig(**{"model": MODEL, "batch_size": 20, **kw})


def stream(n: int = 400, seed: int = 3) -> tuple[EventBatch, Labels]:
    """Sources 0..11 rate destinations 12..19, one event per time unit; each event labels its source (1:
    an even source)."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, 12, n), rng.integers(12, 20, n)
    ev = EventBatch.from_columns(src=src, dst=dst, t=np.arange(n, dtype=np.float64), eid=np.arange(n))
    return ev, Labels.of_events(ev, (src % 2 == 0).astype(np.int64), on_edges=False)


def parameters(trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.model.named_parameters()}


def pretrained(ev, labels, weight: float, until: float = 300.0) -> OnlineTrainer:
    trainer = OnlineTrainer(config())
    joint = JointHead(NodeClassification(), trainer.link_model, weight) if weight else None
    pretrain(trainer, ev, until, 1, joint, labels)
    return trainer


def test_the_task_loss_reaches_the_model_s_embedding_parameters():
    ev, labels = stream()
    plain, joint = pretrained(ev, labels, 0.0), pretrained(ev, labels, 2.0)
    a, b = parameters(plain), parameters(joint)
    moved = [k for k in a if not torch.equal(a[k], b[k])]
    assert any(k.startswith("memory.") for k in moved)  # the memory updater learned from the labels
    assert any(k.startswith("embedding.") for k in moved)
    assert not plain.attached and not joint.attached  # pretrain leaves its follower behind


def test_joint_pretraining_reads_only_the_training_labels():
    """Labels after the pretraining period (validation and test) change nothing the model learns."""
    ev, labels = stream()
    other = Labels(labels.node, labels.t, np.where(labels.t > 300, 1 - labels.y, labels.y))
    a, b = (parameters(pretrained(ev, lab, 2.0)) for lab in (labels, other))
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)
    flipped = Labels(labels.node, labels.t, np.where(labels.t <= 300, 1 - labels.y, labels.y))
    c = parameters(pretrained(ev, flipped, 2.0))
    assert any(not torch.equal(a[k], c[k]) for k in a)


def test_a_label_s_joint_loss_is_computed_before_its_event_s_batch_is_applied():
    """Two streams alike up to batch k, whose events (the labels' own) go elsewhere in the second: the
    joint loss of batch k's labels is the same in both (read from the state before batch k), that of the
    next batch's is not (the state then holds batch k)."""
    ev, labels = stream(200)
    k, bs = 5, 20
    rows = np.arange(k * bs, (k + 1) * bs)
    dst = ev.dst.copy()
    dst[rows] = (dst[rows] - 12 + 3) % 8 + 12  # destinations every earlier batch already has
    moved = EventBatch.from_columns(src=ev.src, dst=dst, t=ev.t, eid=ev.eid)
    losses = []
    for events in (ev, moved):
        trainer = OnlineTrainer(config())
        head = JointHead(NodeClassification(), trainer.link_model, 1.0)
        follower = TrainingLabels(head, trainer, labels)
        trainer.attached["joint"] = follower
        seen = []
        term = head.term
        head.term = lambda *a, term=term, seen=seen: seen.append(term(*a)) or seen[-1]
        for batch in events.split(bs):
            trainer.step(batch, score=False)
        losses.append([t.loss.item() for t in seen])
    first, second = losses
    assert len(first) == len(second) == len(ev) // bs
    assert first[: k + 1] == second[: k + 1]
    assert first[k + 1] != second[k + 1]


class Watcher(Attached):
    """A follower with no joint term of its own (``Attached``'s): it counts the batches it is told of."""

    def __init__(self) -> None:
        self.told = 0

    def before_apply(self, batch: EventBatch, learn: bool, embedded) -> None:
        self.told += 1

    def state(self) -> dict:
        return {"told": self.told}


class Pull(Watcher):
    """A follower whose joint term pulls one of the model's weights towards zero, through a factor of its
    own (so its optimizer has something to step)."""

    def __init__(self, trainer: OnlineTrainer, name: str) -> None:
        super().__init__()
        self.weight = dict(trainer.model.named_parameters())[name]
        self.factor = torch.nn.Parameter(torch.ones(()))
        self.optimizer = torch.optim.SGD([self.factor], lr=0.1)

    def joint(self) -> tuple[JointTerm, ...]:
        return (JointTerm(self.factor * self.weight.square().sum(), self.optimizer),)


SEQUENCES = DyGFormerConfig(sequence_length=4, channel_dim=4, time_dim=4, embedding_dim=4, dropout=0.0)


@pytest.mark.parametrize("model", [MODEL, SEQUENCES], ids=["tgn", "dygformer"])
def test_an_attached_follower_without_a_joint_term_trains_as_before_and_one_with_it_adds_its_loss(model):
    """The step asks every follower for ``joint()``: ``Attached``'s none changes nothing the model learns;
    a term joins the link loss in the one backward pass (the link loss alone is reported), moving exactly
    the weights it reaches and stepping the follower's own optimizer: every trainable model's ``train``
    takes the terms alike."""
    ev, _ = stream(200)
    plain, watched, pulled = (OnlineTrainer(config(model=model)) for _ in range(3))
    watcher = watched.attached["w"] = Watcher()
    name = next(n for n, _ in reversed(list(plain.model.named_parameters())) if n.endswith("weight"))
    pull = pulled.attached["p"] = Pull(pulled, name)
    trained = 0
    for batch in ev.split(20):
        a, b, c = (trainer.step(batch).loss for trainer in (plain, watched, pulled))
        assert a == b or np.isnan(a) and np.isnan(b)
        if trained == 0 and not np.isnan(a):  # the first step that trains: the same start for all three
            assert c == a  # the link loss alone
            p, q = parameters(plain), parameters(pulled)
            assert [k for k in p if not torch.equal(p[k], q[k])] == [name]
            assert pull.factor.item() != 1.0
        trained += not np.isnan(a)
    assert trained > 1 and watcher.told == pull.told == len(ev) // 20
    p, w = parameters(plain), parameters(watched)
    for k in p:
        torch.testing.assert_close(w[k], p[k], rtol=0, atol=0)


def test_fit_offline_trains_jointly_on_the_training_period_s_labels_only():
    """``fit_offline``'s ``attach``: the same step, the task's loss in its training epochs; labels of the
    validation and test parts (whose steps learn nothing) change nothing the model learns."""
    ev, labels = stream(500)
    split = ChronologicalSplit.make(ev, new_node_fraction=0.0)
    cut = float(ev.t[split.train].max())
    later = Labels(labels.node, labels.t, np.where(labels.t > cut, 1 - labels.y, labels.y))
    earlier = Labels(labels.node, labels.t, np.where(labels.t <= cut, 1 - labels.y, labels.y))

    def fit(lab: Labels, weight: float = 2.0) -> dict[str, torch.Tensor]:
        seen = []

        def attach(trainer) -> dict:
            seen.append(trainer)
            return training_labels(NodeClassification(), lab, weight)(trainer) if weight else {}

        fit_offline(ev, config(), epochs=2, split=split, attach=attach)
        return parameters(seen[0])

    plain, a, b, c = fit(labels, 0.0), fit(labels), fit(later), fit(earlier)
    assert any(not torch.equal(plain[k], a[k]) for k in a if k.startswith("memory."))
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=0)
    assert any(not torch.equal(a[k], c[k]) for k in a)


def test_evaluate_at_a_joint_weight_differs_from_frozen_embeddings_and_weight_zero_is_today_s():
    ev, labels = stream(600)
    cfg = config(seed=1)
    frozen = evaluate(NodeClassification(), ev, labels, cfg)
    again = evaluate(NodeClassification(), ev, labels, cfg, joint_weight=0.0)
    joint = evaluate(NodeClassification(), ev, labels, cfg, joint_weight=2.0)
    np.testing.assert_array_equal(frozen.embeddings_only.scores, again.embeddings_only.scores)
    assert not np.array_equal(frozen.embeddings_only.scores, joint.embeddings_only.scores)
    assert joint.baselines == frozen.baselines  # the baselines read no embedding


def test_models_without_learned_embeddings_are_refused_by_name():
    with pytest.raises(ConfigError, match="EdgeBank has no embedding a task loss can train"):
        JointHead(NodeClassification(), EdgeBank(), 1.0)
    dyg = DyGFormerLinkModel(TrainConfig(model=DyGFormerConfig()))
    with pytest.raises(ConfigError, match="DyGFormer has no embedding a task loss can train"):
        JointHead(EdgeClassification(), dyg, 1.0)


@pytest.mark.parametrize("bad", [-1.0, float("inf"), float("nan"), "a lot", True])
def test_joint_weight_is_checked_by_the_task_config(bad):
    with pytest.raises(ConfigError, match="joint_weight"):
        from_dict(TaskConfig, {"labels_file": "x.jsonl", "joint_weight": bad}, "job.yaml")
    assert TaskConfig(labels_file="x.jsonl", joint_weight=0.5).joint_weight == 0.5


def test_the_live_job_trains_jointly_scores_before_learning_and_resumes_exactly(tmp_path):
    events, src, _ = write_events(tmp_path, 600)
    labels = node_labels(src)
    write_lines(tmp_path / "a.jsonl", labels)
    frozen = run(tmp_path, events, tmp_path / "a.jsonl")
    joint = run(tmp_path, events, tmp_path / "a.jsonl", joint_weight=2.0)
    a, b = parameters(frozen.trainer), parameters(joint.trainer)
    assert any(not torch.equal(a[k], b[k]) for k in a if k.startswith("memory."))
    # a label is scored before anything learns from it, the model included
    k = 60
    write_lines(tmp_path / "b.jsonl", [dict(r, y=1 - r["y"]) if i == k else r for i, r in enumerate(labels)])
    flipped = run(tmp_path, events, tmp_path / "b.jsonl", joint_weight=2.0)
    mine, theirs = scores(joint), scores(flipped)
    np.testing.assert_array_equal(mine[: k + 1], theirs[: k + 1])
    assert not np.allclose(mine[k + 1 :], theirs[k + 1 :])
    # the joint head is in the checkpoints: a resumed job continues exactly
    whole = run(tmp_path, events, tmp_path / "a.jsonl", ckpt=tmp_path / "whole", joint_weight=2.0)
    run(tmp_path, events, tmp_path / "a.jsonl", ckpt=tmp_path / "parts", max_events=300, joint_weight=2.0)
    resumed = run(tmp_path, events, tmp_path / "a.jsonl", ckpt=tmp_path / "parts", joint_weight=2.0)
    np.testing.assert_array_equal(scores(resumed), scores(whole))
    w, r = parameters(whole.trainer), parameters(resumed.trainer)
    for name in w:
        torch.testing.assert_close(r[name], w[name], rtol=0, atol=0)


def _run(seed: int, weight: float, val: float, test: float) -> dict:
    sizes = {"train": 70, "val": 15, "test": 15, "test_positive": 3}
    return {
        "stream": "jodie_wikipedia", "seed": seed, "events": 100, "joint_weight": weight, "val_auc": val,
        "auc": test, "ap": 0.1, "auc_embeddings": 0.5, "auc_features_mlp": 0.5, "cpu_seconds": 1.0,
        "val_auc_stages": {"linear": val}, "auc_majority": 0.5, "auc_features": 0.6, **sizes,
    }  # fmt: skip


def test_the_benchmark_picks_each_seed_s_joint_weight_on_validation_never_on_test():
    from streamgnn.benchmarks.tasks import summarize

    runs = [
        _run(0, 0.0, val=0.80, test=0.90),  # seed 0: the frozen run tests best, validates worst
        _run(0, 1.0, val=0.85, test=0.70),
        _run(1, 0.0, val=0.90, test=0.60),  # seed 1: the frozen run validates best
        _run(1, 1.0, val=float("nan"), test=0.99),  # no validation figure: never picked
    ]
    out = summarize(runs)
    assert out["joint_chosen_wikipedia_ban"] == [1.0, 0.0]
    assert out["auc_wikipedia_ban"] == pytest.approx((0.70 + 0.60) / 2)
    assert out["auc_wikipedia_ban_joint_0"] == pytest.approx((0.90 + 0.60) / 2)
    assert out["auc_wikipedia_ban_joint_1"] == pytest.approx((0.70 + 0.99) / 2)
    assert out["margin_wikipedia_ban"] == pytest.approx(out["auc_wikipedia_ban"] - 0.6)
    single = summarize([r for r in runs if r["joint_weight"] == 0.0])
    assert "joint_chosen_wikipedia_ban" not in single and single["auc_wikipedia_ban"] == pytest.approx(0.75)


def test_resuming_a_joint_checkpoint_at_weight_zero_is_refused_and_a_new_weight_is_said(tmp_path, capsys):
    """A checkpoint whose model learned the task jointly, resumed with ``task.joint_weight`` 0 (also what
    an omitted key gives), would silently drop its joint head: refused by name, saying what it holds and
    what to set, the folder left as it was. Resumed at another weight, the job says which applies."""
    from streamgnn.errors import CheckpointError

    events, src, _ = write_events(tmp_path, 600)
    write_lines(tmp_path / "a.jsonl", node_labels(src))
    ckpt = tmp_path / "ckpt"
    run(tmp_path, events, tmp_path / "a.jsonl", ckpt=ckpt, max_events=300, joint_weight=2.0)
    before = sorted(p.name for p in ckpt.iterdir())
    with pytest.raises(CheckpointError, match=r"task.joint_weight 2: .*resume with task.joint_weight: 2"):
        run(tmp_path, events, tmp_path / "a.jsonl", ckpt=ckpt)
    assert sorted(p.name for p in ckpt.iterdir()) == before
    capsys.readouterr()
    resumed = run(tmp_path, events, tmp_path / "a.jsonl", ckpt=ckpt, joint_weight=0.5)
    assert "trained the task jointly at weight 2; 0.5 from now" in capsys.readouterr().out
    assert resumed.labelled.joint_head.weight == 0.5 and resumed.trainer.position == 600
    # a frozen checkpoint resumed with a weight starts joint training, and says so
    frozen = tmp_path / "frozen"
    run(tmp_path, events, tmp_path / "a.jsonl", ckpt=frozen, max_events=300)
    run(tmp_path, events, tmp_path / "a.jsonl", ckpt=frozen, joint_weight=1.0)
    assert (
        "trained the task on frozen embeddings: joint training (weight 1) starts" in capsys.readouterr().out
    )
