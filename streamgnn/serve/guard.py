"""The service's first check of every request, before routing: the URL's length, the bearer token when
the service has an API key, the query string's encoding and the declared body length. Each answers JSON like
every route (``{"error": ...}``), so a client parses one kind of answer; ``/health`` stays open for load
balancers and orchestrators that probe it.

A pure ASGI middleware: it looks at the request line and headers only, so a refused request's body is
never read.
"""

from __future__ import annotations

import hmac
import re
from urllib.parse import unquote_to_bytes

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from .metrics import ServiceMetrics

OPEN_PATHS = ("/health",)


class RequestGuard:
    """414 for a path plus query string longer than ``max_url_bytes``; 401 without
    ``Authorization: Bearer <api_key>`` (compared in constant time) when ``api_key`` is set; 400 for a
    query string that is not UTF-8; 413 for a ``Content-Length`` beyond ``max_body_bytes``, 400 for one that
    is not a number of bytes, whatever its number of digits (a body that large is never coming: waiting for
    it would hold the connection forever). Each refusal is counted in ``metrics.refused`` (a run of 401s is
    someone guessing keys)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_url_bytes: int,
        max_body_bytes: int,
        api_key: str | None,
        metrics: ServiceMetrics,
    ) -> None:
        self.app, self.max_url_bytes, self.max_body_bytes = app, max_url_bytes, max_body_bytes
        self.metrics = metrics
        self.expected = None if api_key is None else f"Bearer {api_key}".encode()

    async def refuse(self, status: int, reason: str, scope: Scope, receive: Receive, send: Send, **headers):
        self.metrics.refused.labels(str(status)).inc()
        await JSONResponse({"error": reason}, status_code=status, headers=headers)(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        size = len(scope.get("raw_path") or scope["path"].encode()) + len(scope.get("query_string", b""))
        if size > self.max_url_bytes:
            reason = (
                f"the URL is {size} bytes, more than serve.max_url_bytes={self.max_url_bytes}; "
                "POST long id lists"
            )
            await self.refuse(414, reason, scope, receive, send)
            return
        if self.expected is not None and scope["path"] not in OPEN_PATHS:
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                reason = "this service needs 'Authorization: Bearer <key>' (serve.api_key)"
                if given:
                    reason = "the bearer token is not this service's key (serve.api_key)"
                challenge = {"WWW-Authenticate": 'Bearer realm="streamgnn"'}
                await self.refuse(401, reason, scope, receive, send, **challenge)
                return
        try:  # Starlette would replace what is not UTF-8: a str node id would be answered for another id
            unquote_to_bytes(scope.get("query_string", b"")).decode("utf-8")
        except UnicodeDecodeError as exc:
            reason = f"the query string is not UTF-8 once percent-decoded ({exc.reason} at byte {exc.start})"
            await self.refuse(400, reason, scope, receive, send)
            return
        refused = self.body_length(scope)
        if refused is not None:
            await self.refuse(*refused, scope, receive, send)
            return
        await self.app(scope, receive, send)

    def body_length(self, scope: Scope) -> tuple[int, str] | None:
        """The refusal of a declared body length, or None to read the body (a chunked one is counted as it
        comes, by the route). Compared as digits first: a number of any length answers at once."""
        declared = [v for k, v in scope["headers"] if k == b"content-length"]
        if not declared:
            return None
        text = declared[0].decode("latin-1")
        if len(declared) > 1 or not re.fullmatch("[0-9]+", text):
            shown = text if len(text) <= 40 else f"{text[:40]}..."
            return 400, f"Content-Length {shown!r} is not one number of bytes"
        digits = text.lstrip("0") or "0"
        limit = self.max_body_bytes
        if len(digits) > len(str(limit)) or int(digits) > limit:
            shown = digits if len(digits) <= 40 else f"a {len(digits)}-digit number of"
            return 413, f"the body is {shown} bytes, more than serve.max_body_bytes={limit}"
        return None
