"""What the embeddings service is: where it listens, how it compares and names nodes, its limits."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from .ann import TOPK, ApproximateTopK
from .table import METRICS

NODE_IDS = ("int", "str")


@dataclass(frozen=True)
class ServeConfig:
    """``streamgnn serve``. The service reads the embeddings topic (``kafka.embeddings_topic`` in a config
    file) from its start into an ``EmbeddingTable`` and answers over HTTP.

    ``node_ids``: how message keys (the sink writes ``str(node)``) become node ids: "int" (every bundled
    dataset) or "str"; a key that is not an int under "int" is a dead letter. ``metric``: the default
    similarity of ``/topk`` ("cosine" or "dot"; a request may name the other). ``max_k``/``max_ids``: the
    most neighbors and the most ids one request may ask for. ``log_every_s``: seconds between the one-line
    progress logs (0: none). ``checkpoint_dir``: where the trainer checkpoints (default: the config file's
    ``train.checkpoint_dir``); ``/score`` then uses the trained link predictor, else cosine similarity.

    ``topk``: how ``/topk`` finds cosine neighbors: "approximate" (an inverted-file index kept as rows
    change, once the table holds ``topk_exact_below`` rows; each query scans ``topk_probe`` of its lists)
    or "exact" (every row scanned: 0.1-0.4 s a query at 1M 100-d rows on our 2-core host). "dot" queries
    always scan. Recall and latency at 1M rows: ``benchmarks/RESULTS.md`` (serve).
    """

    host: str = "127.0.0.1"
    port: int = 8000
    metric: str = "cosine"
    node_ids: str = "int"
    max_k: int = 1000
    max_ids: int = 10_000
    log_every_s: float = 10.0
    checkpoint_dir: str | None = None
    topk: str = "approximate"
    topk_exact_below: int = 100_000
    topk_probe: float = 0.05

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ConfigError(f"serve.metric must be one of {METRICS}, got {self.metric!r}")
        if self.node_ids not in NODE_IDS:
            raise ConfigError(f"serve.node_ids must be one of {NODE_IDS}, got {self.node_ids!r}")
        if not 0 <= self.port < 65536:
            raise ConfigError(f"serve.port must be in [0, 65535], got {self.port}")
        for name in ("max_k", "max_ids"):
            if getattr(self, name) < 1:
                raise ConfigError(f"serve.{name} must be >= 1, got {getattr(self, name)}")
        if self.log_every_s < 0:
            raise ConfigError(f"serve.log_every_s must be >= 0, got {self.log_every_s}")
        if self.topk not in TOPK:
            raise ConfigError(f"serve.topk must be one of {TOPK}, got {self.topk!r}")
        self.approximate_topk()  # its own checks

    def approximate_topk(self) -> ApproximateTopK | None:
        """What the service's ``EmbeddingTable`` is given for ``topk="approximate"``; None for exact."""
        if self.topk == "exact":
            return None
        return ApproximateTopK(exact_below=self.topk_exact_below, probe=self.topk_probe)
