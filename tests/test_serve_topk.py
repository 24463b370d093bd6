"""Approximate top-k (``ServeConfig.topk="approximate"``): the index answers like the exact scan at high
recall, in the same form, follows rewritten and new rows, and exact search stays an option; in a table and
over real HTTP against a real topic."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from test_serve_http import call, wait_for  # noqa: E402  (the same HTTP client and waiting)

from streamgnn.cli import build_parser
from streamgnn.cli._config import config_from_args
from streamgnn.connectors.sink import KafkaSink
from streamgnn.embeddings.ann import ApproximateTopK
from streamgnn.errors import ConfigError
from streamgnn.serve import EmbeddingService, EmbeddingTable, ServeConfig

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
        (dict(topk="fast"), "topk: expected one of"),
        (dict(topk_candidates=0), "serve.topk_candidates"),
        (dict(topk_exact_below=0), "serve.topk_exact_below"),
    ):
        with pytest.raises(ConfigError, match=match):
            ServeConfig(**bad)
    assert ServeConfig(topk="exact").approximate_topk() is None
    args = build_parser().parse_args(["serve", "--topk", "exact"])  # the flag, as `streamgnn serve` reads it
    assert config_from_args(args).serve.topk == "exact"
    assert config_from_args(build_parser().parse_args(["serve"])).serve.topk == "approximate"


def test_a_query_scans_on_its_own_thread_count_and_says_what_it_reads():
    """The service calls the index from one thread at a time (the table's lock): a query's scan takes
    ``search_threads`` OpenMP threads (one by default) whatever the process's default, and only in the
    calling thread; ``scan_size`` is 0 once the index answers, every row's floats otherwise."""
    import faiss

    with pytest.raises(ConfigError, match="search_threads"):
        ApproximateTopK(search_threads=0)
    table = EmbeddingTable(16, ApproximateTopK(exact_below=1000))
    table.update(np.arange(999), clustered(999), t=1.0)
    assert table.scan_size("cosine") == 999 * 16  # no index yet
    table.update(np.arange(999, 2000), clustered(1001, seed=1), t=1.0)
    assert table.scan_size("cosine") == 0 and table.scan_size("dot") == 2000 * 16
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(2)
    seen = []

    def query() -> None:
        table.top_k(table.embeddings([5]), 10, exclude=[5])
        seen.append(faiss.omp_get_max_threads())

    try:
        worker = threading.Thread(target=query)
        worker.start(), worker.join()
        assert seen == [1] and faiss.omp_get_max_threads() == 2  # the caller's alone
    finally:
        faiss.omp_set_num_threads(before)  # leave the process's other tests as they were


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


def isotropic(n: int, dim: int, seed: int) -> np.ndarray:
    """Gaussian rows: no neighbor much nearer than another, the rows an index that relies on locality
    loses recall on."""
    return np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)


def cosines(table: EmbeddingTable, query: np.ndarray, ids) -> np.ndarray:
    """The exact cosines of ``query`` against the current rows of ``ids``."""
    rows = table.embeddings(ids)
    return rows @ query / (np.linalg.norm(rows, axis=1) * np.linalg.norm(query))


def test_recall_holds_on_isotropic_random_rows():
    rows = isotropic(20_000, 100, seed=3)
    exact, approx = EmbeddingTable(100), EmbeddingTable(100, ApproximateTopK(exact_below=1000))
    for table in (exact, approx):
        table.update(np.arange(20_000), rows, t=1.0)
    ids = np.random.default_rng(4).choice(20_000, 100, replace=False)
    want, _ = exact.top_k(rows[ids], 10, exclude=ids)
    got, scores = approx.top_k(rows[ids], 10, exclude=ids)
    assert recall(want, got) >= 0.95
    np.testing.assert_allclose(scores[0], cosines(exact, rows[ids[0]], got[0]), atol=1e-5)


def test_rewritten_rows_answer_with_their_new_vectors_and_cleared_rows_never():
    old, new = isotropic(3000, 32, seed=5), isotropic(3000, 32, seed=6)
    table = EmbeddingTable(32, ApproximateTopK(exact_below=1000))
    table.update(np.arange(3000), old, t=1.0)
    moved = np.arange(0, 3000, 3)
    for lo in range(0, len(moved), 200):  # as the trainer publishes, rewrites and a few new rows together
        batch = moved[lo : lo + 200]
        fresh = np.arange(3000 + lo // 200 * 5, 3000 + lo // 200 * 5 + 5)
        table.update(np.concatenate([batch, fresh]), np.vstack([new[batch], isotropic(5, 32, lo)]), t=2.0)
    assert table._index.rows == len(table) == 3025 and table._index.trained_rows == 3000  # upserted
    got, scores = table.top_k(new[moved], 1)
    assert got[:, 0].tolist() == moved.tolist()  # each rewritten row is its new vector's nearest
    np.testing.assert_allclose(scores[:, 0], 1.0, atol=1e-5)
    got, scores = table.top_k(old[moved], 10)
    assert not (scores > 0.999).any()  # no old vector is answered: nothing left is that near
    for q, ids, s in zip(old[moved[:50]], got, scores, strict=False):  # every score is the current row's
        np.testing.assert_allclose(s, cosines(table, q, ids), atol=1e-5)

    table.clear()
    table.update(np.arange(5000, 6500), new[:1500], t=3.0)  # the index is built again from these alone
    got, _ = table.top_k(old[:20], 10)
    assert table._index.ready and got.min() >= 5000


def test_non_finite_rows_are_never_answered():
    rows = isotropic(1500, 16, seed=7)
    rows[10], rows[20] = np.nan, np.inf
    table = EmbeddingTable(16, ApproximateTopK(exact_below=1000))
    table.update(np.arange(1500), rows, t=1.0)
    queries = isotropic(200, 16, seed=8)
    table.update([30], [np.full(16, np.nan)], t=2.0)  # a row rewritten as non-finite goes too
    got, scores = table.top_k(queries, 50)
    assert not np.isin(got, [10, 20, 30]).any() and np.isfinite(scores).all()


def test_concurrent_rewrites_and_http_queries_stay_consistent(kafka_bootstrap, make_topic):
    """While the trainer rewrites rows, every answer the service gives is well formed and scored with a
    vector the row really had; once the writes are in, answers are those of the final rows."""
    topic = make_topic(1, compacted=True)  # one partition: the last message is applied last
    dim, n = 32, 2000
    v0, v1 = isotropic(n, dim, seed=9), isotropic(n, dim, seed=10)
    queried = np.arange(10)  # the query nodes keep their vectors; every other row flips v0 <-> v1
    v1[queried] = v0[queried]
    with KafkaSink(kafka_bootstrap, embeddings_topic=topic, fmt="binary") as sink:
        sink.publish_embeddings(np.arange(n), v0, t=1.0)
        sink.flush()
    config = ServeConfig(port=0, log_every_s=0, topk_exact_below=1000)
    with EmbeddingService(config, kafka_bootstrap, topic) as service:
        url = service.url
        wait_for(lambda: (h := call(f"{url}/health")[1])["caught_up"] and h["nodes"] == n, "catching up")
        assert service.reader.table._index.ready
        done = threading.Event()

        def rewrite():
            with KafkaSink(kafka_bootstrap, embeddings_topic=topic, fmt="binary") as sink:
                for rnd in range(6):
                    rows = v1 if rnd % 2 == 0 else v0
                    for lo in range(10, n, 200):
                        sink.publish_embeddings(
                            np.arange(lo, min(n, lo + 200)), rows[lo : lo + 200], t=2.0 + rnd
                        )
                sink.publish_embeddings([n], v0[:1] * 3, t=99.0)  # the sentinel: node 0's nearest, last
                sink.flush()
            done.set()

        writer = threading.Thread(target=rewrite)
        writer.start()
        answers = 0
        while not done.is_set() or answers < 20:
            q = int(queried[answers % len(queried)])
            status, body = call(f"{url}/topk?id={q}&k=10")
            assert status == 200, body
            ids = np.array([nb["id"] for nb in body["neighbors"]])
            scores = np.array([nb["score"] for nb in body["neighbors"]])
            assert len(ids) == 10 == len(set(ids.tolist())) and q not in ids
            assert (np.diff(scores) <= 1e-6).all()
            rows = ids < n  # the sentinel, once it is in, is not one of the flipped rows
            ids, s = ids[rows], scores[rows]
            c0, c1 = (
                r[ids] @ v0[q] / np.linalg.norm(r[ids], axis=1) / np.linalg.norm(v0[q]) for r in (v0, v1)
            )
            assert (np.isclose(s, c0, atol=1e-4) | np.isclose(s, c1, atol=1e-4)).all()  # a vector it had
            answers += 1
        writer.join()
        wait_for(lambda: call(f"{url}/topk?id=0&k=1")[1]["neighbors"][0]["id"] == n, "the last write")
        final = EmbeddingTable(dim)
        final.update(np.arange(n), v0, t=1.0)  # six flips: back to v0
        want, _ = final.top_k(v0[queried], 10, exclude=queried)
        got = [[nb["id"] for nb in call(f"{url}/topk?id={q}&k=11")[1]["neighbors"] if nb["id"] != n][:10]
               for q in queried]  # fmt: skip
        assert recall(want, np.array(got)) >= 0.95
