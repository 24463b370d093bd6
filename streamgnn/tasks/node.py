"""Node tasks: a label on a node at a time (an editor banned after an edit, a student dropping out),
predicted from the node's embedding then. Dynamic node classification, binary (AUC-ROC, the TGN/DyGLib
protocol) or multi-class (macro-F1, accuracy), and node regression (MAE, RMSE)."""

from __future__ import annotations

from dataclasses import dataclass

from .task import Classification, Regression


@dataclass(frozen=True)
class NodeClassification(Classification):
    """Classes ``0..classes-1`` of a node, from its embedding at the label's time. Its offline loss is
    the plain one, DyGLib's node classification protocol (``train_node_classification.py``: BCE, no class
    weights): on JODIE Wikipedia's bans, with the edited page's embedding beside the editor's, it scored
    higher on validation than classes weighing the same on every seed (benchmarks/RESULTS.md), while the
    rating signs (``EdgeClassification``) keep the balanced loss, higher on Bitcoin Alpha's validation."""

    on_edges = False
    balanced = False


@dataclass(frozen=True)
class NodeRegression(Regression):
    """A value of a node at a time (a score, a balance), from its embedding then: MAE and RMSE."""

    on_edges = False
