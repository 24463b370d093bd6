"""``EmbeddingService``: the embeddings topic followed into a table, answered over HTTP by uvicorn.

    with EmbeddingService(ServeConfig(port=8000), "localhost:9092", "embeddings") as service:
        service.url  # http://127.0.0.1:8000; see streamgnn.serve.app for the routes
        ...
    EmbeddingService(config, bootstrap, topic).run()  # blocking, as `streamgnn serve` runs it

``port=0`` takes a free port (``service.url`` names it once started). One line per
``config.log_every_s``: nodes served, messages/s, lag, dead letters, requests.
"""

from __future__ import annotations

import threading
import time

import uvicorn

from ..errors import ConnectorError
from ..progress import IntervalLog, IntervalRate
from .app import create_app
from .config import ServeConfig
from .metrics import ServiceMetrics
from .reader import EmbeddingsReader
from .scoring import LinkScorer
from .table import EmbeddingTable


class EmbeddingService:
    def __init__(
        self,
        config: ServeConfig,
        bootstrap_servers: str,
        topic: str,
        *,
        table: EmbeddingTable | None = None,
        **consumer_config,
    ) -> None:
        self.config = config
        self.metrics = ServiceMetrics()
        self.reader = EmbeddingsReader(
            bootstrap_servers, topic, table=table, approximate=config.approximate_topk(),
            node_ids=config.node_ids, metrics=self.metrics,
            **consumer_config,
        )  # fmt: skip
        self.scorer = LinkScorer(config.checkpoint_dir)
        self.app = create_app(config, self.reader, self.scorer)
        self._server = uvicorn.Server(
            uvicorn.Config(
                self.app, host=config.host, port=config.port, log_level="warning", access_log=False,
                timeout_graceful_shutdown=5,
            )
        )  # fmt: skip
        self._thread: threading.Thread | None = None
        self._log: IntervalLog | None = None
        self._rate = IntervalRate()

    @property
    def port(self) -> int:
        servers = getattr(self._server, "servers", None) or []
        for server in servers:
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        return self.config.port

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.config.host in ("0.0.0.0", "::", "") else self.config.host
        return f"http://{host}:{self.port}"

    def _status(self) -> str:
        count = self.reader.messages
        table = self.reader.table
        lag = sum(self.reader.lag.values())
        dead = sum(
            s.value
            for m in self.metrics.dead_letters.collect()
            for s in m.samples
            if s.name.endswith("_total")
        )
        requests = sum(
            s.value for m in self.metrics.requests.collect() for s in m.samples if s.name.endswith("_count")
        )
        rate = self._rate(count)
        served = 0 if table is None else len(table)
        line = (
            f"{served:,} nodes served; {rate:,.0f} embeddings/s; lag {lag:,} messages; "
            f"{int(dead):,} dead letters; {int(requests):,} requests"
        )
        return line + (f"; error: {self.reader.error}" if self.reader.error else "")

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout_s: float = 60.0) -> EmbeddingService:
        """Start the reader and the HTTP server in background threads; returns once the port listens."""
        self.reader.start()
        self._thread = threading.Thread(target=self._server.run, name="streamgnn-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive():
                self.reader.stop()
                raise ConnectorError(
                    f"the HTTP server did not start on {self.config.host}:{self.config.port}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise ConnectorError(f"the HTTP server did not start within {timeout_s:g} s")
            time.sleep(0.02)
        self._log = IntervalLog("serve", self._status, self.config.log_every_s)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join()
        self.reader.stop()
        if self._log is not None:
            self._log.stop()

    def run(self) -> None:
        """Serve until interrupted (SIGINT/SIGTERM: uvicorn's own handling), then stop the reader."""
        self.reader.start()
        self._log = IntervalLog("serve", self._status, self.config.log_every_s)
        print(f"serving embeddings of topic {self.reader.topic!r} on {self.url}", flush=True)
        try:
            self._server.run()
        finally:
            self.reader.stop()
            self._log.stop()
        if not self._server.started:
            raise ConnectorError(f"could not listen on {self.config.host}:{self.config.port} (in use?)")

    def __enter__(self) -> EmbeddingService:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
