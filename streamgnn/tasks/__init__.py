"""Labelled tasks over a link model's stream state: node classification, edge classification and
regression, with their heads, losses, metrics, baselines and one evaluation protocol.

``task`` defines what a task is (``Task``); ``node`` and ``edge`` are the tasks; ``labels`` holds labels
and their chronological split; ``features`` the causal stream features; ``baselines`` the majority class,
persistence and logistic regression; ``protocol`` trains and scores a head; ``stream`` takes a link
model's embeddings at the labels' times; ``evaluate`` runs all of it on one stream; ``admit`` decodes
labels sent as JSON lines, each bad one a dead letter. ``affinity`` is node affinity (TGB's node property
prediction: a node's next period's interactions per class, NDCG@10; on the live job too, ``kind:
node_affinity``, its per-class features kept as labels are revealed) and ``affinity_eval`` its protocol.

On the live job (``streamgnn train`` with a ``task``, ``jobs.labelled``): ``config`` is the YAML's ``task``
section, ``feed`` reads labels from a file or a Kafka topic, ``online`` is the head scored before it learns
(prequential), ``live_features`` the stream features kept a batch at a time.
"""

from .admit import decode_labels
from .affinity import NodeAffinity
from .affinity_eval import evaluate_affinity
from .baselines import logistic_regression, majority, persistence
from .config import TaskConfig
from .edge import EdgeClassification, EdgeRegression
from .evaluate import TaskResult, evaluate
from .features import REPUTATION, StreamFeatures, stream_features
from .labels import Labels, LabelSplit
from .node import NodeClassification, NodeRegression
from .online import OnlineHead
from .protocol import HeadConfig, HeadResult, fit_head
from .stream import embed_at_labels, pretrain
from .task import Classification, Regression, Task

__all__ = [
    "REPUTATION",
    "Classification",
    "EdgeClassification",
    "EdgeRegression",
    "HeadConfig",
    "HeadResult",
    "LabelSplit",
    "Labels",
    "NodeAffinity",
    "NodeClassification",
    "NodeRegression",
    "OnlineHead",
    "Regression",
    "StreamFeatures",
    "Task",
    "TaskConfig",
    "TaskResult",
    "decode_labels",
    "embed_at_labels",
    "evaluate",
    "evaluate_affinity",
    "fit_head",
    "logistic_regression",
    "majority",
    "persistence",
    "pretrain",
    "stream_features",
]
