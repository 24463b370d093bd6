"""``EmbeddingService``: the embeddings topic followed into a table, answered over HTTP by uvicorn.

    with EmbeddingService(ServeConfig(port=8000), "localhost:9092", "embeddings") as service:
        service.url  # http://127.0.0.1:8000; see streamgnn.serve.app for the routes
        ...
    EmbeddingService(config, bootstrap, topic).run()  # blocking, as `streamgnn serve` runs it

``store``: the trainer's store, when the service runs in the trainer's process, so that ``/score`` can
read pair features (``streamgnn.serve.scoring``). ``port=0`` takes a free port (``service.url`` names it
once started; ``run`` prints it). With ``ssl_keyfile``/``ssl_certfile`` it serves HTTPS (uvicorn's TLS).
One line per ``config.log_every_s``: nodes served, messages/s, lag, dead letters, requests.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from typing import TYPE_CHECKING

import uvicorn

from ..embeddings.table import EmbeddingTable
from ..errors import ConfigError, ConnectorError
from ..progress import IntervalLog, IntervalRate
from .app import create_app
from .config import ServeConfig
from .metrics import ServiceMetrics
from .predict import TaskPredictor
from .reader import EmbeddingsReader
from .scoring import LinkScorer

if TYPE_CHECKING:
    from ..store import TemporalGraphStore

_HEADER_ROOM = 16 * 1024  # for the headers, on top of serve.max_url_bytes (uvicorn's own default in all)


class EmbeddingService:
    def __init__(
        self,
        config: ServeConfig,
        bootstrap_servers: str,
        topic: str,
        *,
        table: EmbeddingTable | None = None,
        store: TemporalGraphStore | None = None,
        **consumer_config,
    ) -> None:
        self.config = config
        self.metrics = ServiceMetrics()
        self.reader = EmbeddingsReader(
            bootstrap_servers, topic, table=table, approximate=config.approximate_topk(),
            node_ids=config.node_ids, metrics=self.metrics,
            **consumer_config,
        )  # fmt: skip
        self.scorer = LinkScorer(config.checkpoint_dir, store)
        self.predictor = TaskPredictor(config.checkpoint_dir)
        self.app = create_app(config, self.reader, self.scorer, self.predictor)
        self._server = uvicorn.Server(
            uvicorn.Config(
                self.app, host=config.host, port=config.port, log_level="warning", access_log=False,
                timeout_graceful_shutdown=5, ssl_keyfile=config.ssl_keyfile, ssl_certfile=config.ssl_certfile,
                # the request line must fit h11's buffer for RequestGuard to answer a long URL with a 414
                h11_max_incomplete_event_size=config.max_url_bytes + _HEADER_ROOM,
            )
        )  # fmt: skip
        try:  # uvicorn would load the TLS files in its thread, where a bad one is only a traceback
            self._server.config.load()
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"serve.ssl_certfile {config.ssl_certfile} / ssl_keyfile {config.ssl_keyfile}: {exc}"
            ) from None
        self._socket: socket.socket | None = None
        self._port = config.port
        self._thread: threading.Thread | None = None
        self._log: IntervalLog | None = None
        self._rate = IntervalRate()

    @property
    def port(self) -> int:
        """The port bound (with ``port=0``, the one the system chose), once started."""
        return self._port

    @property
    def url(self) -> str:
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(self.config.host, self.config.host)
        host = f"[{host}]" if ":" in host else host
        return f"{self.config.scheme}://{host}:{self.port}"

    def _bind(self) -> list[socket.socket]:
        """Listen before serving, so that ``port`` and the start-up line name the port actually bound (a
        free one for ``port=0``) and a port in use is an error at once."""
        host = self.config.host
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self._socket = socket.create_server((host, self.config.port), family=family, backlog=2048)
        except OSError as exc:
            raise ConnectorError(
                f"cannot listen on {host}:{self.config.port}: {exc.strerror or exc}"
            ) from None
        self._port = int(self._socket.getsockname()[1])
        return [self._socket]

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
        sockets = self._bind()
        self.reader.start()
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": sockets}, name="streamgnn-http", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive():
                self.reader.stop()
                self._close()
                raise ConnectorError(f"the HTTP server did not start on {self.url}")
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
        self._close()

    def _close(self) -> None:
        if self._socket is not None:
            self._socket.close()

    def run(self) -> None:
        """Serve until interrupted (SIGINT/SIGTERM: uvicorn's own handling), then stop the reader."""
        sockets = self._bind()
        self.reader.start()
        self._log = IntervalLog("serve", self._status, self.config.log_every_s)
        print(f"serving embeddings of topic {self.reader.topic!r} on {self.url}", flush=True)
        try:
            self._server.run(sockets=sockets)
        except KeyboardInterrupt:  # uvicorn raises the SIGINT it caught again once it has shut down
            pass
        finally:
            self.reader.stop()
            self._log.stop()
            self._close()
        if not self._server.started:
            raise ConnectorError(f"the HTTP server did not start on {self.url}")

    def __enter__(self) -> EmbeddingService:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
