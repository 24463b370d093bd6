"""The embeddings service at its edge, over real HTTP against a real topic: every input it cannot answer is a
4xx with a JSON reason (never a 500, never a traceback in the log), non-finite rows from the topic are
refused, each row's vector and time come from one read, body and URL limits, bearer-token auth, and
``streamgnn serve --port 0`` (with TLS) naming the port it bound."""

from __future__ import annotations

import http.client
import json
import logging
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import threading
from urllib.parse import urlsplit

import numpy as np
import pytest
from kafka import KafkaProducer
from test_serve_http import wait_for

from streamgnn.cli._config import load_config
from streamgnn.connectors.sink import CONTENT_EMBEDDING_F32, KafkaSink
from streamgnn.errors import ConfigError
from streamgnn.serve import EmbeddingService, EmbeddingTable, ServeConfig

DIM = 8


def request(
    url: str,
    path: str,
    body: bytes | dict | None = None,
    *,
    method: str | None = None,
    headers: dict | None = None,
    context: ssl.SSLContext | None = None,
) -> tuple[int, dict, bytes]:
    """``(status, headers, raw body)`` of one request on a fresh connection (http.client sends the body and
    the path exactly as given)."""
    parts = urlsplit(url)
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=60, context=context)
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    try:
        conn.request(method or ("GET" if body is None else "POST"), path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def strict_json(raw: bytes):
    """The body as JSON, refusing what a strict client refuses (NaN, Infinity)."""

    def refuse(text: str):
        raise ValueError(f"{text} in an answer")

    return json.loads(raw.decode("utf-8"), parse_constant=refuse)


def answer(url: str, path: str, body=None, **kw) -> tuple[int, dict]:
    status, headers, raw = request(url, path, body, **kw)
    assert headers.get("content-type", "").startswith("application/json"), (path, status, raw[:200])
    return status, strict_json(raw)


def publish(bootstrap: str, topic: str, ids, vectors: np.ndarray, t: float = 5.0) -> None:
    with KafkaSink(bootstrap, embeddings_topic=topic, fmt="binary") as sink:
        sink.publish_embeddings(ids, vectors, t=t)
        sink.flush()


def publish_raw(bootstrap: str, topic: str, rows: list[tuple[bytes, np.ndarray]]) -> None:
    """Rows as float32 bytes, past the sink (which refuses non-finite vectors itself)."""
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for key, vector in rows:
        value = np.asarray(vector, "<f4").tobytes()
        producer.send(topic, value, key=key, headers=[("content-type", CONTENT_EMBEDDING_F32.encode())])
    producer.flush()
    producer.close()


def caught_up(service: EmbeddingService, nodes: int) -> None:
    assert service.reader.wait_caught_up(120), "the reader did not catch up"
    assert service.reader.table is not None and len(service.reader.table) == nodes


class ServiceErrors(logging.Handler):
    """Records at WARNING and above from uvicorn and the service's request handling."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def __enter__(self) -> ServiceErrors:
        for name in ("uvicorn", "streamgnn.serve.app"):
            logging.getLogger(name).addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        for name in ("uvicorn", "streamgnn.serve.app"):
            logging.getLogger(name).removeHandler(self)


@pytest.fixture(scope="module")
def vectors():
    return np.random.default_rng(5).normal(size=(20, DIM)).astype(np.float32)


@pytest.fixture(scope="module")
def service(kafka_bootstrap, vectors):
    """A service with small limits over 20 nodes' 8-d vectors (int ids 0..19), for the whole module."""
    from streamgnn.connectors.kafka import create_topic

    topic = f"edge-{os.getpid()}-{id(vectors)}"
    create_topic(kafka_bootstrap, topic, 1, compacted=True)
    publish(kafka_bootstrap, topic, np.arange(20), vectors)
    config = ServeConfig(port=0, log_every_s=0, max_body_bytes=8000, max_url_bytes=300)
    with EmbeddingService(config, kafka_bootstrap, topic) as served:
        caught_up(served, 20)
        yield served


HUGE = 10**30
REFUSED = [  # (path, body, status, words of the reason), one class of hostile input per line
    ("/embeddings?ids=9223372036854775808", None, 400, "beyond int64"),
    ("/embeddings?ids=-9223372036854775809", None, 400, "beyond int64"),
    ("/embeddings", {"ids": [HUGE]}, 400, "beyond int64"),
    ("/score", {"pairs": [[1, -HUGE]]}, 400, "beyond int64"),
    ("/topk", {"id": 2**63, "k": 3}, 400, "beyond int64"),
    ("/topk?id=1&k=99999999999999999999999999", None, 413, "max_k"),
    ("/topk", {"id": 1, "k": 1e308}, 400, "k: expected an int"),
    ("/topk", b'{"id": 1, "k": Infinity}', 400, "not a JSON number"),
    ("/topk", b'{"id": 1, "k": NaN}', 400, "not a JSON number"),
    ("/topk", b'{"id": 1, "k": 1e999}', 400, "beyond float64"),
    ("/topk", b'{"id": 1, "k": -Infinity}', 400, "not a JSON number"),
    ("/embeddings", b'{"ids": [' + b"9" * 5000 + b"]}", 400, "not JSON"),
    ("/topk", {"vector": [1e39] + [0.0] * (DIM - 1)}, 400, "beyond float32"),
    ("/topk", {"vector": [3e38] * DIM, "metric": "dot"}, 400, "sum of squares"),
    ("/topk", {"vector": [2e19] + [0] * (DIM - 1)}, 400, "sum of squares"),
    ("/topk", {"vector": [HUGE**20] + [0] * (DIM - 1)}, 400, "beyond float32"),
    ("/topk", {"vector": [True] * DIM}, 400, "give 8 numbers"),
    ("/topk", b"[" * 3000 + b"]" * 3000, 400, "nests deeper"),
    ("/embeddings", {"ids": [[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]}, 400, "nests deeper"),
    ("/embeddings", b'{"ids": ["\\ud800"]}', 400, "not valid Unicode"),
    ("/embeddings", b'{"\\udfff": 1}', 400, "not valid Unicode"),
    ("/embeddings", b'{"ids": [1]}\xff', 400, "not UTF-8"),
    ("/embeddings?ids=%ED%A0%80", None, 400, "not UTF-8"),
    ("/embeddings?ids=1&x=%FF", None, 400, "not UTF-8"),
    ("/embeddings", {"ids": {"1": 2}}, 400, "non-empty list"),
    ("/embeddings", {"ids": [None]}, 400, "node ids are ints or strings"),
    ("/embeddings", [1, 2], 400, "must be a JSON object"),
    ("/topk", {"id": 1, "metric": ["cosine"]}, 400, "metric"),
    ("/topk", {"id": 1, "metric": {"a": 1}}, 400, "metric"),
    ("/topk", {"id": [1], "k": 2}, 400, "node ids are ints or strings"),
    ("/topk", {"id": 1, "k": "3.5"}, 400, "k: expected an int"),
    ("/topk", {"id": 1, "k": True}, 400, "k: expected an int"),
    ("/score", {"pairs": "1,2"}, 400, "pairs"),
    ("/score", {"pairs": [[1, {"x": 1}]]}, 400, "node ids are ints or strings"),
    ("/score?src=1&dst=x", None, 400, "not an int node id"),
    ("/nowhere", None, 404, "Not Found"),
]


def test_hostile_input_is_a_4xx_naming_the_problem_and_logs_nothing(service):
    """Each class the independent check found, and its neighbors: a JSON 4xx that says what is wrong, and
    not one warning or traceback in the service's log."""
    with ServiceErrors() as logged:
        for path, body, code, words in REFUSED:
            if isinstance(body, list):
                body = json.dumps(body).encode()
            status, got = answer(service.url, path, body)
            assert status == code and words in got["error"], (path, status, got)
        status, headers, raw = request(service.url, "/embeddings", method="DELETE")
        assert status == 405 and "GET" in headers["allow"] and "error" in strict_json(raw)
        # the service still answers, and a valid request beside the refused ones is answered exactly
        status, got = answer(service.url, "/embeddings?ids=-0,19")
        assert status == 200 and [e["id"] for e in got["embeddings"]] == [0, 19]
    assert not logged.records, [r.getMessage() for r in logged.records]


def test_a_bug_of_the_service_is_a_json_500_and_a_logged_error(service, monkeypatch):
    """The catch-all: an exception no input explains (here the scorer failing) still answers JSON, is
    logged with its traceback for the operator, and the service goes on serving."""

    def broken(*args):
        raise RuntimeError("scorer bug")

    monkeypatch.setattr(service.scorer, "score", broken)
    with ServiceErrors() as logged:
        status, got = answer(service.url, "/score?src=1&dst=2")
    assert status == 500 and "internal error" in got["error"]
    assert [r.exc_info[1].args for r in logged.records] == [("scorer bug",)]
    monkeypatch.undo()
    status, got = answer(service.url, "/score?src=1&dst=2")
    assert status == 200 and got["scorer"] == "cosine"


def test_request_and_url_limits(service):
    """413 for a body over serve.max_body_bytes (declared or chunked), 414 for a URL over
    serve.max_url_bytes; requests within both are answered."""
    big = json.dumps({"ids": list(range(2000))}).encode()
    assert len(big) > 8000
    status, got = answer(service.url, "/embeddings", big)
    assert status == 413 and "max_body_bytes=8000" in got["error"]
    chunks = iter([big[:5000], big[5000:]])  # no Content-Length: read until the limit, then refused
    conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=60)
    conn.request("POST", "/embeddings", body=chunks, encode_chunked=True)
    resp = conn.getresponse()
    assert resp.status == 413 and "max_body_bytes" in strict_json(resp.read())["error"]
    conn.close()
    long_url = "/embeddings?ids=" + ",".join(["1"] * 200)
    status, got = answer(service.url, long_url)
    assert status == 414 and "max_url_bytes=300" in got["error"]
    status, got = answer(service.url, "/embeddings?ids=" + ",".join(["1"] * 100))
    assert status == 200 and len(got["embeddings"]) == 100
    _, _, metrics = request(service.url, "/metrics")
    assert b'streamgnn_http_refused_total{status="414"} 1.0' in metrics


def test_default_limits_take_the_largest_request_the_api_allows():
    """The default body limit holds max_ids pairs of the widest int64 ids, and the default URL limit a
    GET of a hundred such ids: they refuse only what no client of the API needs."""
    cfg = ServeConfig()
    widest = -(2**63)
    pairs = json.dumps({"pairs": [[widest, widest]] * cfg.max_ids})
    assert len(pairs.encode()) <= cfg.max_body_bytes
    assert len("/embeddings?ids=" + ",".join([str(widest)] * 100)) <= cfg.max_url_bytes


def test_rows_with_nan_or_inf_are_refused_when_read(kafka_bootstrap, make_topic, caplog):
    """Non-finite rows never reach the table: the node keeps its last good vector (or has none), each is a
    dead letter in /metrics, and each node is logged once however many such rows it sends."""
    topic = make_topic(1, compacted=True)
    good = np.arange(3 * DIM, dtype=np.float32).reshape(3, DIM)
    publish(kafka_bootstrap, topic, [0, 1, 2], good)
    nan_row, inf_row, big_row = np.full(DIM, np.nan), np.full(DIM, np.inf), np.full(DIM, 3e38)
    nan_row[1:] = 0.0
    bad = [(b"1", nan_row), (b"1", inf_row), (b"7", inf_row), (b"2", big_row), (b"7", nan_row)]
    with caplog.at_level(logging.WARNING, logger="streamgnn.serve.reader"):
        publish_raw(kafka_bootstrap, topic, bad)
        with EmbeddingService(ServeConfig(port=0, log_every_s=0), kafka_bootstrap, topic) as service:
            caught_up(service, 3)
            status, got = answer(service.url, "/embeddings?ids=0,1,2")
            assert status == 200
            np.testing.assert_array_equal([e["embedding"] for e in got["embeddings"]], good)
            status, got = answer(service.url, "/embeddings?ids=7")
            assert status == 404 and got["unknown"] == [7]
            status, got = answer(service.url, "/topk?id=0&k=5&metric=dot")
            assert status == 200 and [n["id"] for n in got["neighbors"]] == [2, 1]
            status, _, metrics = request(service.url, "/metrics")
            metrics = metrics.decode()
    assert 'streamgnn_dead_letters_total{reason="a vector with non-finite values"} 4.0' in metrics
    assert 'streamgnn_dead_letters_total{reason="a vector whose squared norm is not finite"} 1.0' in metrics
    warned = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert sorted(m.split("node ")[1].split(" ")[0] for m in warned) == ["1", "2", "7"], warned


def test_malformed_topic_messages_are_dead_letters_and_lose_nothing_beside_them(kafka_bootstrap, make_topic):
    """Messages the reader cannot apply, each of another kind, sent in one batch with good rows: each is
    counted under its reason, and every good row of the batch is served (none is lost with them)."""
    topic = make_topic(1, compacted=True)
    row = json.dumps([0.5] * DIM)
    bad = [
        (b"6", b'{"embedding": 5}'),  # first: no table yet, and not a row to make one from
        (b"99999999999999999999", f'{{"embedding": {row}}}'.encode()),
        (b"3", f'{{"embedding": {row}, "t": "soon"}}'.encode()),
        (b"4", f'{{"embedding": {row}, "t": [1]}}'.encode()),
        (b"5", f'{{"embedding": {row}, "t": Infinity}}'.encode()),
        (b"7", b"[" * 100_000),
    ]
    good = [(str(i).encode(), f'{{"embedding": {row}, "t": {i}}}'.encode()) for i in range(3)]
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for key, value in [bad[0], good[0], *bad[1:3], good[1], *bad[3:], good[2]]:
        producer.send(topic, value, key=key)
    producer.flush()
    producer.close()
    with EmbeddingService(ServeConfig(port=0, log_every_s=0), kafka_bootstrap, topic) as service:
        caught_up(service, 3)
        status, got = answer(service.url, "/embeddings?ids=0,1,2")
        _, _, metrics = request(service.url, "/metrics")
    assert status == 200 and [e["t"] for e in got["embeddings"]] == [0.0, 1.0, 2.0]
    dead = re.findall(r'streamgnn_dead_letters_total\{reason="([^"]*)"\} (\S+)', metrics.decode())
    assert sum(float(n) for _, n in dead) == len(bad), dead
    reasons = " | ".join(r for r, _ in dead)
    for words in ("not one row", "beyond int", "undecodable embedding message"):
        assert words in reasons, reasons
    assert service.reader.error is None


def test_each_answered_row_pairs_the_vector_and_time_of_one_write(kafka_bootstrap, make_topic):
    """A writer rewrites 50 rows as fast as it can, each write's vector filled with its own time; readers
    over HTTP check that every answered row's vector is its time, i.e. both come from the same write."""
    topic = make_topic(1, compacted=True)
    table = EmbeddingTable(DIM)
    ids = np.arange(50)
    table.update(ids, np.zeros((50, DIM)), t=0.0)
    stop, written = threading.Event(), [0]

    def write() -> None:
        while not stop.is_set():
            written[0] += 1
            table.update(ids, np.full((50, DIM), float(written[0])), t=float(written[0]))

    torn, seen = [], set()

    def read(url: str) -> None:
        for _ in range(40):
            status, got = answer(url, "/embeddings?ids=" + ",".join(map(str, ids)))
            assert status == 200
            for row in got["embeddings"]:
                seen.add(row["t"])
                if row["embedding"] != [row["t"]] * DIM:
                    torn.append((row["t"], row["embedding"][0]))

    config = ServeConfig(port=0, log_every_s=0)
    switch = sys.getswitchinterval()
    with EmbeddingService(config, kafka_bootstrap, topic, table=table) as service:
        writer = threading.Thread(target=write)
        readers = [threading.Thread(target=read, args=(service.url,)) for _ in range(3)]
        sys.setswitchinterval(1e-5)  # threads take turns often: a read that is two reads gets interleaved
        try:
            writer.start()
            for r in readers:
                r.start()
            for r in readers:
                r.join()
        finally:
            sys.setswitchinterval(switch)
            stop.set()
            writer.join()
    assert not torn, torn[:5]
    assert len(seen) > 10, "the writer made too few writes while the readers read to test anything"


def test_bearer_token_guards_every_route_but_health(kafka_bootstrap, make_topic, vectors):
    topic = make_topic(1, compacted=True)
    publish(kafka_bootstrap, topic, np.arange(20), vectors)
    key = "k3y-" + "x" * 40
    with EmbeddingService(ServeConfig(port=0, log_every_s=0, api_key=key), kafka_bootstrap, topic) as service:
        caught_up(service, 20)
        url, auth = service.url, {"Authorization": f"Bearer {key}"}
        status, got = answer(url, "/health")
        assert status == 200 and got["nodes"] == 20
        for path in ("/embeddings?ids=1", "/topk?id=1", "/score?src=1&dst=2", "/metrics", "/nowhere"):
            status, headers, raw = request(url, path)
            assert status == 401 and "Authorization: Bearer" in strict_json(raw)["error"], path
            assert headers["www-authenticate"].startswith("Bearer")
        for wrong in (f"Bearer {key}x", f"Bearer {key[:-1]}", key, f"Basic {key}", "Bearer \u00e9"):
            status, got = answer(url, "/embeddings?ids=1", headers={"Authorization": wrong.encode("utf-8")})
            assert status == 401 and "not this service's key" in got["error"], wrong
        status, got = answer(url, "/embeddings?ids=1", headers=auth)
        assert status == 200 and got["embeddings"][0]["embedding"] == vectors[1].tolist()
        status, _, raw = request(url, "/metrics", headers=auth)
        assert status == 200 and b"streamgnn_table_nodes 20.0" in raw
        assert b'streamgnn_http_refused_total{status="401"} 10.0' in raw  # 5 without a token, 5 wrong


def test_api_key_comes_from_the_environment_and_stays_out_of_reprs():
    cfg = load_config(None, env={"STREAMGNN_SERVE__API_KEY": "s3cret-abc"})
    assert cfg.serve.api_key == "s3cret-abc" and "s3cret" not in repr(cfg)
    for bad in ("", "two words", "caf\u00e9"):
        with pytest.raises(ConfigError, match="api_key must be a bearer token"):
            ServeConfig(api_key=bad)
    with pytest.raises(ConfigError, match="both or neither"):
        ServeConfig(ssl_certfile="cert.pem")


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_cli_port_0_prints_the_bound_port_and_serves_tls_with_a_key(kafka_bootstrap, make_topic, tmp_path):
    """``streamgnn serve --port 0`` prints the URL it actually listens on; with --ssl-certfile/--ssl-keyfile
    that is HTTPS (uvicorn's TLS), and STREAMGNN_SERVE__API_KEY requires the bearer token."""
    topic = make_topic(1, compacted=True)
    publish(kafka_bootstrap, topic, np.arange(3), np.eye(3, DIM, dtype=np.float32))
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    env = {**os.environ, "STREAMGNN_SERVE__API_KEY": "t0ken"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamgnn.cli", "serve", "--bootstrap", kafka_bootstrap, "--topic", topic,
         "--port", "0", "--log-every", "0", "--ssl-certfile", str(cert), "--ssl-keyfile", str(key)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        line = proc.stdout.readline()
        found = re.search(r"on (https://127\.0\.0\.1:(\d+))$", line.strip())
        assert found and int(found[2]) > 0, (line, proc.stderr.read() if proc.poll() is not None else "")
        url, context = found[1], ssl.create_default_context(cafile=str(cert))
        health = wait_for(
            lambda: (h := answer(url, "/health", context=context)[1])["caught_up"] and h, "catch-up"
        )
        assert health["status"] == "ok" and health["nodes"] == 3
        status, _ = answer(url, "/embeddings?ids=1", context=context)
        assert status == 401
        auth = {"Authorization": "Bearer t0ken"}
        status, got = answer(url, "/embeddings?ids=1", context=context, headers=auth)
        assert status == 200 and got["embeddings"][0]["embedding"] == np.eye(3, DIM)[1].tolist()
        with pytest.raises(ssl.SSLError):  # a client that does not trust the certificate is turned away
            request(url, "/health", context=ssl.create_default_context())
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "Traceback" not in err, err[-2000:]
