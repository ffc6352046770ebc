"""A real single-node VictoriaMetrics for integration tests: built from its Go module (``make peer-victoriametrics``).

Started on a free loopback port with its data in ``workdir``, stopped by PID even when the test fails (the process
handling of :class:`tests.helpers.prometheus_server.ServerProcess`). It answers the Prometheus query API
(``/api/v1/query``, ``/api/v1/query_range``, ...), takes remote write at ``/api/v1/write`` (always on) and, with
``targets``, scrapes them itself (``-promscrape.config``, a Prometheus-style scrape config). What differs from
Prometheus for a reader of windows: ``-search.latencyOffset`` (30 s by default) hides the newest samples from queries
that do not pass ``latency_offset``, and ``-search.maxQueryLen`` (16 KiB) bounds one query's size.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import requests
import yaml

from tests.helpers.peers import VICTORIAMETRICS, peer_binary
from tests.helpers.prometheus_server import ServerProcess

__all__ = ["VM_USER_AGENT", "Importer", "VictoriaMetricsServer", "import_text", "victoria_metrics_binary"]


VM_USER_AGENT = "vm_promscrape"  # what VictoriaMetrics' scrapes send (lib/promscrape/client.go)


def victoria_metrics_binary() -> str:
    """Path of the ``victoria-metrics`` peer; fails the calling test with the make target when it is not built."""
    return str(peer_binary(VICTORIAMETRICS, "victoria-metrics"))


class VictoriaMetricsServer(ServerProcess):
    """``victoria-metrics`` on 127.0.0.1, scraping ``targets`` (``host:port``) every ``scrape_interval_s`` seconds.

    ``latency_offset_s`` is ``-search.latencyOffset`` (VictoriaMetrics' default is 30 s; tests that read the newest
    samples set it small), ``retention`` is ``-retentionPeriod`` (1 day, the least it takes), ``max_query_len`` is
    ``-search.maxQueryLen`` when given, ``extra_flags`` are passed as they are. ``user_agent`` replaces the
    ``User-Agent`` its scrapes send (VictoriaMetrics' own ``vm_promscrape``; a scrape config's ``headers`` override it),
    so the targets can tell two of them scraping them apart.
    """

    name = "victoria-metrics"

    def __init__(
        self,
        workdir: Path,
        targets: Sequence[str] = (),
        *,
        scrape_interval_s: float = 1.0,
        latency_offset_s: float = 30.0,
        retention: str = "1d",
        max_query_len: str | None = None,
        port: int | None = None,
        extra_flags: Sequence[str] = (),
        user_agent: str | None = None,
    ) -> None:
        super().__init__(workdir, port, "/health")
        self.targets = list(targets)
        self.scrape_interval_s = scrape_interval_s
        self.latency_offset_s = latency_offset_s
        self.retention = retention
        self.max_query_len = max_query_len
        self.extra_flags = list(extra_flags)
        self.user_agent = user_agent or VM_USER_AGENT
        self.scrape_config_path = workdir / "scrape.yml"

    def rollout_targets(self) -> Sequence[str]:
        return self.targets

    def scrape_config(self) -> dict[str, Any]:
        """The ``-promscrape.config`` file: one job ``rollout`` scraping the targets."""
        interval = f"{int(self.scrape_interval_s * 1000)}ms"
        job: dict[str, Any] = {
            "job_name": "rollout",
            "static_configs": [{"targets": self.targets}],
            "scrape_timeout": interval,
        }
        if self.user_agent != VM_USER_AGENT:
            job["headers"] = [f"User-Agent: {self.user_agent}"]
        return {"global": {"scrape_interval": interval}, "scrape_configs": [job]}

    def command(self) -> list[str]:
        """The command line :meth:`start` runs."""
        return [
            victoria_metrics_binary(),
            f"-httpListenAddr=127.0.0.1:{self.port}",
            f"-storageDataPath={self.workdir / 'data'}",
            f"-retentionPeriod={self.retention}",
            f"-search.latencyOffset={int(self.latency_offset_s * 1000)}ms",
            "-loggerLevel=WARN",
            *([f"-promscrape.config={self.scrape_config_path}"] if self.targets else []),
            *([f"-search.maxQueryLen={self.max_query_len}"] if self.max_query_len else []),
            *self.extra_flags,
        ]

    def prepare(self) -> None:
        if self.targets:
            self.scrape_config_path.write_text(yaml.safe_dump(self.scrape_config()), encoding="utf-8")

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query's result list, read with ``nocache=1`` (the newest samples, not those of
        ``-search.latencyOffset`` ago); :meth:`query_as_is` without it."""
        return self._query(expr, at, {"nocache": "1"})

    def query_as_is(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query's result list as a client that knows nothing of VictoriaMetrics asks it."""
        return self._query(expr, at, {})

    def _query(self, expr: str, at: float | None, extra: dict[str, str]) -> list[dict[str, Any]]:
        params = {"query": expr, **extra, **({"time": f"{at:.3f}"} if at is not None else {})}
        body = requests.get(f"{self.url}/api/v1/query", params=params, timeout=10).json()
        if body.get("status") != "success":
            raise RuntimeError(f"query {expr!r} failed: {body}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result


def import_text(url: str, text: str, *, job: str, instance: str) -> None:
    """Push a text exposition into the VictoriaMetrics at ``url`` (``/api/v1/import/prometheus``, ``job`` and
    ``instance`` added): samples without a timestamp are stamped on arrival, so what ``text`` read before it was sent
    carries a later time."""
    params = [("extra_label", f"job={job}"), ("extra_label", f"instance={instance}")]
    response = requests.post(f"{url}/api/v1/import/prometheus", params=params, data=text.encode(), timeout=5)
    response.raise_for_status()


class Importer:
    """Pushes what ``/metrics`` endpoints serve into VictoriaMetrics every ``interval_s`` seconds, as a push pipeline
    would (``/api/v1/import/prometheus``, stamped on arrival, ``job`` and ``instance`` added): series no scrape target
    of VictoriaMetrics serves, so its targets list knows nothing of them. Stopped (the thread joined) by :meth:`stop`
    or on leaving a ``with`` block; a failed push ends the thread and :meth:`stop` raises it."""

    def __init__(self, url: str, endpoints: Sequence[tuple[str, str]], *, interval_s: float = 1.0, job: str = "push"):
        """``endpoints``: ``(metrics URL, instance label)`` pairs."""
        self.url = url
        self.endpoints = list(endpoints)
        self.interval_s = interval_s
        self.job = job
        self.pushes = 0
        self._stop = threading.Event()
        self._error: Exception | None = None
        self._thread = threading.Thread(target=self._run, name="test-vm-import", daemon=True)

    def start(self) -> Importer:
        """Start pushing (the first push at once)."""
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for metrics_url, instance in self.endpoints:
                    import_text(self.url, requests.get(metrics_url, timeout=5).text, job=self.job, instance=instance)
                self.pushes += 1
                self._stop.wait(self.interval_s)
        except (requests.RequestException, OSError) as exc:  # handed to stop(), which raises it in the test
            self._error = exc

    def stop(self) -> None:
        """Stop pushing; raises what ended the thread early, if anything did."""
        self._stop.set()
        self._thread.join(timeout=10)
        if self._error is not None:
            raise RuntimeError(f"pushing into {self.url} failed") from self._error

    def __enter__(self) -> Importer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
