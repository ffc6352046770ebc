"""vLLM's Ray exporter path for real: metrics recorded as vLLM's ``RayPrometheusStatLogger`` records them reach
Prometheus through Ray's own metrics agent (the session's Ray cluster, tests/ray_fixtures.py), stored as
``ray_vllm_*``; the PromQL path, configured with vLLM's names, finds them there and reads each step's numbers under
the configured keys.

The metrics are Ray's ``ray.util.metrics`` instruments named as vLLM's wrappers name them
(``vllm/v1/metrics/ray_wrappers.py``: ``_get_sanitized_opentelemetry_name`` makes every character outside
``[a-zA-Z0-9_]`` a ``_``; tag keys the metric's labels plus ``ReplicaId``), recorded in this process (the session's Ray
driver). Ray's agent exports what its workers reported every few seconds, so each step waits until Prometheus holds
the step's figures before it ends: every step's truth is then exactly what was recorded in it, with one fact of Ray's:
its agent re-records each histogram observation at its bucket's midpoint (``open_telemetry_metric_recorder.py``,
``register_histogram_metric``: twice the last bound for ``+Inf``), so a histogram's ``_sum``, and the mean read from
it, are the midpoints' (:func:`midpoint`).
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from otel_bridge.producers.promql.producer import PromQLProducer
from otel_bridge.window import StepWindow
from tests.helpers.client_exporter import TTFT_BUCKETS
from tests.helpers.prometheus_server import PrometheusServer
from tests.integration.test_stored_name_forms import STEPS, assert_truth, producer_for, record_of

if TYPE_CHECKING:
    from tests.ray_fixtures import RayCluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.sleeps(5, reason="polls only: Ray's agent exports every few seconds, waited for by its figures"),
]

EXPORT_TIMEOUT_S = 60.0
TAGS = {"model_name": "tiny", "ReplicaId": ""}
_RECORDED: dict[str, float] = {"tokens": 0.0, "requests": 0.0, "running": 0.0}
_INSTRUMENTS: dict[str, Any] = {}


def sanitized(name: str) -> str:
    """vLLM's ``RayPrometheusMetric._get_sanitized_opentelemetry_name``."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def midpoint(value: float) -> float:
    """The value Ray's agent records an observation of ``value`` as: the midpoint of its bucket of
    :data:`TTFT_BUCKETS` (from 0 for the first; twice the last bound above it)."""
    lower = 0.0
    for bound in TTFT_BUCKETS:
        if value <= bound:
            return (lower + bound) / 2.0
        lower = bound
    return TTFT_BUCKETS[-1] * 2.0


def instruments() -> dict[str, Any]:
    """vLLM's three metrics as Ray instruments, made once per process (Ray keeps one instrument per name)."""
    if not _INSTRUMENTS:
        from ray.util.metrics import Counter, Gauge, Histogram

        keys = tuple(TAGS)
        _INSTRUMENTS["tokens"] = Counter(sanitized("vllm:generation_tokens"), "Generation tokens", tag_keys=keys)
        _INSTRUMENTS["ttft"] = Histogram(
            sanitized("vllm:time_to_first_token_seconds"), "TTFT", boundaries=list(TTFT_BUCKETS), tag_keys=keys
        )
        _INSTRUMENTS["running"] = Gauge(sanitized("vllm:num_requests_running"), "Running", tag_keys=keys)
    return _INSTRUMENTS


def record(requests: list[tuple[float, float]], running: float) -> None:
    made = instruments()
    for tokens, ttft in requests:
        made["tokens"].inc(tokens, tags=TAGS)
        made["ttft"].observe(ttft, tags=TAGS)
        _RECORDED["tokens"] += tokens
        _RECORDED["requests"] += 1
    made["running"].set(running, tags=TAGS)
    _RECORDED["running"] = running


def wait_until_stored(server: PrometheusServer) -> None:
    """Wait until Prometheus holds every figure recorded so far (Ray's agent exports them every few seconds)."""
    wanted = {
        "sum(ray_vllm_generation_tokens_total)": _RECORDED["tokens"],
        "sum(ray_vllm_time_to_first_token_seconds_count)": _RECORDED["requests"],
        # the gauge too: cc35 (Ray's agent exporting every second) stored a step's counters a scrape before its gauge
        "sum(ray_vllm_num_requests_running)": _RECORDED["running"],
    }
    deadline = time.monotonic() + EXPORT_TIMEOUT_S
    got: dict[str, float | None] = {}
    while time.monotonic() < deadline:
        got = {expr: next((float(r["value"][1]) for r in server.query(expr)), None) for expr in wanted}
        if got == wanted:
            server.wait_for_scrapes_after(time.time())
            return
        time.sleep(0.25)
    names = sorted({r["metric"]["__name__"] for r in server.query('{__name__=~".*vllm.*"}')})
    raise AssertionError(f"Prometheus holds {got}, not {wanted}, after {EXPORT_TIMEOUT_S}s; vLLM names: {names}")


def test_vllm_through_rays_metrics_agent_is_read_under_vllms_names(
    ray_cluster: RayCluster, tmp_path: Path, prometheus_version: str, caplog: pytest.LogCaptureFixture
) -> None:
    agent = f"127.0.0.1:{ray_cluster.metrics_export_port}"
    with PrometheusServer(tmp_path / "prometheus", [agent], version=prometheus_version) as server:
        record([(1.0, 0.01)], 0.0)  # the families exist before the run
        wait_until_stored(server)
        producer: PromQLProducer = producer_for(server)
        with caplog.at_level(logging.INFO, logger="otel_bridge"):
            producer.start()
        try:
            records = []
            start = time.time()
            producer.on_boundary(start)
            server.wait_for_scrapes_after(start)
            for step, (requests, running) in enumerate(STEPS):
                record(requests, running)
                wait_until_stored(server)
                end = time.time()
                producer.on_boundary(end)
                server.wait_for_scrapes_after(end)
                records.append(record_of(producer, StepWindow(step, start, end)))
                start = end
        finally:
            producer.close()
    assert_truth(records, observed=midpoint)
    assert "vllm:generation_tokens_total (metrics[0]) is stored as ray_vllm_generation_tokens_total" in caplog.text
