"""What the embeddings service is: where it listens, how it compares and names nodes, its limits."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from ..configs import Config
from ..embeddings.ann import TOPK, ApproximateTopK
from ..embeddings.table import METRICS
from ..errors import ConfigError

NODE_IDS = ("int", "str")
INT64 = (-(1 << 63), (1 << 63) - 1)  # the range of "int" node ids (the table keys them as int64)
_DECIMAL = re.compile(r"-?0*([0-9]{1,19})")  # int64 holds 19 digits at most


def int_id(value: int | str) -> int:
    """An "int" node id from an int or its decimal text, strictly: ASCII digits with an optional leading
    ``-`` and nothing else. Python's ``int()`` also reads ``1_0`` as 10, other scripts' digits as ASCII
    ones, and spaces and ``+`` around them: each would answer for a node the client did not name. Raises
    ``ValueError`` saying why the value is not one."""
    if isinstance(value, str):
        match = _DECIMAL.fullmatch(value)
        if match is None:
            if re.fullmatch(r"-?[0-9]+", value):
                raise ValueError("is beyond int64")
            raise ValueError("is not an int node id (ASCII digits, an optional leading '-')")
        value = -int(match[1]) if value.startswith("-") else int(match[1])
    if not INT64[0] <= value <= INT64[1]:
        raise ValueError("is beyond int64")
    return value


@dataclass(frozen=True)
class ServeConfig(Config):
    """``streamgnn serve``. The service reads the embeddings topic (``kafka.embeddings_topic`` in a config
    file) from its start into an ``EmbeddingTable`` and answers over HTTP.

    ``node_ids``: how message keys (the sink writes ``str(node)``) become node ids: "int" (every bundled
    dataset; int64) or "str"; a key that is not an int under "int" is a dead letter. ``metric``: the default
    similarity of ``/topk`` ("cosine" or "dot"; a request may name the other). ``max_k``/``max_ids``: the
    most neighbors and the most ids one request may ask for. ``max_body_bytes``: the largest request body
    (413 beyond; the default holds ``max_ids`` pairs of int64 ids). ``max_url_bytes``: the longest path and
    query string (414 beyond; POST takes long id lists). ``api_key``: when set, every route but ``/health``
    needs ``Authorization: Bearer <api_key>`` (401 otherwise); ``streamgnn serve`` reads it from the
    environment as ``STREAMGNN_SERVE__API_KEY`` (a YAML scalar, as every such variable: quote a key of
    digits only), which keeps it out of config files and command lines.
    ``ssl_keyfile``/``ssl_certfile``: PEM files for HTTPS (uvicorn's TLS), both or neither.
    ``log_every_s``: seconds between the one-line progress logs (0: none). ``checkpoint_dir``: where the
    trainer checkpoints (default: the config file's ``train.checkpoint_dir``); ``/score`` then uses the
    trained link predictor, else cosine similarity.

    ``topk``: how ``/topk`` finds cosine neighbors: "approximate" (once the table holds
    ``topk_exact_below`` rows, a scan of 4-bit product-quantized codes kept as rows change picks
    ``topk_candidates`` rows per neighbor asked, and those are re-scored exactly: ``embeddings/ann.py``)
    or "exact" (every row scanned: 0.1-0.4 s a query at 1M 100-d rows on our 2-core host). "dot" queries
    always scan. Recall and latency at 1M rows: ``benchmarks/RESULTS.md`` (serve).
    """

    host: str = "127.0.0.1"
    port: int = 8000
    metric: Literal[METRICS] = "cosine"
    node_ids: Literal[NODE_IDS] = "int"
    max_k: int = 1000
    max_ids: int = 10_000
    max_body_bytes: int = 1 << 20
    max_url_bytes: int = 8192
    api_key: str | None = field(default=None, repr=False)
    ssl_keyfile: str | None = None
    ssl_certfile: str | None = None
    log_every_s: float = 10.0
    checkpoint_dir: str | None = None
    topk: Literal[TOPK] = "approximate"
    topk_exact_below: int = 100_000
    topk_candidates: int = 50

    def __post_init__(self) -> None:
        if not 0 <= self.port < 65536:
            raise ConfigError(f"serve.port must be in [0, 65535], got {self.port}")
        for name in ("max_k", "max_ids", "max_body_bytes", "max_url_bytes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"serve.{name} must be >= 1, got {getattr(self, name)}")
        if self.api_key is not None and not re.fullmatch(r"[!-~]+", self.api_key):
            raise ConfigError(
                "serve.api_key must be a bearer token: printable ASCII without spaces, not empty "
                "(leave it unset to serve without credentials)"
            )
        if (self.ssl_keyfile is None) != (self.ssl_certfile is None):
            raise ConfigError("serve.ssl_keyfile and serve.ssl_certfile go together: give both or neither")
        if self.log_every_s < 0:
            raise ConfigError(f"serve.log_every_s must be >= 0, got {self.log_every_s}")
        self.approximate_topk()  # its own checks

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_certfile else "http"

    def approximate_topk(self) -> ApproximateTopK | None:
        """What the service's ``EmbeddingTable`` is given for ``topk="approximate"``; None for exact."""
        if self.topk == "exact":
            return None
        return ApproximateTopK(exact_below=self.topk_exact_below, candidates=self.topk_candidates)
