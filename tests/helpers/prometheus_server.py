"""A real Prometheus server (the Debian package's binary) for integration tests.

Started on a free loopback port with a generated config and a short scrape interval, its data in a temporary
directory; stopped by PID (terminate, then kill) even when the test fails.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import requests
import yaml

from tests.helpers.http_servers import free_port


def prometheus_binary() -> str:
    """Path of the ``prometheus`` binary (``$PROMETHEUS_BIN`` or the one on PATH); fails with the fix when absent."""
    binary = os.environ.get("PROMETHEUS_BIN") or shutil.which("prometheus")
    if not binary:
        raise RuntimeError(
            "the prometheus binary is missing: run `make test` (installs the Debian package `prometheus`) "
            "or set PROMETHEUS_BIN"
        )
    return binary


class PrometheusServer:
    """``prometheus`` scraping ``targets`` (``host:port``) every ``scrape_interval_s`` seconds, on 127.0.0.1.

    ``rules`` is a rule file's content (``groups: [...]``), loaded from ``rules.yml`` beside the config.
    ``enable_lifecycle`` starts it with ``--web.enable-lifecycle``, so ``POST /-/reload`` re-reads
    :attr:`config_path` (what verl's ``update_prometheus_config`` does after rewriting that file). ``remote_write``
    starts it with ``--web.enable-remote-write-receiver`` (``tests/helpers/remote_write.py`` pushes to it).
    """

    def __init__(
        self,
        workdir: Path,
        targets: Sequence[str] = (),
        *,
        scrape_interval_s: float = 1.0,
        extra_scrape_configs: Sequence[dict[str, Any]] = (),
        port: int | None = None,
        config_override: dict[str, Any] | None = None,
        rules: dict[str, Any] | None = None,
        enable_lifecycle: bool = False,
        remote_write: bool = False,
    ) -> None:
        self.workdir = workdir
        self.config_path = workdir / "prometheus.yml"
        self.enable_lifecycle = enable_lifecycle
        self.remote_write = remote_write
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.targets = list(targets)
        self.scrape_interval_s = scrape_interval_s
        self.extra_scrape_configs = list(extra_scrape_configs)
        self.config_override = config_override
        self.rules = rules
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "prometheus.log"

    def config(self) -> dict[str, Any]:
        """The generated prometheus.yml, or ``config_override`` as given (then targets and intervals are unused)."""
        if self.config_override is not None:
            return self.config_override
        interval = f"{int(self.scrape_interval_s * 1000)}ms"
        scrape_configs: list[dict[str, Any]] = []
        if self.targets:
            scrape_configs.append(
                {"job_name": "rollout", "static_configs": [{"targets": self.targets}], "scrape_timeout": interval}
            )
        scrape_configs.extend(self.extra_scrape_configs)
        config: dict[str, Any] = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": scrape_configs,
        }
        if self.rules is not None:
            config["rule_files"] = ["rules.yml"]
        return config

    def start(self, timeout_s: float = 30.0) -> PrometheusServer:
        """Start the server and wait until it is ready."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        config_path = self.config_path
        config_path.write_text(yaml.safe_dump(self.config()), encoding="utf-8")
        if self.rules is not None:
            (self.workdir / "rules.yml").write_text(yaml.safe_dump(self.rules, sort_keys=False), encoding="utf-8")
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                prometheus_binary(),
                f"--config.file={config_path}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
                *(["--web.enable-lifecycle"] if self.enable_lifecycle else []),
                *(["--web.enable-remote-write-receiver"] if self.remote_write else []),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.process.returncode}: {self.log_tail()}")
            try:
                if requests.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"prometheus did not become ready within {timeout_s}s: {self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        """The end of the server's log."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def wait_for_samples(self, expr: str, count: int = 2, timeout_s: float = 30.0) -> None:
        """Wait until every target is up and ``expr`` has at least ``count`` samples per series in the last minute."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            data = self.query(f"min(count_over_time({expr}[1m]))")
            up = self.query("min(up)")
            if data and up and float(data[0]["value"][1]) >= count and float(up[0]["value"][1]) == 1.0:
                return
            time.sleep(self.scrape_interval_s / 2)
        raise RuntimeError(f"no samples of {expr} after {timeout_s}s: {self.log_tail()}")

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query's result list (raises on an error answer)."""
        params: dict[str, str] = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        response = requests.get(f"{self.url}/api/v1/query", params=params, timeout=10)
        body = response.json()
        if body.get("status") != "success":
            raise RuntimeError(f"query {expr!r} failed: {body}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def stop(self) -> None:
        """Terminate the server by PID (kill after 10 s)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
