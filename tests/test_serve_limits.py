"""The service's bounds on what a request declares, through a real HTTP client against the real server:
a Content-Length of any number of digits is answered at once (413 too large, 400 malformed), never
waited on; node ids (and ``k``) are read strictly, so no other spelling answers for another node."""

from __future__ import annotations

import http.client
import json
import os
from urllib.parse import quote, urlsplit

import numpy as np
import pytest
from test_serve_edge import caught_up, publish

from streamgnn.serve import EmbeddingService, ServeConfig


@pytest.fixture(scope="module")
def service(kafka_bootstrap):
    from streamgnn.connectors.kafka import create_topic

    topic = f"limits-{os.getpid()}"
    create_topic(kafka_bootstrap, topic, 1, compacted=True)
    publish(kafka_bootstrap, topic, np.arange(12), np.random.default_rng(3).normal(size=(12, 4)))
    with EmbeddingService(
        ServeConfig(port=0, log_every_s=0, max_body_bytes=8000), kafka_bootstrap, topic
    ) as s:
        caught_up(s, 12)
        yield s


def declare(url: str, length: str, path: str = "/embeddings") -> tuple[int, str]:
    """POST with ``Content-Length: length`` and no body sent: the answer must come without it."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)  # a hang fails, not blocks
    try:
        conn.putrequest("POST", path)
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", length)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, resp.read().decode(errors="replace")
    finally:
        conn.close()


@pytest.mark.parametrize("digits", [5, 17, 18, 19, 20, 21, 25, 40, 400, 5000])
def test_a_declared_length_of_any_size_is_answered_at_once(service, digits):
    """413 from the guard up to 20 digits; beyond, uvicorn's HTTP parser (h11, at most 20 digits) refuses
    the request itself with a 400. Before, 19 and 20 digits were waited on for ever."""
    status, body = declare(service.url, "9" * digits)
    if digits <= 20:
        assert status == 413, body
        assert "max_body_bytes=8000" in json.loads(body)["error"]
    else:
        assert status == 400, body


def test_leading_zeros_do_not_make_a_length_large(service):
    status, body = declare(service.url, "0" * 10 + "9001")
    assert status == 413, body


@pytest.mark.parametrize(
    "length", ["-1", "1e3", "abc", "0x10", "1 2", "\u0661\u0662".encode().decode("latin-1")]
)
def test_a_malformed_length_is_answered_400(service, length):
    status, body = declare(service.url, length)
    assert status == 400, body


@pytest.mark.parametrize(
    "target",
    [
        "/embeddings?ids=1_0",
        "/embeddings?ids=" + quote("\u0661\u0662"),  # Arabic-Indic 12
        "/embeddings?ids=" + quote(" 1"),
        "/embeddings?ids=" + quote("+1"),
        "/embeddings?ids=" + quote("1\n"),
        "/topk?id=1_0",
        "/score?src=1_0&dst=2",
    ],
)
def test_node_ids_are_read_strictly(service, target):
    parts = urlsplit(service.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    conn.request("GET", target)
    resp = conn.getresponse()
    got = json.loads(resp.read())
    conn.close()
    assert resp.status == 400, got
    assert "is not an int node id" in got["error"], got


def test_strict_ids_in_a_body_and_k(service):
    parts = urlsplit(service.url)

    def post(path, body):
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        out = resp.status, json.loads(resp.read())
        conn.close()
        return out

    status, got = post("/embeddings", {"ids": ["1_0"]})
    assert status == 400 and "'1_0' is not an int node id" in got["error"]
    status, got = post("/embeddings", {"ids": ["10", 11, "007"]})
    assert status == 200 and [e["id"] for e in got["embeddings"]] == [10, 11, 7]
    status, got = post("/topk", {"id": 1, "k": "1_0"})
    assert status == 400 and got["error"].startswith("k: expected an int")
    status, got = post("/topk", {"id": 1, "k": "3"})
    assert status == 200 and len(got["neighbors"]) == 3
