"""With the real ``opentelemetry-instrumentation-requests`` instrumenting ``requests`` in the trainer, the bridge's own
HTTP calls (start-up checks, Prometheus queries, ``/metrics`` scrapes on the sampler and its pool, a tracker's uploads
on its delivery thread) produce no span and no ``http.client`` measurement; the trainer's own request still does.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from opentelemetry.instrumentation.requests import RequestsInstrumentor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_bridge import Bridge, StepRecord
from tests.conftest import Replica
from tests.helpers.backends import BackendDouble
from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer, prom_vector


@dataclass
class Instrumented:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader

    def span_urls(self) -> list[str]:
        return [
            str((s.attributes or {}).get("http.url") or (s.attributes or {}).get("url.full"))
            for s in self.spans.get_finished_spans()
        ]

    def http_measurements(self) -> int:
        data = self.metrics.get_metrics_data()
        if data is None:
            return 0
        return sum(
            int(point.count)
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            if "requests" in sm.scope.name
            for metric in sm.metrics
            for point in metric.data.data_points
            if isinstance(point, HistogramDataPoint)
        )


@pytest.fixture
def instrumented() -> Iterator[Instrumented]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    instrumentor = RequestsInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    try:
        yield Instrumented(spans, reader)
    finally:
        instrumentor.uninstrument()
        meter_provider.shutdown()
        tracer_provider.shutdown()


def uploading_backend(url: str) -> BackendDouble:
    """A tracker that uploads each record with ``requests``, like a hosted tracker's client."""

    def upload(record: StepRecord) -> None:
        requests.post(url, json={"step": record.step, **record.values}, timeout=10).raise_for_status()

    return BackendDouble("uploading", on_write=upload)


def run_steps(bridge: Bridge, steps: int) -> list[dict[str, float]]:
    for step in range(steps):
        with bridge.step(step):
            bridge.log({"loss": float(step)}, step=step)
    return [bridge.collect(step) for step in range(steps)]


def assert_only_the_trainers_request_is_recorded(instrumented: Instrumented, control_url: str) -> None:
    before = instrumented.span_urls()
    assert before == [], f"the bridge's own HTTP calls were recorded: {before}"
    assert instrumented.http_measurements() == 0
    requests.get(control_url, timeout=10)  # the trainer's own call: the instrumentation is live
    assert instrumented.span_urls() == [control_url]
    assert instrumented.http_measurements() == 1


def test_scrape_path_and_tracker_uploads_are_not_instrumented(tmp_path: Path, instrumented: Instrumented) -> None:
    replica = Replica()
    tracker = ScriptedHTTPServer(lambda request: Response(200, b"{}", {"Content-Type": "application/json"}))
    try:
        config: dict[str, Any] = {
            "scrape": {"targets": [replica.url], "sample_interval_s": 0.05},
            "metrics": [{"preset": "vllm"}],
            "trackers": [{"type": "jsonl"}],
            "run": {"name": "scrape", "dir": str(tmp_path)},
        }
        with Bridge.from_config(config, backends=[uploading_backend(f"{tracker.url}/log")]) as bridge:
            records = run_steps(bridge, 3)
            replica.wait_for_scrapes(10)  # boundaries and the sampler's own rounds
        assert [r["loss"] for r in records] == [0.0, 1.0, 2.0]
        assert len([r for r in tracker.requests if r.method == "POST"]) == 3
        assert_only_the_trainers_request_is_recorded(instrumented, replica.url)
    finally:
        tracker.close()
        replica.stop()


def test_promql_path_is_not_instrumented(tmp_path: Path, instrumented: Instrumented) -> None:
    def answer(request: RecordedRequest) -> Response:
        if "unless count_over_time" in (request.param("query") or ""):
            return prom_vector([])  # no targets: which series have not arrived after the window's end (every one has)
        return prom_vector([({"otel_bridge_q": "0/last"}, 3.0)])

    with ScriptedHTTPServer(answer) as prometheus:
        config: dict[str, Any] = {
            "prometheus": {"url": prometheus.url, "retries": 0},
            "metrics": [{"name": "vllm:num_requests_running", "type": "gauge", "stats": ["last"]}],
            "trackers": [{"type": "jsonl"}],
            "run": {"name": "promql", "dir": str(tmp_path)},
        }
        with Bridge.from_config(config) as bridge:
            records = run_steps(bridge, 3)
        queries = len(prometheus.requests)
        assert all(r["rollout/vllm/num_requests_running/last"] == 3.0 for r in records)
        assert queries >= 3, "start-up checks and one query per step reached Prometheus"
        assert_only_the_trainers_request_is_recorded(instrumented, f"{prometheus.url}/api/v1/status/buildinfo")
