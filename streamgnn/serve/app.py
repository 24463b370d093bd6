"""The HTTP API of the embeddings service (Starlette, served by uvicorn). JSON in and out.

- ``GET /health``: ``{"status", "nodes", "dim", "caught_up", "lag", "error"}`` (200 while it serves)
- ``GET /embeddings?ids=1,2``, ``POST /embeddings {"ids": [1, 2]}``:
  ``{"dim", "embeddings": [{"id", "t", "embedding"}]}``
- ``GET /topk?id=1&k=10[&metric=dot]``, ``POST /topk {"id": 1 (or "vector": [...]), "k", "metric"}``:
  ``{"query", "metric", "k", "neighbors": [{"id", "score"}]}``, best first, the query node left out
- ``GET /score?src=1&dst=2``, ``POST /score {"pairs": [[1, 2], ...]}``:
  ``{"scorer", "scores": [{"src", "dst", "score"}]}`` (see ``streamgnn.serve.scoring``)
- ``GET /metrics``: Prometheus text format

Errors are ``{"error": "..."}``: 400 for malformed input (the message names the field), 404 for node ids
with no embedding (listed under ``"unknown"``), 413 for more ids or a larger ``k`` than the config allows.
"""

from __future__ import annotations

import json
import math
import time

import numpy as np
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..errors import UnknownNodeError
from .config import ServeConfig
from .metrics import ServiceMetrics
from .reader import EmbeddingsReader
from .scoring import LinkScorer
from .table import METRICS, EmbeddingTable


class _Reject(Exception):
    def __init__(self, status: int, message: str, **extra) -> None:
        super().__init__(message)
        self.status, self.body = status, {"error": message, **extra}


def create_app(config: ServeConfig, reader: EmbeddingsReader, scorer: LinkScorer) -> Starlette:
    """The ASGI app over ``reader.table`` (which the reader may create after the first message)."""
    metrics: ServiceMetrics = reader.metrics
    int_ids = config.node_ids == "int"

    def node_id(value, field: str):
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise _Reject(400, f"{field}: node ids are ints or strings, got {json.dumps(value)[:40]}")
        if int_ids:
            try:
                return int(value)
            except ValueError:
                raise _Reject(400, f"{field}: {value!r} is not an int node id") from None
        return str(value)

    def id_list(values, field: str) -> list:
        if not isinstance(values, list) or not values:
            raise _Reject(400, f"{field}: give a non-empty list of node ids")
        if len(values) > config.max_ids:
            raise _Reject(413, f"{field}: {len(values)} ids, more than serve.max_ids={config.max_ids}")
        return [node_id(v, field) for v in values]

    def table() -> EmbeddingTable:
        if reader.table is None:
            raise _Reject(404, "no embeddings yet: the topic has not delivered any", unknown=[])
        return reader.table

    def rows(ids: list, field: str) -> tuple[EmbeddingTable, np.ndarray, np.ndarray]:
        tab = table()
        arr = np.array(ids, dtype=np.int64 if int_ids else object)
        try:
            return tab, tab.embeddings(arr), tab.updated_at(arr)
        except UnknownNodeError:
            unknown = [i for i, ok in zip(ids, tab.known(arr).tolist(), strict=True) if not ok]
            raise _Reject(
                404, f"{field}: no embedding for node ids {unknown[:20]}", unknown=unknown
            ) from None

    async def body(request: Request) -> dict:
        try:
            data = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise _Reject(400, f"the request body is not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise _Reject(400, "the request body must be a JSON object")
        return data

    def get_k(value) -> int:
        try:
            k = int(value)
        except (TypeError, ValueError):
            raise _Reject(400, f"k: expected an int >= 1, got {value!r}") from None
        if isinstance(value, bool | float) or k < 1:
            raise _Reject(400, f"k: expected an int >= 1, got {value!r}")
        if k > config.max_k:
            raise _Reject(413, f"k: {k} is more than serve.max_k={config.max_k}")
        return k

    async def health(request: Request):
        tab = reader.table
        return {
            "status": "ok" if reader.error is None else "degraded",
            "topic": reader.topic,
            "nodes": 0 if tab is None else len(tab),
            "dim": None if tab is None else tab.dim,
            "caught_up": reader.caught_up.is_set(),
            "lag": reader.lag,
            "error": reader.error,
        }

    async def embeddings(request: Request):
        if request.method == "POST":
            ids = id_list((await body(request)).get("ids"), "ids")
        else:
            ids = id_list([s for s in request.query_params.get("ids", "").split(",") if s], "ids")
        tab, vectors, t = rows(ids, "ids")
        return {
            "dim": tab.dim,
            "embeddings": [
                {"id": i, "t": _finite(ti), "embedding": v}
                for i, ti, v in zip(ids, t.tolist(), vectors.tolist(), strict=True)
            ],
        }

    async def topk(request: Request):
        data = await body(request) if request.method == "POST" else dict(request.query_params)
        k = get_k(data.get("k", 10))
        metric = data.get("metric", config.metric)
        if metric not in METRICS:
            raise _Reject(400, f"metric: one of {list(METRICS)}, got {metric!r}")
        if "vector" in data:
            tab = table()
            vec = data["vector"]
            if not isinstance(vec, list) or len(vec) != tab.dim or not all(_is_number(x) for x in vec):
                raise _Reject(400, f"vector: give {tab.dim} numbers")
            query, exclude, queries = None, None, np.array([vec], np.float32)
        elif "id" in data:
            query = node_id(data["id"], "id")
            tab, queries, _ = rows([query], "id")
            exclude = np.array([query], dtype=np.int64 if int_ids else object)
        else:
            raise _Reject(400, "give the query node as 'id' or a query 'vector'")
        ids, scores = await run_in_threadpool(tab.top_k, queries, k, metric, exclude)
        neighbors = [{"id": i, "score": s} for i, s in zip(ids[0].tolist(), scores[0].tolist(), strict=True)]
        return {"query": query, "metric": metric, "k": k, "neighbors": neighbors}

    async def score(request: Request):
        if request.method == "POST":
            pairs = (await body(request)).get("pairs")
            ok = isinstance(pairs, list) and pairs and all(isinstance(p, list) and len(p) == 2 for p in pairs)
            if not ok:
                raise _Reject(400, "pairs: give a non-empty list of [src, dst] pairs")
        else:
            q = request.query_params
            if "src" not in q or "dst" not in q:
                raise _Reject(400, "give src and dst (or POST {'pairs': [[src, dst], ...]})")
            pairs = [[q["src"], q["dst"]]]
        src = id_list([p[0] for p in pairs], "pairs (src)")
        dst = id_list([p[1] for p in pairs], "pairs (dst)")
        _, z_src, _ = rows(src, "pairs (src)")
        _, z_dst, _ = rows(dst, "pairs (dst)")
        values, info = await run_in_threadpool(scorer.score, z_src, z_dst)
        return {
            **info,
            "scores": [
                {"src": a, "dst": b, "score": s} for a, b, s in zip(src, dst, values.tolist(), strict=True)
            ],
        }

    async def prometheus(request: Request):
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    def endpoint(name: str, handler):
        async def run(request: Request):
            started = time.perf_counter()
            try:
                result = await handler(request)
                response = result if isinstance(result, Response) else JSONResponse(result)
            except _Reject as exc:
                response = JSONResponse(exc.body, status_code=exc.status)
            metrics.requests.labels(name, str(response.status_code)).observe(time.perf_counter() - started)
            return response

        return run

    both = ["GET", "POST"]
    return Starlette(
        routes=[
            Route("/health", endpoint("health", health)),
            Route("/embeddings", endpoint("embeddings", embeddings), methods=both),
            Route("/topk", endpoint("topk", topk), methods=both),
            Route("/score", endpoint("score", score), methods=both),
            Route("/metrics", endpoint("metrics", prometheus)),
        ]
    )


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _is_number(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
