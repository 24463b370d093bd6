"""Prometheus metrics of the long-running jobs (their one line per interval: ``streamgnn.progress``).

Each job owns a ``CollectorRegistry`` (several can live in one process, e.g. in tests): the embeddings
service serves it at ``/metrics``, a trainer worker with ``prometheus_client.start_http_server``. Names:

- ``streamgnn_events_ingested_total``: events (worker) or embedding messages (service) taken in
- ``streamgnn_consumer_lag_messages{topic, partition}``: messages behind the end of each partition
- ``streamgnn_dead_letters_total{reason}``: rows not applied, by reason (values stripped from the text)
- ``streamgnn_embedding_freshness_seconds``: worker, from a batch's arrival to its rows being queryable in
  the trainer's table; service, from the Kafka timestamp of an embedding message (when the trainer
  published it) to the row being queryable in the service
- service only: ``streamgnn_http_request_seconds{route, status}``, ``streamgnn_table_nodes``,
  ``streamgnn_http_refused_total{status}`` (401, 414, and 400 for a query string that is not UTF-8:
  answered before any route)
- worker only: ``streamgnn_train_events_per_second``, ``streamgnn_window_ap|auc|mrr`` (the latest closed
  running-metrics window), ``streamgnn_train_loss``, ``streamgnn_train_steps``,
  ``streamgnn_stream_position`` (events consumed, restored from checkpoints), ``streamgnn_learned_events``,
  ``streamgnn_replica_fingerprint`` (CRC32 of the parameters: data-parallel replicas at one step agree)

    metrics = ServiceMetrics()
    metrics.dead_letter("key 'x' is not an int node id")  # counted under reason "key is not an int node id"
"""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_FRESHNESS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
_VALUES = re.compile(r"\([^)]*\)|'[^']*'|\"[^\"]*\"|[-+]?\d[\w.+-]*|=\S*")


def reason_label(reason: str) -> str:
    """A dead letter's reason without the values it quotes (ids, times, offsets), so that a label holds
    a handful of kinds, not one series per event."""
    text = _VALUES.sub("", reason.split(";")[0])
    return " ".join(text.replace(",", " ").split())[:80] or "unspecified"


class _Common:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.ingested = Counter(
            "streamgnn_events_ingested", "events (or embedding messages) taken in", registry=r
        )
        self.lag = Gauge(
            "streamgnn_consumer_lag_messages",
            "messages behind the partition end",
            ["topic", "partition"],
            registry=r,
        )
        self.dead_letters = Counter(
            "streamgnn_dead_letters", "rows not applied, by reason", ["reason"], registry=r
        )
        self.freshness = Histogram(
            "streamgnn_embedding_freshness_seconds",
            "from arrival to queryable (see streamgnn.serve.metrics)",
            buckets=_FRESHNESS_BUCKETS,
            registry=r,
        )

    def dead_letter(self, reason: str, count: int = 1) -> None:
        self.dead_letters.labels(reason_label(reason)).inc(count)

    def set_lag(self, lag: dict[str, int]) -> None:
        """``lag``: ``{"topic:partition": messages}``."""
        for key, value in lag.items():
            topic, _, part = key.rpartition(":")
            self.lag.labels(topic, part).set(value)


class ServiceMetrics(_Common):
    """The embeddings service's metrics."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__(registry)
        self.nodes = Gauge("streamgnn_table_nodes", "nodes with an embedding", registry=self.registry)
        self.requests = Histogram(
            "streamgnn_http_request_seconds",
            "request handling time",
            ["route", "status"],
            registry=self.registry,
        )
        self.refused = Counter(
            "streamgnn_http_refused",
            "requests refused before routing: 401 (no or a wrong API key), 414 (URL too long), 400 (a query "
            "string that is not UTF-8)",
            ["status"],
            registry=self.registry,
        )


class WorkerMetrics(_Common):
    """A trainer worker's metrics (every rank keeps its own)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__(registry)
        r = self.registry
        self.events_per_s = Gauge("streamgnn_train_events_per_second", "over the last step", registry=r)
        self.window = {
            name: Gauge(f"streamgnn_window_{name}", f"{name.upper()} of the latest closed window", registry=r)
            for name in ("ap", "auc", "mrr")
        }
        self.loss = Gauge("streamgnn_train_loss", "loss of the latest closed window", registry=r)
        self.steps = Gauge("streamgnn_train_steps", "global batches trained (restored on resume)", registry=r)
        self.position = Gauge("streamgnn_stream_position", "events consumed (restored on resume)", registry=r)
        self.learned = Gauge(
            "streamgnn_learned_events", "edge additions learned (restored on resume)", registry=r
        )
        self.learned_fraction = Gauge(
            "streamgnn_learned_fraction",
            "share of the events consumed that the model learned from (1: every event; less while the "
            "budget learns on a share of a lagging stream)", registry=r,
        )  # fmt: skip
        self.evaluated = Gauge(
            "streamgnn_evaluated_events",
            "events the online evaluation scored (a sample, budgeted)",
            registry=r,
        )
        self.batch_size = Gauge("streamgnn_batch_size", "events in the next global batch", registry=r)
        self.fingerprint = Gauge(
            "streamgnn_replica_fingerprint", "CRC32 of the parameters; equal across replicas", registry=r
        )
