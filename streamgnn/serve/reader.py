"""The embeddings topic, read from its start into an ``EmbeddingTable`` by a background thread.

The topic is what ``KafkaSink`` publishes: one message per node, keyed by ``str(node)``, the vector as JSON
``{"node", "t", "embedding"}`` or as little-endian float32 (with ``t`` in a header). It is compacted, so a
reader that starts from the beginning rebuilds the latest vector of every node, then follows new ones. No
consumer group: every service instance reads every partition (each holds the whole table).

    reader = EmbeddingsReader("localhost:9092", "embeddings").start()
    reader.wait_caught_up(timeout_s=30)
    reader.table.embeddings([1, 2])
    reader.stop()
"""

from __future__ import annotations

import logging
import threading
import time

import numpy as np

from ..embeddings.ann import ApproximateTopK
from ..embeddings.table import EmbeddingTable
from ..errors import ConfigError
from .config import int_id
from .metrics import ServiceMetrics

log = logging.getLogger(__name__)


class EmbeddingsReader:
    """Follows ``topic`` into ``table`` (made with the first vector's width when not given).

    ``node_ids``: "int" or "str" (see ``ServeConfig``). Messages that cannot be applied (no value, an
    undecodable vector, a width other than the table's, NaN or infinite values, a time that is not a finite
    number, a key that is not a node id) are counted in ``metrics`` (``streamgnn_dead_letters_total``)
    under their reason and skipped, never stored: the node keeps its last vector, and the stream goes on.
    ``caught_up`` is set once every partition has been read up to where it ended when the reader started.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        table: EmbeddingTable | None = None,
        approximate: ApproximateTopK | None = None,
        node_ids: str = "int",
        metrics: ServiceMetrics | None = None,
        poll_timeout_s: float = 0.2,
        **consumer_config,
    ) -> None:
        if node_ids not in ("int", "str"):
            raise ConfigError(f"node_ids must be 'int' or 'str', got {node_ids!r}")
        self.bootstrap_servers, self.topic, self.node_ids = bootstrap_servers, topic, node_ids
        self.table, self.approximate = table, approximate
        self.metrics = metrics or ServiceMetrics()
        self.poll_timeout_s = poll_timeout_s
        self.consumer_config = consumer_config
        self.caught_up = threading.Event()
        self.messages = 0  # applied to the table
        self.lag: dict[str, int] = {}
        self.error: str | None = None  # the latest broker error, cleared by the next good poll
        self._warned: set = set()  # nodes whose non-finite vectors were logged (once per node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="streamgnn-embeddings-reader", daemon=True)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> EmbeddingsReader:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def wait_caught_up(self, timeout_s: float | None = None) -> bool:
        return self.caught_up.wait(timeout_s)

    # ------------------------------------------------------------------ the loop
    def _run(self) -> None:
        from ..connectors.kafka import TopicReader, partition_key

        try:
            reader = TopicReader(self.bootstrap_servers, config=self.consumer_config)
        except Exception as exc:
            self.error = f"cannot reach Kafka at {self.bootstrap_servers}: {exc}"
            log.error(self.error)
            return
        try:
            parts = self._wait_for_topic(reader)
            if parts is None:
                return
            reader.assign(self.topic, dict.fromkeys(parts))  # every partition from its beginning
            target = reader.end_offsets(self.topic, parts)  # caught up once every partition reached these
            last_lag = 0.0
            while not self._stop.is_set():
                try:
                    self._apply(reader.poll(self.poll_timeout_s, max_records=20_000))
                    now = time.monotonic()
                    if now - last_lag > 1.0 or not self.caught_up.is_set():
                        ends, pos = reader.end_offsets(self.topic, parts), reader.positions()
                        self.lag = {partition_key(self.topic, p): max(0, ends[p] - pos[p]) for p in parts}
                        self.metrics.set_lag(self.lag)
                        if all(pos[p] >= target[p] for p in parts):
                            self.caught_up.set()
                        last_lag = now
                    self.error = None
                except Exception as exc:  # the client reconnects on its own; say what is wrong meanwhile
                    self.error = f"{type(exc).__name__}: {exc}"
                    log.warning("embeddings reader: %s", self.error)
                    self._stop.wait(1.0)
        finally:
            reader.close()

    def _wait_for_topic(self, reader) -> list[int] | None:
        said = 0.0
        while not self._stop.is_set():
            parts = reader.partitions(self.topic)
            if parts:
                return parts
            if time.monotonic() - said > 10:
                self.error = f"topic {self.topic!r} does not exist yet at {self.bootstrap_servers}"
                log.warning("%s; waiting", self.error)
                said = time.monotonic()
            self._stop.wait(0.5)
        return None

    def _apply(self, records) -> None:
        """Decode ``records`` (offset order per partition), keep each node's last vector, write them. A row
        that cannot be applied is a dead letter with its reason; the poll's other rows are applied."""
        latest: dict = {}
        good = 0
        for r in records:
            try:
                node, vec, t, reason = self._decode(r)
            except ConfigError as exc:
                reason = str(exc)
            except Exception as exc:  # whatever a hostile row makes a decoder raise is that row's fault alone
                reason = f"undecodable embedding message ({type(exc).__name__}: {str(exc)[:200]})"
            if reason is not None:
                self.metrics.dead_letter(reason)
                log.debug("skipped %s:%s@%s: %s", r.topic, r.partition, r.offset, reason)
                continue
            latest[node] = (vec, t, r.timestamp)
            good += 1
        if not latest:
            return
        ids = np.empty(len(latest), dtype=object if self.node_ids == "str" else np.int64)
        ids[:] = list(latest)
        vecs = np.stack([v for v, _, _ in latest.values()])
        ts = np.array([t for _, t, _ in latest.values()])
        for t in np.unique(ts):
            at = (ts == t) | (np.isnan(ts) & np.isnan(t))
            self.table.update(ids[at], vecs[at], float(t))
        now = time.time()
        for _, _, stamp in latest.values():
            if stamp is not None and stamp > 0:
                self.metrics.freshness.observe(max(0.0, now - stamp / 1000.0))
        self.messages += good
        self.metrics.ingested.inc(good)
        self.metrics.nodes.set(len(self.table))

    def _decode(self, r) -> tuple:
        """``(node, vector, t, None)`` to apply, or ``(node, None, None, reason)`` for a row to
        refuse; raises on a row that does not decode (the caller dead-letters it in the exception's words)."""
        from ..connectors.sink import decode_embedding

        node = self._node(r.key)
        headers = {k: v for k, v in (r.headers or [])}
        ctype = headers.get("content-type", b"").decode() or None
        if r.value is None:
            return node, None, None, "message has no value (a tombstone); the node keeps its last vector"
        vec, t = decode_embedding(r.value, ctype)
        if "t" in headers:
            t = headers["t"].decode()
        t = np.nan if t is None else _time(t)
        if vec.ndim != 1 or not len(vec):
            return node, None, None, f"a vector of shape {vec.shape}, not one row of numbers"
        if not _finite_norm(vec):
            return node, None, None, self._refuse_non_finite(node, vec)
        if self.table is None:
            self.table = EmbeddingTable(len(vec), self.approximate)
        if vec.shape != (self.table.dim,):
            return node, None, None, f"a vector of shape {vec.shape} in a table of {self.table.dim}-d rows"
        return node, vec, t, None

    def _refuse_non_finite(self, node, vec: np.ndarray) -> str:
        """The reason a NaN, an infinity or a float32 norm that overflows is not stored (it would make every
        answer that touches the row, top-k scans included, unanswerable); said in the log once per node."""
        bad = int((~np.isfinite(vec)).sum())
        reason = f"a vector with {bad} non-finite values"
        if not bad:  # the table keeps float32 norms for cosine; summing the squares must not overflow
            reason = "a vector whose squared norm is not finite (entries beyond ~1.8e19)"
        if node not in self._warned:
            self._warned.add(node)
            log.warning("embeddings reader: node %r sent %s; refused, it keeps its last vector", node, reason)
        return reason

    def _node(self, key: bytes | None):
        if key is None:
            raise ConfigError("message has no key (the node id)")
        text = key.decode()
        if self.node_ids == "str":
            return text
        try:
            return int_id(text)
        except ValueError as exc:
            raise ConfigError(f"key {_short(text)} {exc} (serve.node_ids is 'int')") from None


def _short(text: str, most: int = 60) -> str:
    """``text`` quoted in a reason, cut short: a hostile row's key, or an error about it, may be megabytes."""
    return repr(text) if len(text) <= most else f"{text[:most]!r}..."


def _time(value) -> float:
    """A message's stream time: a finite number (a JSON number, or a header's text)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"t must be a number, got {type(value).__name__}")
    t = float(value)
    if not np.isfinite(t):
        raise ValueError(f"t must be finite, got {value!r}")
    return t


def _finite_norm(vec: np.ndarray) -> bool:
    """Whether ``vec``'s float32 norm, as the table computes it for cosine, is finite (no NaN, no inf)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.isfinite(np.linalg.norm(vec)))
