"""Shared fixtures: simulated vLLM servers and a real Prometheus scraping them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from otel_bridge.simulation.http import MetricsHTTPServer
from otel_bridge.simulation.vllm import VLLMSimulator
from tests.helpers.prometheus_server import PrometheusServer

pytest_plugins = ["tests.ray_fixtures"]

# Property tests explore the same examples on every run (deterministic suite); no per-example deadline on 2 cores.
settings.register_profile("otel-bridge", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("otel-bridge")

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "vllm"  # copied from shared/fixtures/vllm (vLLM 0.32)


class Replica:
    """One simulated vLLM server: the simulator and the HTTP server exposing it."""

    def __init__(self, model_name: str = "tiny") -> None:
        self.sim = VLLMSimulator(model_name=model_name, engine="0")
        self.scrapes = 0
        self._scraped = threading.Condition()
        self.server = MetricsHTTPServer(self._render)
        self.server.start()

    def _render(self) -> bytes:
        body = self.sim.exposition()
        with self._scraped:
            self.scrapes += 1
            self._scraped.notify_all()
        return body

    def wait_for_scrapes(self, count: int, timeout_s: float = 10.0) -> None:
        """Block until the endpoint has served ``count`` scrapes in all (fails after ``timeout_s``)."""
        with self._scraped:
            if not self._scraped.wait_for(lambda: self.scrapes >= count, timeout_s):
                raise AssertionError(f"{self.url} served {self.scrapes} scrapes, expected {count}")

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def hostport(self) -> str:
        return self.url.split("//", 1)[1].split("/", 1)[0]

    def stop(self) -> None:
        self.server.stop()


@pytest.fixture
def replicas() -> Iterator[list[Replica]]:
    """Two simulated vLLM replicas with identical labels (as a real deployment has)."""
    started: list[Replica] = []
    try:
        for _ in range(2):
            started.append(Replica())
        yield started
    finally:
        for replica in started:
            replica.stop()


@pytest.fixture
def prometheus(tmp_path: Path, replicas: list[Replica]) -> Iterator[PrometheusServer]:
    """A real Prometheus scraping both replicas every second."""
    server = PrometheusServer(tmp_path / "prometheus", [r.hostport for r in replicas], scrape_interval_s=1.0)
    try:
        server.start()
        server.wait_for_samples("vllm:generation_tokens_total", count=2)
        yield server
    finally:
        server.stop()
