"""Approximate top-k (``ServeConfig.topk="approximate"``): the index answers like the exact scan at high
recall, in the same form, follows rewritten and new rows, and exact search stays an option; in a table and
over real HTTP against a real topic."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_serve_http import call, wait_for  # noqa: E402  (the same HTTP client and waiting)

from streamgnn.cli import build_parser
from streamgnn.cli._config import config_from_args
from streamgnn.connectors.sink import KafkaSink
from streamgnn.errors import ConfigError
from streamgnn.serve import EmbeddingService, EmbeddingTable, ServeConfig
from streamgnn.serve.ann import ApproximateTopK

torch.set_num_threads(1)


def clustered(n: int, dim: int = 16, seed: int = 0) -> np.ndarray:
    """Rows around 40 centres, as learned embeddings cluster (isotropic rows have no near neighbors)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(40, dim))
    return (centres[rng.integers(0, 40, n)] + 0.3 * rng.normal(size=(n, dim))).astype(np.float32)


def recall(exact_ids: np.ndarray, got_ids: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / len(a) for a, b in zip(exact_ids, got_ids, strict=True)]))


def test_the_index_agrees_with_the_exact_scan_and_follows_every_write():
    rows = clustered(3000)
    exact, approx = EmbeddingTable(16), EmbeddingTable(16, ApproximateTopK(exact_below=1000))
    for table in (exact, approx):
        table.update(np.arange(500), rows[:500], t=1.0)  # under exact_below: no index yet, a scan
        table.update(np.arange(500, 3000), rows[500:], t=2.0)  # the index is built from every row
    ids = np.arange(0, 3000, 30)
    want, want_scores = exact.top_k(exact.embeddings(ids), 10, exclude=ids)
    got, scores = approx.top_k(approx.embeddings(ids), 10, exclude=ids)
    assert (
        got.shape == want.shape == (100, 10) and got.dtype == want.dtype and scores.dtype == want_scores.dtype
    )
    assert recall(want, got) >= 0.9 and not (got == ids[:, None]).any()  # the query node is left out
    assert (np.diff(scores, axis=1) <= 1e-6).all()  # best first
    cos = exact.top_k(exact.embeddings(ids[:1]), 3000)  # every row's exact cosine against the first query
    by_id = dict(zip(cos[0][0].tolist(), cos[1][0].tolist(), strict=True))
    np.testing.assert_allclose(scores[0], [by_id[i] for i in got[0]], atol=1e-5)  # cosines, as exact gives

    # an upsert of an existing row and a new row are visible to the next query
    query = rows[7] + rows[2500]
    approx.update([42, 5000], np.stack([query, -query]), t=3.0)
    top, _ = approx.top_k(query[None], 1)
    assert top[0].tolist() == [42]
    bottom, _ = approx.top_k(-query[None], 1)
    assert bottom[0].tolist() == [5000]
    assert approx._index.trained_rows == 3000  # 3001 rows: not yet 4x, so upserted, not rebuilt

    # "dot" always scans; more neighbors than rows: every other row, as exact gives them
    dot, _ = approx.top_k(approx.embeddings([1]), 5, metric="dot")
    ref, _ = exact.top_k(exact.embeddings([1]), 5, metric="dot")
    assert dot.tolist() == ref.tolist()
    everything, _ = approx.top_k(approx.embeddings([1]), 10_000, exclude=[1])
    assert everything.shape == (1, 3000) and 1 not in everything[0]


def test_the_index_is_rebuilt_as_the_table_grows_and_cleared_with_it():
    table = EmbeddingTable(16, ApproximateTopK(exact_below=200))
    rows = clustered(1000, seed=1)
    table.update(np.arange(200), rows[:200], t=1.0)
    assert table._index.trained_rows == 200
    table.update(np.arange(200, 1000), rows[200:], t=1.0)  # 5x: codebooks trained again on every row
    assert table._index.trained_rows == 1000
    got, _ = table.top_k(rows[:3], 1)
    assert got[:, 0].tolist() == [0, 1, 2]
    table.clear()
    assert not table._index.ready and len(table) == 0


def test_config_names_the_bad_setting():
    for bad, match in (
        (dict(topk="fast"), "serve.topk must be one of"),
        (dict(topk_candidates=0), "serve.topk_candidates"),
        (dict(topk_exact_below=0), "serve.topk_exact_below"),
    ):
        with pytest.raises(ConfigError, match=match):
            ServeConfig(**bad)
    assert ServeConfig(topk="exact").approximate_topk() is None
    args = build_parser().parse_args(["serve", "--topk", "exact"])  # the flag, as `streamgnn serve` reads it
    assert config_from_args(args).serve.topk == "exact"
    assert config_from_args(build_parser().parse_args(["serve"])).serve.topk == "approximate"


@pytest.mark.parametrize("topk", ["approximate", "exact"])
def test_topk_over_http_answers_like_the_exact_scan(kafka_bootstrap, make_topic, topk):
    topic = make_topic(2, compacted=True)
    rows = clustered(1500, seed=2)
    with KafkaSink(kafka_bootstrap, embeddings_topic=topic, fmt="binary") as sink:
        sink.publish_embeddings(np.arange(1500), rows, t=5.0)
        sink.flush()
    exact = EmbeddingTable(16)
    exact.update(np.arange(1500), rows, t=5.0)
    config = ServeConfig(port=0, log_every_s=0, topk=topk, topk_exact_below=1000)
    with EmbeddingService(config, kafka_bootstrap, topic) as service:
        url = service.url
        wait_for(lambda: (h := call(f"{url}/health")[1])["caught_up"] and h["nodes"] == 1500, "catching up")
        assert (service.reader.table._index is not None) == (topk == "approximate")
        asked = list(range(0, 1500, 50))
        answers = [call(f"{url}/topk?id={i}&k=10")[1] for i in asked]
        assert all(
            set(a) == {"query", "metric", "k", "neighbors"} and len(a["neighbors"]) == 10 for a in answers
        )
        got = np.array([[n["id"] for n in a["neighbors"]] for a in answers])
        want, _ = exact.top_k(rows[asked], 10, exclude=asked)
        assert recall(want, got) >= (0.9 if topk == "approximate" else 1.0)

        # a rewritten row is found at once: node 3 becomes the nearest to node 1000's vector
        with KafkaSink(kafka_bootstrap, embeddings_topic=topic, fmt="binary") as sink:
            sink.publish_embeddings([3], rows[1000:1001] * 2, t=9.0)
            sink.flush()
        wait_for(lambda: call(f"{url}/topk?id=1000&k=1")[1]["neighbors"][0]["id"] == 3, "the rewritten row")
