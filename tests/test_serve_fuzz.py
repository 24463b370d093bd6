"""A property-based fuzzer against the real embeddings service: generated requests (methods, paths, query
strings, JSON bodies with huge ints, non-finite and overflowing floats, deep nesting, unicode and lone
surrogates, wrong types everywhere, and raw bytes) go over HTTP to uvicorn on a loopback port, in front of
int-id and str-id services reading a real topic. Every answer must be a 4xx or 2xx with a JSON body (an
``{"error"}`` for a 4xx), and the service must log no warning or traceback.

``/predict`` is fuzzed apart, in front of services with a real task head loaded (a node task's and an
edge task's, each from the checkpoint of a real training job, over the embeddings that job published):
unknown nodes, huge ids, NaN, wrong types, missing fields. Each answer is a 200 with one prediction per
node or pair asked, or a 4xx whose reason names the field (``nodes``, ``pairs``, ``src``, ``dst``)."""

from __future__ import annotations

import json
import os
from urllib.parse import parse_qsl, quote, urlencode

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_serve_edge import ServiceErrors, caught_up, publish, request, strict_json

from streamgnn.serve import EmbeddingService, ServeConfig

ROUTES = ["/embeddings", "/topk", "/score", "/health", "/metrics"]
KEYS = ["ids", "id", "k", "metric", "vector", "pairs", "src", "dst"]
WEIRD = [
    "\ud800", "a\udfffb", "", " 1 ", "-0", "1_0", "0x10", "9223372036854775807", "9223372036854775808",
    "-9223372036854775809", "\u0661\u0662", "1e999", "NaN", "Infinity", "cosine", "dot", "\x00", "\U0001f600",
]  # fmt: skip


@pytest.fixture(scope="module")
def services(kafka_bootstrap):
    """Two services (int and str node ids) over one topic of 20 nodes' 4-d vectors (keys "0".."19")."""
    from streamgnn.connectors.kafka import create_topic

    topic = f"fuzz-{os.getpid()}"
    create_topic(kafka_bootstrap, topic, 1, compacted=True)
    publish(kafka_bootstrap, topic, np.arange(20), np.random.default_rng(7).normal(size=(20, 4)))
    with (
        EmbeddingService(ServeConfig(port=0, log_every_s=0, max_k=50), kafka_bootstrap, topic) as ints,
        EmbeddingService(ServeConfig(port=0, log_every_s=0, node_ids="str"), kafka_bootstrap, topic) as strs,
    ):
        caught_up(ints, 20)
        caught_up(strs, 20)
        yield [ints, strs]


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 25),
    st.integers(),
    st.integers(-(2**70), 2**70),
    st.floats(),  # NaN and infinities included: sent as NaN/Infinity, which JSON does not have
    st.floats(min_value=1e37, max_value=1e300),  # finite in float64, beyond float32
    st.text(max_size=12),
    st.sampled_from(WEIRD),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), inner)
    ),
    max_leaves=24,
)
node = st.one_of(st.integers(-2, 22), st.sampled_from([str(i) for i in range(20)]), scalars)
shaped = st.one_of(  # bodies the routes read, with wrong parts where any part can be wrong
    st.fixed_dictionaries({"ids": st.lists(node, max_size=6) | values}),
    st.fixed_dictionaries(
        {},
        optional={
            "id": node,
            "k": st.integers(-2, 60) | scalars,
            "metric": st.sampled_from(["cosine", "dot"]) | scalars,
            "vector": st.lists(st.floats(width=32) | st.floats() | st.integers(), min_size=3, max_size=5)
            | values,
        },
    ),
    st.fixed_dictionaries({"pairs": st.lists(st.lists(node, max_size=3), max_size=5) | values}),
)


def encoded(value, ascii_only: bool) -> bytes:
    """JSON as Python writes it (NaN, Infinity, any int); unescaped lone surrogates become invalid UTF-8."""
    return json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


bodies = st.one_of(
    st.none(),
    st.builds(encoded, shaped | values, st.booleans()),
    st.binary(max_size=40),
    st.integers(1, 5000).map(lambda n: b'{"ids": ' + b"[" * n + b"1" + b"]" * n + b"}"),
    st.integers(4290, 4400).map(lambda n: b'{"id": 1, "k": ' + b"7" * n + b"}"),
)
query_values = st.one_of(
    st.text(max_size=16),
    st.sampled_from(WEIRD),
    st.integers().map(str),
    st.floats().map(str),
    st.lists(node.map(str), max_size=5).map(",".join),
)
queries = st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=4), query_values, max_size=4).map(
    lambda q: urlencode(q, quote_via=quote, errors="surrogatepass")
)
# mostly the routes that read input, sometimes any other path
paths = st.sampled_from(ROUTES[:3] * 3 + ROUTES[3:] + [None]).flatmap(
    lambda route: (
        st.text(max_size=12).map(lambda s: "/" + quote(s, errors="surrogatepass"))
        if route is None
        else st.just(route)
    )
)
methods = st.sampled_from(["GET", "POST"] * 6 + ["PUT", "DELETE", "PATCH", "OPTIONS"])


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(which=st.integers(0, 1), method=methods, path=paths, query=queries, body=bodies)
def test_no_request_makes_the_service_fail(services, which, method, path, query, body):
    service = services[which]
    target = f"{path}?{query}" if query else path
    with ServiceErrors() as logged:
        status, headers, raw = request(service.url, target, body, method=method)
    event(f"{path if path in ROUTES else 'other'} {method} {status}")
    assert status < 500, (status, raw[:300])
    if path == "/metrics" and status == 200:
        assert headers["content-type"].startswith("text/plain")
    else:
        assert headers.get("content-type", "").startswith("application/json"), (status, raw[:300])
        got = strict_json(raw)
        assert status < 400 or isinstance(got["error"], str), got
    assert not logged.records, [r.getMessage() for r in logged.records]


# ---------------------------------------------------------------------------------------------- /predict
FIELDS = ("nodes", "pairs", "src", "dst")
KEYS = (*FIELDS, "k")  # what a request may hold: the ids asked, and node affinity's classes ranked
NODES = 60  # the jobs' events: sources 0..39, destinations 40..59


@pytest.fixture(scope="module")
def headed(kafka_bootstrap, tmp_path_factory):
    """Services with a task head: a node task's and an edge task's, each over the embeddings topic and the
    checkpoints of a real training job that learned it (int ids; and the node task's read as str ids)."""
    import torch

    from streamgnn.connectors.files import CsvSource
    from streamgnn.connectors.kafka import create_topic
    from streamgnn.jobs import TrainJob
    from streamgnn.nn import TGNConfig
    from streamgnn.tasks.config import TaskConfig
    from streamgnn.train import TrainConfig

    torch.set_num_threads(1)
    rng = np.random.default_rng(11)
    n = 400
    src, dst = rng.integers(0, 40, n), rng.integers(40, NODES, n)
    folder = tmp_path_factory.mktemp("headed")
    lines = (f"{a},{b},{t}\n" for t, (a, b) in enumerate(zip(src, dst, strict=True)))
    (folder / "events.csv").write_text("".join(lines))
    heads = {}
    for kind in ("node_classification", "edge_classification"):
        edge = kind.startswith("edge")
        rows = [{"node": int(src[i]), **({"dst": int(dst[i])} if edge else {}), "t": float(i),
                 "y": int(dst[i] % 2)} for i in range(0, n, 2)]  # fmt: skip
        labels = folder / f"{kind}.jsonl"
        labels.write_text("".join(json.dumps(r) + "\n" for r in rows))
        topic = f"predict-fuzz-{os.getpid()}-{kind}"
        create_topic(kafka_bootstrap, topic, 1, compacted=True)
        config = TrainConfig(
            model=TGNConfig(memory_dim=8, time_dim=4, embedding_dim=8, num_neighbors=3, dropout=0.0),
            batch_size=50, eval_negatives=5, checkpoint_dir=str(folder / kind),
        )  # fmt: skip
        job = TrainJob(
            config, source=CsvSource(folder / "events.csv", batch_size=200), bootstrap=kafka_bootstrap,
            embeddings_topic=topic, log_every_s=3600, task=TaskConfig(kind=kind, labels_file=str(labels)),
        )  # fmt: skip
        job.run(progress=False)
        heads[kind] = (topic, str(folder / kind))
    topic, ckpt = heads["node_classification"]
    edge_topic, edge_ckpt = heads["edge_classification"]
    with (
        EmbeddingService(
            ServeConfig(port=0, log_every_s=0, checkpoint_dir=ckpt), kafka_bootstrap, topic
        ) as a,
        EmbeddingService(
            ServeConfig(port=0, log_every_s=0, checkpoint_dir=ckpt, node_ids="str"), kafka_bootstrap, topic
        ) as b,
        EmbeddingService(
            ServeConfig(port=0, log_every_s=0, checkpoint_dir=edge_ckpt), kafka_bootstrap, edge_topic
        ) as c,
    ):
        for service in (a, b, c):
            caught_up(service, NODES)
        yield [(a, False, True), (b, False, False), (c, True, True)]


known_node = st.integers(0, NODES - 1) | st.sampled_from([str(i) for i in range(NODES)])
predict_node = st.one_of(
    *[known_node] * 16,  # mostly known: a request is answered only when all its ids are good
    st.integers(NODES, 10**6),  # unknown
    st.integers(-(2**70), 2**70),  # beyond int64 too
    st.floats(),  # NaN and infinities included
    st.none(),
    st.booleans(),
    st.text(max_size=8),
    st.sampled_from(WEIRD),
)


def encode_query(q: dict) -> str:
    return urlencode(q, quote_via=quote, errors="surrogatepass")


node_lists = st.lists(predict_node, min_size=1, max_size=5)
pair_lists = st.lists(st.lists(predict_node, min_size=2, max_size=2), min_size=1, max_size=4)
# the shape each task reads, its ids drawn from predict_node (where any id can be wrong)
shaped_bodies = {
    False: st.fixed_dictionaries({"nodes": node_lists}),
    True: st.fixed_dictionaries({"pairs": pair_lists})
    | st.fixed_dictionaries({"src": predict_node, "dst": predict_node}),
}
shaped_queries = {
    False: st.fixed_dictionaries({"nodes": node_lists.map(lambda v: ",".join(map(str, v)))}).map(
        encode_query
    ),
    True: st.fixed_dictionaries({"src": predict_node.map(str), "dst": predict_node.map(str)}).map(
        encode_query
    ),
}
# anything else: wrong types, missing fields, the other task's fields, other keys
other_bodies = st.one_of(
    st.fixed_dictionaries({"nodes": st.lists(predict_node, max_size=5) | scalars}),
    st.fixed_dictionaries({"pairs": st.lists(st.lists(predict_node, max_size=3), max_size=3) | values}),
    st.fixed_dictionaries({}, optional={"src": predict_node, "dst": predict_node}),
    st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=5), values, max_size=3),
)
other_queries = st.dictionaries(
    st.sampled_from(KEYS) | st.text(max_size=4),
    st.lists(predict_node.map(str), max_size=4).map(",".join) | query_values,
    max_size=3,
).map(encode_query)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(which=st.integers(0, 2), post=st.booleans(), data=st.data())
def test_predict_with_a_head_answers_a_prediction_or_a_4xx_naming_the_field(headed, which, post, data):
    service, edges, int_ids = headed[which]
    shaped = shaped_bodies[edges] if post else shaped_queries[edges]
    asked = data.draw(st.one_of(shaped, shaped, other_bodies if post else other_queries))
    body, query = (asked, "") if post else (None, asked)
    with ServiceErrors() as logged:
        if post:
            status, headers, raw = request(service.url, "/predict", encoded(body, True), method="POST")
        else:
            status, headers, raw = request(service.url, f"/predict?{query}" if query else "/predict")
    event(f"{['node', 'node (str ids)', 'edge'][which]} {'POST' if post else 'GET'} {status}")
    assert status < 500, (status, raw[:300])
    assert headers.get("content-type", "").startswith("application/json"), (status, raw[:300])
    got = strict_json(raw)
    assert not logged.records, [r.getMessage() for r in logged.records]
    if status >= 400:  # names the field; a body JSON cannot read (NaN, Infinity), or a query string that
        # is no text, is named as such
        readable = _strict(body) if post else _text(query)
        names = (*FIELDS, "k:") if readable else ("request body", "query string")
        assert isinstance(got["error"], str) and any(f in got["error"] for f in names), got
        return
    assert status == 200 and got["checkpoint"].startswith("ckpt-")
    assert got["task"] == ("edge_classification" if edges else "node_classification")
    asked = _asked(body if post else dict(parse_qsl(query)), edges, post, int if int_ids else str)
    assert [[p[k] for k in (("src", "dst") if edges else ("node",))] for p in got["predictions"]] == asked
    for p in got["predictions"]:
        assert 0.0 <= p["probability"] <= 1.0 and p["label"] == int(p["probability"] >= 0.5)


def _strict(body) -> bool:
    """Whether ``body`` is JSON a strict reader reads: no NaN or Infinity, no lone surrogate."""
    try:
        json.dumps(body, allow_nan=False, ensure_ascii=False).encode()
    except ValueError:  # (UnicodeEncodeError is one)
        return False
    return True


def _text(query: str) -> bool:
    try:
        parse_qsl(query, errors="strict")
    except UnicodeDecodeError:
        return False
    return True


def _asked(data: dict, edges: bool, post: bool, as_id) -> list[list]:
    """The ids a 200 answered for, as the request named them and the service reads them (``as_id``)."""
    if not edges:
        nodes = data["nodes"] if post else data["nodes"].split(",")
        return [[as_id(v)] for v in nodes if post or v]
    pairs = data["pairs"] if "pairs" in data else [[data["src"], data["dst"]]]
    return [[as_id(a), as_id(b)] for a, b in pairs]
