"""A real single-node VictoriaMetrics for integration tests: built from its Go module (``make peer-victoriametrics``).

Started on a free loopback port with its data in ``workdir``, stopped by PID even when the test fails (the process
handling of :class:`tests.helpers.prometheus_server.ServerProcess`). It answers the Prometheus query API
(``/api/v1/query``, ``/api/v1/query_range``, ...), takes remote write at ``/api/v1/write`` (always on) and, with
``targets``, scrapes them itself (``-promscrape.config``, a Prometheus-style scrape config). What differs from
Prometheus for a reader of windows: ``-search.latencyOffset`` (30 s by default) hides the newest samples from queries
that do not pass ``latency_offset``, and ``-search.maxQueryLen`` (16 KiB) bounds one query's size.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.helpers.peers import VICTORIAMETRICS, peer_binary
from tests.helpers.prometheus_server import ServerProcess

__all__ = ["VictoriaMetricsServer", "victoria_metrics_binary"]


def victoria_metrics_binary() -> str:
    """Path of the ``victoria-metrics`` peer; fails the calling test with the make target when it is not built."""
    return str(peer_binary(VICTORIAMETRICS, "victoria-metrics"))


class VictoriaMetricsServer(ServerProcess):
    """``victoria-metrics`` on 127.0.0.1, scraping ``targets`` (``host:port``) every ``scrape_interval_s`` seconds.

    ``latency_offset_s`` is ``-search.latencyOffset`` (VictoriaMetrics' default is 30 s; tests that read the newest
    samples set it small), ``retention`` is ``-retentionPeriod`` (1 day, the least it takes), ``max_query_len`` is
    ``-search.maxQueryLen`` when given, ``extra_flags`` are passed as they are.
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
    ) -> None:
        super().__init__(workdir, port, "/health")
        self.targets = list(targets)
        self.scrape_interval_s = scrape_interval_s
        self.latency_offset_s = latency_offset_s
        self.retention = retention
        self.max_query_len = max_query_len
        self.extra_flags = list(extra_flags)
        self.scrape_config_path = workdir / "scrape.yml"

    def scrape_config(self) -> dict[str, Any]:
        """The ``-promscrape.config`` file: one job ``rollout`` scraping the targets."""
        interval = f"{int(self.scrape_interval_s * 1000)}ms"
        return {
            "global": {"scrape_interval": interval},
            "scrape_configs": [
                {"job_name": "rollout", "static_configs": [{"targets": self.targets}], "scrape_timeout": interval}
            ],
        }

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
