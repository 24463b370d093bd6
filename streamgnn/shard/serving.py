"""Serving from a sharded run: each rank keeps the embedding-table rows of the vertices it owns and publishes
them to the embeddings topic, so the topic holds every vertex once (by its owner) in the record format of the
replicated job (``EmbeddingTable.publish``) and ``streamgnn serve`` reads it as it reads that job's.

The cadence, latency record and publishing are ``train.serving.Serving``'s. What differs is the refresh: the
owner embeds a vertex with rows and neighbors other ranks hold (exact mode), so a refresh is a collective.
Every rank refreshes at the same step (the steps are global), in as many ``embed`` calls as the rank with the
most rows to refresh needs, even with none of its own; the query time is the global watermark, which every
rank's index holds alike.
"""

from __future__ import annotations

import math

import numpy as np

from ..train.serving import CHUNK, Embed, Serving
from .ownership import GlobalIndex


class ShardServing(Serving):
    """``Serving`` over this rank's owned rows (global ids), refreshed collectively; ``total(n)`` is the sum
    of ``n`` over ranks (a collective)."""

    def __init__(self, table, sink=None, *, serve_every: int, publish_every: int, total) -> None:
        super().__init__(table, sink, serve_every=serve_every, publish_every=publish_every)
        self._total = total

    def _update(self, index: GlobalIndex, embed: Embed, nodes: np.ndarray) -> None:
        if not math.isfinite(index.watermark):  # the same on every rank: nobody embeds yet
            return
        calls = math.ceil(self._total(len(nodes)) / CHUNK)
        t_q = float(np.nextafter(index.watermark, math.inf))
        for part in np.array_split(nodes, calls) if calls else ():
            vectors = embed(part, t_q)  # every rank calls, with or without rows of its own
            if len(part):
                self.table.update(index.external(part), vectors, t_q)


def owned_vertices(index: GlobalIndex) -> np.ndarray:
    """The global ids this rank owns."""
    gids = np.arange(index.num_nodes)
    return gids[index.owned(gids)]
