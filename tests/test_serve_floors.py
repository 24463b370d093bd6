"""Settings a library below has a floor for are refused when the config is read, with the floor and why; and
an approximate index that fails anyway never leaves the service answering from part of its table."""

from __future__ import annotations

import numpy as np
import pytest

from streamgnn.cli import build_parser
from streamgnn.cli._config import config_from_args
from streamgnn.embeddings.ann import MIN_TRAIN_ROWS, ApproximateTopK
from streamgnn.errors import ConfigError
from streamgnn.serve import EmbeddingTable, ServeConfig


@pytest.mark.parametrize("rows", range(1, MIN_TRAIN_ROWS))
def test_an_exact_below_under_faiss_floor_is_refused_at_load(rows, tmp_path):
    with pytest.raises(
        ConfigError, match=rf"topk_exact_below must be >= {MIN_TRAIN_ROWS}, got {rows}: .*faiss"
    ):
        ServeConfig(topk_exact_below=rows)
    path = tmp_path / "serve.yaml"
    path.write_text(f"serve:\n  topk_exact_below: {rows}\n")
    with pytest.raises(ConfigError, match="topk_exact_below"):  # as `streamgnn serve --config` reads it
        config_from_args(build_parser().parse_args(["serve", "--config", str(path)]))
    assert ServeConfig(topk="exact", topk_exact_below=MIN_TRAIN_ROWS).approximate_topk() is None


def test_the_floor_itself_builds_an_index_that_answers_every_row():
    table = EmbeddingTable(8, ServeConfig(topk_exact_below=MIN_TRAIN_ROWS).approximate_topk())
    vectors = np.random.default_rng(0).normal(size=(50, 8)).astype(np.float32)
    table.update(np.arange(MIN_TRAIN_ROWS), vectors[:MIN_TRAIN_ROWS], t=1.0)
    assert table._index.ready  # built from exactly the floor's rows
    table.update(np.arange(MIN_TRAIN_ROWS, 50), vectors[MIN_TRAIN_ROWS:], t=2.0)
    ids, _ = table.top_k(vectors[:1], k=60, exclude=[0])
    assert sorted(ids[0].tolist()) == list(range(1, 50)) and table.index_error is None


def test_a_failing_index_leaves_every_row_served_by_scans_and_says_so():
    """A real faiss failure (k-means over fewer rows than centroids), forced past the config's check: the
    rows stay written, every query scans them all, and the table says why (the service's /health shows it)."""
    approximate = ApproximateTopK()
    object.__setattr__(approximate, "exact_below", 4)  # what the config now refuses
    table = EmbeddingTable(8, approximate)
    vectors = np.random.default_rng(1).normal(size=(10, 8)).astype(np.float32)
    table.update(np.arange(10), vectors, t=1.0)  # the index trains at 4 rows... of these 10
    assert len(table) == 10
    assert "the approximate top-k index failed at 10 rows" in table.index_error
    table.update(np.arange(10, 50), np.ones((40, 8), np.float32), t=2.0)  # later rows are kept too
    ids, _ = table.top_k(vectors[:1], k=100, exclude=[0])
    assert sorted(ids[0].tolist()) == list(range(1, 50))
