"""An exporter served by prometheus_client's own handler (``start_http_server``), as an engine using the library's
exposition serves its metrics: it negotiates the content type with the scraper (``choose_encoder``), so a Prometheus
2.x or a Prometheus 3 with ``metric_name_validation_scheme: legacy`` is answered OpenMetrics with the colons of sample
names escaped to ``_`` (prometheus_client 0.23 and later), a Prometheus 3 with its defaults keeps them, and a scraper
asking for ``text/plain; version=0.0.4`` gets the names as registered.

The registry holds vLLM-named metrics (``vllm:generation_tokens`` counter, ``vllm:time_to_first_token_seconds``
histogram, ``vllm:num_requests_running`` gauge), or the same under another prefix (``prefix="ray_vllm_"``: the names
vLLM's ``RayPrometheusStatLogger`` gets through Ray's metrics agent). Bound to 127.0.0.1 on a free port; stopped by
:meth:`ClientExporter.stop` (also on leaving a ``with`` block).
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Self
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.metrics_core import Metric

from tests.helpers.http_servers import free_port

MODEL = "tiny"
SCRAPE_TIMEOUT_S = 10.0
TTFT_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0)


class ClientExporter:
    """vLLM-named metrics in their own registry, served by ``prometheus_client.start_http_server``."""

    def __init__(self, prefix: str = "vllm:") -> None:
        self.registry = CollectorRegistry()
        labels = ["model_name"]
        self.tokens = Counter(f"{prefix}generation_tokens", "Generation tokens", labels, registry=self.registry)
        self.ttft = Histogram(
            f"{prefix}time_to_first_token_seconds",
            "Time to first token",
            labels,
            buckets=TTFT_BUCKETS,
            registry=self.registry,
        )
        self.running = Gauge(f"{prefix}num_requests_running", "Requests running", labels, registry=self.registry)
        self.scrapes = 0
        self._scraped = threading.Condition()
        self.registry.register(_ScrapeCounter(self))
        self.port = free_port()
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def hostport(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Self:
        self._server, self._thread = start_http_server(self.port, addr="127.0.0.1", registry=self.registry)
        return self

    def complete(self, tokens: float, ttft_s: float) -> None:
        """One finished request: ``tokens`` generated, its first after ``ttft_s``."""
        self.tokens.labels(MODEL).inc(tokens)
        self.ttft.labels(MODEL).observe(ttft_s)

    def set_running(self, value: float) -> None:
        self.running.labels(MODEL).set(value)

    def wait_for_scrapes(self, count: int = 2) -> None:
        """Block until ``count`` more scrapes have been answered: with 2, one was asked for after this call began."""
        with self._scraped:
            wanted = self.scrapes + count
            if not self._scraped.wait_for(lambda: self.scrapes >= wanted, SCRAPE_TIMEOUT_S):
                raise AssertionError(f"{self.hostport} answered {self.scrapes} scrapes, expected {wanted}")

    def _count_scrape(self) -> None:
        with self._scraped:
            self.scrapes += 1
            self._scraped.notify_all()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class _ScrapeCounter:
    """A collector with no metrics that counts the registry's collections: one per page served."""

    def __init__(self, exporter: ClientExporter) -> None:
        self._exporter = exporter

    def collect(self) -> list[Metric]:
        self._exporter._count_scrape()
        return []
