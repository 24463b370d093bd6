"""A property-based fuzzer against the real embeddings service: generated requests (methods, paths, query
strings, JSON bodies with huge ints, non-finite and overflowing floats, deep nesting, unicode and lone
surrogates, wrong types everywhere, and raw bytes) go over HTTP to uvicorn on a loopback port, in front of
int-id and str-id services reading a real topic. Every answer must be a 4xx or 2xx with a JSON body (an
``{"error"}`` for a 4xx), and the service must log no warning or traceback."""

from __future__ import annotations

import json
import os
from urllib.parse import quote, urlencode

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
