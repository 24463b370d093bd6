"""Kafka sinks for model output: node embeddings, link predictions and a labelled task's predictions.

Embeddings are keyed by node id, so a compacted topic (``create_topic(..., compacted=True)``) keeps the
latest vector of every node and serves as a lookup table any Kafka client can read. Predictions are keyed
by the ``[src, dst]`` pair for the same reason, a node label's prediction by its node.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import numpy as np

from ..errors import ConfigError
from ..events import encodes_utf8
from .kafka import CONTENT_TYPE_HEADER, FORMATS, Producer
from .kafka.admin import missing_topic
from .kafka.reach import DEFAULT_CONNECT_TIMEOUT_S

CONTENT_EMBEDDING_JSON = "application/json"
CONTENT_EMBEDDING_F32 = "application/x-streamgnn-embedding-f32"  # the vector as little-endian float32


def _ids(values) -> list:
    ids = np.asarray(values)
    if ids.ndim != 1:
        raise ConfigError(f"node ids must be 1-D, got shape {ids.shape}")
    out = ids.tolist()
    if ids.dtype.kind in "OU":  # message keys are UTF-8: refuse an id that is not before anything is sent
        bad = next((v for v in out if isinstance(v, str) and not encodes_utf8(v)), None)
        if bad is not None:
            raise ConfigError(f"node id {bad!a} holds a lone surrogate, which is not Unicode text")
    return out


def decode_embedding(value: bytes, content_type: str | None) -> tuple[np.ndarray, float | None]:
    """A message of the embeddings topic as ``(vector, t)`` (the node id is the message key)."""
    if content_type == CONTENT_EMBEDDING_F32:
        return np.frombuffer(value, dtype="<f4").astype(np.float32), None
    obj = json.loads(value)
    return np.asarray(obj["embedding"], dtype=np.float32), obj.get("t")


BATCH_BYTES = 256 * 1024  # kafka-python's batch_size for the sink's producer unless given (see KafkaSink)


class KafkaSink:
    """Publishes embeddings to ``embeddings_topic`` and predictions (of links, or of a task's labels) to
    ``predictions_topic``.

    ``fmt="json"`` writes ``{"node", "t", "embedding"}`` objects; ``"binary"`` writes the float32 vector
    alone (content type ``application/x-streamgnn-embedding-f32``, time in a ``t`` header), 4 bytes per
    dimension. Predictions are always JSON: ``{"src", "dst", "t", "score"}`` for a link, a label's as
    ``publish_label_predictions`` says. Producer settings pass through unchanged, but for kafka-python's
    ``batch_size``: ``BATCH_BYTES`` unless given (a live job publishes a message per refreshed node, about
    one per five events; its 16 KiB default batch woke the client's sender thread every few dozen rows,
    58 us of CPU per row against 35 us: benchmarks/RESULTS.md, issue 32). Sends are retried through broker
    outages, and ``flush()`` waits for every ack. No broker answering within ``connect_timeout_s`` is a
    ``ConnectorError`` naming the addresses tried.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        embeddings_topic: str | None = None,
        predictions_topic: str | None = None,
        fmt: str = "json",
        backend: str = "kafka-python",
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        **producer_config,
    ) -> None:
        if fmt not in FORMATS:
            raise ConfigError(f"unknown embedding format {fmt!r}; use one of {FORMATS}")
        if embeddings_topic is None and predictions_topic is None:
            raise ConfigError("give embeddings_topic, predictions_topic or both")
        self.embeddings_topic, self.predictions_topic, self.fmt = embeddings_topic, predictions_topic, fmt
        if backend == "kafka-python":  # (never over the requests' own cap)
            cap = producer_config.get("max_request_size", BATCH_BYTES)
            producer_config = {"batch_size": min(BATCH_BYTES, cap), **producer_config}
        self._p = Producer(backend, bootstrap_servers, producer_config, connect_timeout_s=connect_timeout_s)
        try:
            for topic in (embeddings_topic, predictions_topic):
                if topic is not None and not self._p.partitions_for(topic):
                    flag = "--embeddings-topic" if topic == embeddings_topic else "--topic"
                    raise missing_topic(bootstrap_servers, topic, flag)
        except BaseException:
            self._p.close()
            raise

    def publish_embeddings(self, node_ids: Sequence, embeddings: np.ndarray, t: float | None = None) -> int:
        """One message per node (row ``i`` of ``embeddings`` for ``node_ids[i]``); returns the count."""
        if self.embeddings_topic is None:
            raise ConfigError("this sink has no embeddings_topic")
        ids = _ids(node_ids)
        emb = np.asarray(embeddings, dtype="<f4")
        if emb.ndim != 2 or len(emb) != len(ids):
            raise ConfigError(
                f"embeddings of shape {emb.shape} do not give one row for each of {len(ids)} nodes"
            )
        headers = [(CONTENT_TYPE_HEADER, CONTENT_EMBEDDING_JSON.encode())]
        if self.fmt == "binary":
            headers = [(CONTENT_TYPE_HEADER, CONTENT_EMBEDDING_F32.encode())]
            if t is not None:
                headers.append(("t", repr(float(t)).encode()))
            values = [row.tobytes() for row in emb]
        else:
            if not np.isfinite(emb).all():
                raise ConfigError(
                    "embeddings hold NaN or infinite values, which JSON cannot carry; use fmt='binary'"
                )
            extra = {} if t is None else {"t": float(t)}
            values = [
                json.dumps({"node": node, **extra, "embedding": row}, separators=(",", ":")).encode()
                for node, row in zip(ids, emb.tolist(), strict=True)
            ]
        for node, value in zip(ids, values, strict=True):
            self._p.send(self.embeddings_topic, value, key=str(node).encode(), headers=headers)
        return len(ids)

    def publish_predictions(
        self, src: Sequence, dst: Sequence, scores: Sequence, t: float | None = None
    ) -> int:
        """One JSON message per scored pair, keyed by ``[src, dst]``; returns the count."""
        s, d = _ids(src), _ids(dst)
        sc = np.asarray(scores, dtype=np.float64).tolist()
        if not len(s) == len(d) == len(sc):
            raise ConfigError(
                f"got {len(s)} sources, {len(d)} destinations and {len(sc)} scores; give one each"
            )
        if not all(map(math.isfinite, sc)):
            raise ConfigError("scores hold NaN or infinite values, which JSON cannot carry")
        extra = {} if t is None else {"t": float(t)}
        return self._send_json(
            [json.dumps([a, b]) for a, b in zip(s, d, strict=True)],
            [{"src": a, "dst": b, **extra, "score": score} for a, b, score in zip(s, d, sc, strict=True)],
        )

    def publish_label_predictions(
        self, node: Sequence, dst: Sequence | None, t: Sequence, predictions: Sequence[dict], **fields
    ) -> int:
        """One JSON message per label: ``{"node", "t", **prediction, **fields}`` keyed by the node, or for
        an edge's label (``dst`` given) ``{"src", "dst", "t", ...}`` keyed by ``[src, dst]`` as a link
        prediction is; ``predictions[i]``: what the task predicts for label ``i`` (``serve.predict``'s
        fields: a probability and label, class probabilities, or a value). Returns the count."""
        n, times = _ids(node), np.asarray(t, np.float64).tolist()
        d = None if dst is None else _ids(dst)
        if not len(n) == len(times) == len(predictions) or (d is not None and len(d) != len(n)):
            raise ConfigError(f"got {len(n)} nodes, {len(times)} times and {len(predictions)} predictions")
        if d is None:
            keys = [str(a) for a in n]
            ends = [{"node": a} for a in n]
        else:
            keys = [json.dumps([a, b]) for a, b in zip(n, d, strict=True)]
            ends = [{"src": a, "dst": b} for a, b in zip(n, d, strict=True)]
        return self._send_json(
            keys,
            [{**e, "t": ti, **p, **fields} for e, ti, p in zip(ends, times, predictions, strict=True)],
        )

    def _send_json(self, keys: list[str], values: list[dict]) -> int:
        """Each of ``values`` as one JSON message to ``predictions_topic``, keyed by ``keys[i]`` (UTF-8);
        a value JSON cannot carry (NaN, infinity) is refused before anything is sent."""
        if self.predictions_topic is None:
            raise ConfigError("this sink has no predictions_topic")
        try:
            encoded = [json.dumps(v, separators=(",", ":"), allow_nan=False).encode() for v in values]
        except ValueError:
            raise ConfigError("predictions hold NaN or infinite values, which JSON cannot carry") from None
        headers = [(CONTENT_TYPE_HEADER, b"application/json")]
        for key, value in zip(keys, encoded, strict=True):
            self._p.send(self.predictions_topic, value, key=key.encode(), headers=headers)
        return len(values)

    def flush(self, timeout_s: float = 120.0) -> None:
        """Block until everything published is acknowledged."""
        self._p.flush(timeout_s)

    def close(self) -> None:
        self._p.close()

    def __enter__(self) -> KafkaSink:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
