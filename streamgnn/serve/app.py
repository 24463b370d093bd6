"""The HTTP API of the embeddings service (Starlette, served by uvicorn). JSON in and out.

- ``GET /health``: ``{"status", "nodes", "dim", "caught_up", "lag", "error"}`` (200 while it serves)
- ``GET /embeddings?ids=1,2``, ``POST /embeddings {"ids": [1, 2]}``:
  ``{"dim", "embeddings": [{"id", "t", "embedding"}]}``
- ``GET /topk?id=1&k=10[&metric=dot]``, ``POST /topk {"id": 1 (or "vector": [...]), "k", "metric"}``:
  ``{"query", "metric", "k", "neighbors": [{"id", "score"}]}``, best first, the query node left out
- ``GET /score?src=1&dst=2``, ``POST /score {"pairs": [[1, 2], ...]}``:
  ``{"scorer", "scores": [{"src", "dst", "score"}]}``, with ``"checkpoint"``, ``"pair_features"`` or
  ``"why"`` where they apply (see ``streamgnn.serve.scoring``)
- ``GET /predict?nodes=1,2``, ``POST /predict {"nodes": [1, 2]}`` (an edge task: ``?src=1&dst=2``,
  ``{"pairs": [[1, 2]]}``): ``{"task", "checkpoint", "predictions": [{"node" (or "src", "dst"),
  "probability", "label"}]}`` by the task head of the trainer's checkpoint (``streamgnn.serve.predict``;
  ``"probabilities"`` for classes, ``"value"`` for regression, ``"affinities": [{"class", "share"}]``, the
  ``task.top_k`` best first, for node affinity, or a request's own ``k``: ``&k=3``, ``"k": 3``, from 1 to
  the task's classes); 404 when there is no head, 400 for node ids to an edge task or pairs to a node
  task, and for a ``k`` out of range or to a task that ranks no classes
- ``GET /metrics``: Prometheus text format

Errors are ``{"error": "..."}``: 400 for malformed input (the message names the field), 401 without the
bearer token when the service has an API key, 404 for node ids with no embedding (listed under
``"unknown"``) and for unknown paths, 405 for another method, 413 for more ids, a larger ``k`` or a larger
body than the config allows, 414 for a longer URL. Input is checked where it enters: a body is strict JSON
(no ``NaN``/``Infinity``, no number beyond float64, nesting at most ``MAX_DEPTH`` deep, only encodable
strings); int node ids are int64; query vectors are finite in float32, norm included. Whatever a request
holds, the answer is one of these; only a bug of the service itself is a 500 (``{"error": ...}``, with the
traceback in the service's log). A number no JSON can hold in an answer (a row without a time) is ``null``.
"""

from __future__ import annotations

import json
import logging
import math
import re
import reprlib
import time
from collections.abc import Awaitable, Callable

import numpy as np
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..embeddings.table import METRICS, EmbeddingTable
from ..errors import UnknownNodeError
from ..tasks.affinity import NodeAffinity
from ..tasks.online import OnlineHead
from .config import ServeConfig, int_id
from .guard import RequestGuard
from .metrics import ServiceMetrics
from .predict import TaskPredictor
from .reader import EmbeddingsReader
from .scoring import LinkScorer

log = logging.getLogger(__name__)

MAX_DEPTH = 16  # the deepest body the API reads is 3 ({"pairs": [[src, dst]]})
# A top-k that scans at most this many floats (100k 100-d rows), or that the index answers, runs on the event
# loop: a few ms, less than the two thread hops a worker costs on a busy host (p99 over HTTP at 300k indexed
# rows under load 3.5 on our 2-core host: 10.8 ms through a worker thread, 8.8 ms on the loop).
INLINE_SCAN_FLOATS = 10_000_000
_REPR = reprlib.Repr()  # a value quoted in an error, cut short: a body may hold a megabyte
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = 40
_REPR.maxlist = _REPR.maxdict = 4
_show = _REPR.repr


class _Reject(Exception):
    def __init__(self, status: int, message: str, **extra) -> None:
        super().__init__(message)
        self.status, self.body = status, {"error": message, **extra}


class Api:
    """What every handler reads a request with: the config, the reader's table, the scorer, and the input
    checks (each refusal a ``_Reject`` naming the field). A route is a handler ``(api, request)`` in
    ``ROUTES``."""

    def __init__(
        self, config: ServeConfig, reader: EmbeddingsReader, scorer: LinkScorer, predictor: TaskPredictor
    ) -> None:
        self.config, self.reader, self.scorer, self.predictor = config, reader, scorer, predictor
        self.metrics: ServiceMetrics = reader.metrics
        self.int_ids = config.node_ids == "int"

    def node_id(self, value, field: str):
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise _Reject(400, f"{field}: node ids are ints or strings, got {_show(value)}")
        if self.int_ids:
            try:
                return int_id(value)
            except ValueError as exc:
                raise _Reject(400, f"{field}: node id {_show(value)} {exc}") from None
        return str(value)

    def id_list(self, values, field: str) -> list:
        if not isinstance(values, list) or not values:
            raise _Reject(400, f"{field}: give a non-empty list of node ids")
        if len(values) > self.config.max_ids:
            raise _Reject(413, f"{field}: {len(values)} ids, more than serve.max_ids={self.config.max_ids}")
        return [self.node_id(v, field) for v in values]

    def ids_array(self, ids: list) -> np.ndarray:
        return np.array(ids, dtype=np.int64 if self.int_ids else object)

    def table(self) -> EmbeddingTable:
        if self.reader.table is None:
            raise _Reject(404, "no embeddings yet: the topic has not delivered any", unknown=[])
        return self.reader.table

    def rows(self, ids: list, field: str) -> tuple[EmbeddingTable, np.ndarray, np.ndarray]:
        """Each id's vector and time, from one read: a row rewritten meanwhile is answered whole."""
        tab = self.table()
        arr = self.ids_array(ids)
        try:
            return tab, *tab.read(arr)
        except UnknownNodeError:
            unknown = [i for i, ok in zip(ids, tab.known(arr).tolist(), strict=True) if not ok]
            raise _Reject(
                404, f"{field}: no embedding for node ids {unknown[:20]}", unknown=unknown
            ) from None

    async def body(self, request: Request) -> dict:
        limit = self.config.max_body_bytes  # a declared length is checked by RequestGuard, before routing
        raw = bytearray()
        try:
            async for chunk in request.stream():  # a chunked body has no length to check up front
                raw += chunk
                if len(raw) > limit:
                    raise _Reject(413, f"the body is more than serve.max_body_bytes={limit} bytes")
        except ClientDisconnect:
            raise _Reject(400, "the client left before sending the whole body") from None
        data = _parse_json(bytes(raw))
        if not isinstance(data, dict):
            raise _Reject(400, "the request body must be a JSON object")
        return data

    def k(self, value) -> int:
        """``/topk``'s ``k``: beyond ``serve.max_k`` a 413 (a limit of the service, not a wrong value)."""
        k = _count(value, "k", "an int >= 1")
        if k > self.config.max_k:
            raise _Reject(413, f"k: {_show(k)} is more than serve.max_k={self.config.max_k}")
        return k


def _count(value, field: str, allowed: str, most: int | None = None) -> int:
    """``value`` (a JSON int or a query string's digits) as an int from 1 (to ``most``), else a 400 naming
    ``field`` and what is ``allowed``."""
    # digits only, as node ids: int() would also read "1_0", " 5" or other scripts' digits
    if not (type(value) is int or (isinstance(value, str) and re.fullmatch("[0-9]+", value))):
        raise _Reject(400, f"{field}: expected {allowed}, got {_show(value)}")
    n = value if type(value) is int else int(value.lstrip("0")[:30] or "0")  # 30 digits: beyond any limit
    if n < 1 or (most is not None and n > most):
        raise _Reject(400, f"{field}: expected {allowed}, got {_show(value)}")
    return n


async def health(api: Api, request: Request):
    reader = api.reader
    tab = reader.table
    error = reader.error or (None if tab is None else tab.index_error)  # an index lost: scans answer
    return {
        "status": "ok" if error is None else "degraded",
        "topic": reader.topic,
        "nodes": 0 if tab is None else len(tab),
        "dim": None if tab is None else tab.dim,
        "caught_up": reader.caught_up.is_set(),
        "lag": reader.lag,
        "error": error,
    }


async def embeddings(api: Api, request: Request):
    if request.method == "POST":
        ids = api.id_list((await api.body(request)).get("ids"), "ids")
    else:
        ids = api.id_list([s for s in request.query_params.get("ids", "").split(",") if s], "ids")
    tab, vectors, t = api.rows(ids, "ids")
    return {
        "dim": tab.dim,
        "embeddings": [
            {"id": i, "t": ti, "embedding": v}
            for i, ti, v in zip(ids, _numbers(t), _numbers(vectors), strict=True)
        ],
    }


async def topk(api: Api, request: Request):
    data = await api.body(request) if request.method == "POST" else dict(request.query_params)
    k = api.k(data.get("k", 10))
    metric = data.get("metric", api.config.metric)
    if not isinstance(metric, str) or metric not in METRICS:
        raise _Reject(400, f"metric: one of {list(METRICS)}, got {_show(metric)}")
    if "vector" in data:
        tab = api.table()
        query, exclude, queries = None, None, _query_vector(data["vector"], tab.dim)
    elif "id" in data:
        query = api.node_id(data["id"], "id")
        tab, queries, _ = api.rows([query], "id")
        exclude = api.ids_array([query])
    else:
        raise _Reject(400, "give the query node as 'id' or a query 'vector'")
    if tab.scan_size(metric) <= INLINE_SCAN_FLOATS:  # a few ms: on the loop, no thread hops
        ids, scores = tab.top_k(queries, k, metric, exclude)
    else:  # a long scan: the loop keeps answering /health (lookups wait for the table's lock anyway)
        ids, scores = await run_in_threadpool(tab.top_k, queries, k, metric, exclude)
    neighbors = [{"id": i, "score": s} for i, s in zip(ids[0].tolist(), _numbers(scores[0]), strict=True)]
    return {"query": query, "metric": metric, "k": k, "neighbors": neighbors}


async def score(api: Api, request: Request):
    if request.method == "POST":
        pairs = (await api.body(request)).get("pairs")
        ok = isinstance(pairs, list) and pairs and all(isinstance(p, list) and len(p) == 2 for p in pairs)
        if not ok:
            raise _Reject(400, "pairs: give a non-empty list of [src, dst] pairs")
    else:
        q = request.query_params
        if "src" not in q or "dst" not in q:
            raise _Reject(400, "give src and dst (or POST {'pairs': [[src, dst], ...]})")
        pairs = [[q["src"], q["dst"]]]
    src = api.id_list([p[0] for p in pairs], "pairs (src)")
    dst = api.id_list([p[1] for p in pairs], "pairs (dst)")
    _, z, _ = api.rows(src + dst, "pairs")
    values, info = await run_in_threadpool(api.scorer.score, z[: len(src)], z[len(src) :], src, dst)
    scores = [{"src": a, "dst": b, "score": s} for a, b, s in zip(src, dst, _numbers(values), strict=True)]
    return {**info, "scores": scores}


def _pairs_of(api: Api, data: dict) -> tuple[list, list]:
    """The edges asked, as ``pairs`` or as one ``src`` and ``dst``: an error names the field it was in."""
    if "pairs" in data:
        pairs, fields = data["pairs"], ("pairs (src)", "pairs (dst)")
    else:
        pairs, fields = [[data.get("src"), data.get("dst")]], ("src", "dst")
    if not (isinstance(pairs, list) and pairs and all(isinstance(p, list) and len(p) == 2 for p in pairs)):
        raise _Reject(400, "pairs: give a non-empty list of [src, dst] pairs")
    return api.id_list([p[0] for p in pairs], fields[0]), api.id_list([p[1] for p in pairs], fields[1])


async def predict(api: Api, request: Request):
    """The task head's predictions (node or edge, as the newest checkpoint's task says) for the given ids."""
    data = await api.body(request) if request.method == "POST" else dict(request.query_params)
    predictor = api.predictor
    loaded = await run_in_threadpool(predictor.load)
    head = loaded.head
    if head is None:
        raise _Reject(404, f"no task head: {loaded.why}")
    edges = head.task.on_edges
    if edges != ("pairs" in data or "src" in data or "dst" in data):
        want = "pairs (POST {'pairs': [[src, dst]]}) or src and dst" if edges else "nodes"
        raise _Reject(400, f"the task is {head.config.kind}: give {want}")
    if edges:
        src, dst = _pairs_of(api, data)
        _, z, _ = api.rows(src + dst, "pairs")
        x = predictor.inputs(loaded, z[: len(src)], api.ids_array(src), z[len(src) :], api.ids_array(dst))
        keys = [{"src": a, "dst": b} for a, b in zip(src, dst, strict=True)]
    else:
        nodes = data.get("nodes")
        if request.method == "GET":
            nodes = [s for s in str(nodes or "").split(",") if s]
        ids = api.id_list(nodes, "nodes")
        _, z, _ = api.rows(ids, "nodes")
        x = predictor.inputs(loaded, z, api.ids_array(ids))
        keys = [{"node": i} for i in ids]
    if x.shape[1] != head.in_dim:
        raise _Reject(404, f"no task head for these embeddings: the head of {loaded.checkpoint} reads "
                      f"{head.in_dim} inputs, these give {x.shape[1]}")  # fmt: skip
    out = predictor.predict(head, x, _top_k(head, data))
    return {
        "task": head.config.kind, "checkpoint": loaded.checkpoint,
        "predictions": [{**k, **p} for k, p in zip(keys, out, strict=True)],
    }  # fmt: skip


def _top_k(head: OnlineHead, data: dict) -> int | None:
    """``/predict``'s ``k``: how many of a node's classes node affinity ranks (1 to the task's classes;
    absent: the job's ``task.top_k``); any other task ranks none, so a ``k`` for it is a 400 too."""
    task = head.task
    if "k" not in data:
        return None
    if not isinstance(task, NodeAffinity):
        raise _Reject(400, f"k: only node_affinity ranks classes, this task is {head.config.kind}")
    return _count(data["k"], "k", f"an int from 1 to {task.classes} (the task's classes)", task.classes)


async def prometheus(api: Api, request: Request):
    return Response(generate_latest(api.metrics.registry), media_type=CONTENT_TYPE_LATEST)


Handler = Callable[[Api, Request], Awaitable[object]]
_BOTH = ("GET", "POST")
# (path, name in the request metrics, handler, methods: None is GET): a new route is one line here
ROUTES: tuple[tuple[str, str, Handler, tuple[str, ...] | None], ...] = (
    ("/health", "health", health, None),
    ("/embeddings", "embeddings", embeddings, _BOTH),
    ("/topk", "topk", topk, _BOTH),
    ("/score", "score", score, _BOTH),
    ("/predict", "predict", predict, _BOTH),
    ("/metrics", "metrics", prometheus, None),
)


def _endpoint(api: Api, name: str, handler: Handler):
    """``handler`` as a Starlette endpoint: its dict answered as JSON, a ``_Reject`` as its status, any
    other exception as a logged 500; every answer timed in the request metrics under ``name``."""

    async def run(request: Request):
        started = time.perf_counter()
        try:
            result = await handler(api, request)
            response = result if isinstance(result, Response) else JSONResponse(result)
        except _Reject as exc:
            response = JSONResponse(exc.body, status_code=exc.status)
        except Exception:  # a bug of the service, not of the request: say so, keep serving
            log.exception("%s %s failed", request.method, request.url.path)
            response = JSONResponse({"error": "internal error (logged by the service)"}, status_code=500)
        api.metrics.requests.labels(name, str(response.status_code)).observe(time.perf_counter() - started)
        return response

    return run


async def _http_error(request: Request, exc: HTTPException):  # routing's own 404 and 405
    return JSONResponse({"error": exc.detail}, status_code=exc.status_code, headers=exc.headers)


def create_app(
    config: ServeConfig, reader: EmbeddingsReader, scorer: LinkScorer, predictor: TaskPredictor | None = None
) -> Starlette:
    """The ASGI app over ``reader.table`` (which the reader may create after the first message);
    ``predictor``: the task head ``/predict`` answers with (None: a 404 saying there is none)."""
    api = Api(config, reader, scorer, predictor or TaskPredictor(None))
    guard = Middleware(
        RequestGuard,
        max_url_bytes=config.max_url_bytes,
        max_body_bytes=config.max_body_bytes,
        api_key=config.api_key,
        metrics=api.metrics,
    )
    routes = [
        Route(path, _endpoint(api, name, handler), methods=None if methods is None else list(methods))
        for path, name, handler, methods in ROUTES
    ]
    return Starlette(middleware=[guard], exception_handlers={HTTPException: _http_error}, routes=routes)


def _parse_json(raw: bytes):
    """Strict JSON: what ``json`` takes beyond the standard (``NaN``, ``Infinity``, ``1e999`` read as inf),
    numbers Python will not hold (ints of over 4300 digits), nesting that would exhaust the stack and lone
    surrogates (which no answer could encode back) are each a 400 naming the problem."""

    def number(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise _Reject(400, f"the request body holds {_show(text)}, beyond float64")
        return value

    def constant(text: str):
        raise _Reject(400, f"the request body holds {text}, which is not a JSON number")

    try:
        data = json.loads(raw.decode("utf-8"), parse_float=number, parse_constant=constant)
    except UnicodeDecodeError as exc:
        raise _Reject(400, f"the request body is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except RecursionError:
        raise _Reject(400, f"the request body nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # JSONDecodeError, or an int too long to convert
        raise _Reject(400, f"the request body is not JSON ({exc})") from None
    stack = [(data, 1)]  # not recursive: the depth is what is being checked
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise _Reject(
                    400, f"the request body holds the string {_show(value)}, not valid Unicode"
                ) from None
        elif isinstance(value, list | dict):
            if depth > MAX_DEPTH:
                raise _Reject(400, f"the request body nests deeper than {MAX_DEPTH} levels")
            items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            stack.extend((item, depth + 1) for item in items)
    return data


def _query_vector(value, dim: int) -> np.ndarray:
    """``[1, dim]`` float32 whose squared norm is finite, as the table's rows are (with an infinite norm,
    cosine would divide by inf and score every row 0; below it, dot products cannot overflow either)."""
    numbers = isinstance(value, list) and all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in value
    )
    if not numbers or len(value) != dim:
        raise _Reject(400, f"vector: give {dim} numbers")
    with np.errstate(over="ignore"):
        try:
            vec = np.array([value], np.float64).astype(np.float32)
        except OverflowError:  # an int beyond float64
            vec = np.full((1, dim), np.inf, np.float32)
        if not np.isfinite(np.linalg.norm(vec)):
            raise _Reject(
                400, "vector: beyond float32 (an entry, or the sum of squares: keep entries < 1.8e19)"
            )
    return vec


def _numbers(values: np.ndarray) -> list:
    """``values.tolist()`` with every NaN or infinity as ``None``: strict JSON has no number for them."""
    if np.isfinite(values).all():
        return values.tolist()
    return np.where(np.isfinite(values), values, None).tolist()
