"""A real Prometheus server started on this machine, for ``otel-bridge demo --prometheus``.

The binary is ``$PROMETHEUS_BIN`` when set, else ``/usr/bin/prometheus`` (Debian's package ``prometheus``), else
``prometheus`` on ``PATH``. :class:`LocalPrometheus` starts it on a loopback port with a given ``prometheus.yml`` and a
data directory, waits until it is ready, and stops exactly the process it started, by PID (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Final

from otel_bridge.errors import ConfigError, PrometheusError

_log = logging.getLogger(__name__)

PROMETHEUS_BIN_ENV: Final = "PROMETHEUS_BIN"
DEBIAN_BINARY: Final = Path("/usr/bin/prometheus")
INSTALL_HINT: Final = (
    "install it (Debian/Ubuntu: `sudo apt-get install prometheus`; elsewhere the release binary from "
    "https://prometheus.io/download/)"
)


def find_prometheus_binary(
    environ: Mapping[str, str] | None = None, *, default: Path = DEBIAN_BINARY, search_path: bool = True
) -> Path:
    """The Prometheus server binary: ``$PROMETHEUS_BIN``, else ``default``, else ``prometheus`` on ``PATH``.

    Raises :class:`ConfigError` saying where it looked and how to install it.
    """
    environ = os.environ if environ is None else environ
    explicit = environ.get(PROMETHEUS_BIN_ENV)
    if explicit:
        path = Path(explicit)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise ConfigError(
            f"{PROMETHEUS_BIN_ENV}={explicit} is not an executable file: point it at the prometheus server binary, "
            f"or unset it to use {default}; to get one, {INSTALL_HINT}"
        )
    if default.is_file() and os.access(default, os.X_OK):
        return default
    found = shutil.which("prometheus", path=environ.get("PATH")) if search_path else None
    if found:
        return Path(found)
    raise ConfigError(
        f"no Prometheus server binary: {PROMETHEUS_BIN_ENV} is unset, {default} does not exist and `prometheus` is "
        f"not on PATH; {INSTALL_HINT} or set {PROMETHEUS_BIN_ENV}=/path/to/prometheus"
    )


def free_loopback_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalPrometheus:
    """``binary --config.file=CONFIG`` listening on ``127.0.0.1:port``, its data under ``data_dir``.

    Use as a context manager, or :meth:`start` / :meth:`stop`. Its output goes to ``log_path`` (default
    ``data_dir/prometheus.log``), whose end is quoted when it fails to start.
    """

    def __init__(
        self, binary: Path, config_file: Path, data_dir: Path, *, port: int = 0, log_path: Path | None = None
    ) -> None:
        self.binary = binary
        self.config_file = config_file
        self.data_dir = data_dir
        self.port = port or free_loopback_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path or data_dir / "prometheus.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The PID of the server this object started (``None`` before :meth:`start`)."""
        return None if self._process is None else self._process.pid

    def start(self, timeout_s: float = 30.0) -> LocalPrometheus:
        """Start the server and wait until ``/-/ready`` answers; raises :class:`PrometheusError` if it does not."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [
                    str(self.binary),
                    f"--config.file={self.config_file}",
                    f"--storage.tsdb.path={self.data_dir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches us, not it: we stop it ourselves
            )
        _log.info("started %s (pid %d) on %s", self.binary, self._process.pid, self.url)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                code = self._process.returncode
                raise PrometheusError(f"{self.binary} exited with status {code} at start: {self.log_tail()}")
            if self._get("/-/ready") is not None:
                return self
            time.sleep(0.1)
        self.stop()
        raise PrometheusError(f"{self.binary} was not ready within {timeout_s:.0f}s: {self.log_tail()}")

    def wait_for_targets(self, count: int, timeout_s: float = 30.0) -> None:
        """Wait until Prometheus has scraped ``count`` targets successfully (health ``up``)."""
        deadline = time.monotonic() + timeout_s
        up = 0
        while time.monotonic() < deadline:
            body = self._get("/api/v1/targets?state=active")
            if body is not None:
                targets = json.loads(body).get("data", {}).get("activeTargets", [])
                up = sum(1 for target in targets if target.get("health") == "up")
                if up >= count:
                    return
            time.sleep(0.2)
        raise PrometheusError(
            f"Prometheus at {self.url} scraped {up} of {count} target(s) successfully within {timeout_s:.0f}s; "
            f"see {self.url}/targets"
        )

    def _get(self, path: str) -> bytes | None:
        try:
            with urllib.request.urlopen(self.url + path, timeout=2) as response:
                return bytes(response.read()) if response.status == 200 else None
        except (urllib.error.URLError, OSError):
            return None

    def log_tail(self, lines: int = 5) -> str:
        """The last lines of the server's output, on one line."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no output)"
        return " | ".join(text.strip().splitlines()[-lines:]) or "(no output)"

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the server this object started, by PID: SIGTERM, then SIGKILL after ``timeout_s``. Idempotent."""
        process = self._process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _log.warning("prometheus (pid %d) ignored SIGTERM for %.0fs; killing it", process.pid, timeout_s)
            process.kill()
            process.wait(timeout=timeout_s)
        _log.info("stopped prometheus (pid %d)", process.pid)

    def __enter__(self) -> LocalPrometheus:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
