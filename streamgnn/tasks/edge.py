"""Edge classification and regression: a label on an edge at its arrival (is this rating negative, what is
its value), predicted from the pair of its ends' embeddings just before it, never from the edge itself."""

from __future__ import annotations

from dataclasses import dataclass

from .task import Classification, Regression


@dataclass(frozen=True)
class EdgeClassification(Classification):
    """Classes of an edge (``classes=2``: its sign, AUC-ROC), from ``[z_src, z_dst]``."""

    on_edges = True


@dataclass(frozen=True)
class EdgeRegression(Regression):
    """A value of an edge (a rating), from ``[z_src, z_dst]``: MAE and RMSE."""

    on_edges = True
