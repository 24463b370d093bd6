"""Dynamic node classification: a label on a node at a time (an editor banned after an edit, a student
dropping out), predicted from the node's embedding then. Binary (AUC-ROC, the TGN/DyGLib protocol) or
multi-class (macro-F1, accuracy)."""

from __future__ import annotations

from dataclasses import dataclass

from .task import Classification


@dataclass(frozen=True)
class NodeClassification(Classification):
    """Classes ``0..classes-1`` of a node, from its embedding at the label's time."""

    on_edges = False
