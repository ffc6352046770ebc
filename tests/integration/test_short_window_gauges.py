"""A step shorter than Prometheus' scrape interval may hold no gauge sample: the warning says so, and does not send
the user to check a metric name that is right (found against verl 0.9.1's 10 s interval)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from otel_bridge import Bridge
from tests.conftest import Replica
from tests.helpers.prometheus_server import PrometheusServer

pytestmark = pytest.mark.integration


def test_a_gauge_without_a_sample_in_a_short_step_is_explained(
    tmp_path: Path, replicas: list[Replica], caplog: pytest.LogCaptureFixture, prometheus_version: str
) -> None:
    metrics = [{"name": "vllm:num_requests_running", "type": "gauge", "stats": ["max"]}]
    # One target: Prometheus spreads several targets' scrapes over the interval.
    with PrometheusServer(
        tmp_path / "prom", [replicas[0].hostport], scrape_interval_s=4.0, version=prometheus_version
    ) as prometheus:
        prometheus.wait_for_samples("vllm:num_requests_running")
        config = {
            "prometheus": {"url": prometheus.url, "boundary": "samples"},
            "metrics": metrics,
            "run": {"dir": str(tmp_path / "runs")},
        }
        with caplog.at_level(logging.WARNING, logger="otel_bridge"), Bridge.from_config(config) as bridge:
            bridge.log({}, step=0)
            # Right after a scrape is stored, the next one is ~4 s away: a short step then holds no sample.
            before = latest_scrape(prometheus)
            while latest_scrape(prometheus) == before:
                time.sleep(0.05)
            with bridge.step(1):
                time.sleep(0.3)
            bridge.collect(1)
    record = bridge.record(1)
    assert record is not None
    assert not any(key.startswith("rollout/vllm/num_requests_running") for key in record.values)
    warnings = [r.getMessage() for r in caplog.records if "num_requests_running" in r.getMessage()]
    assert warnings, "no warning about the gauge"
    assert "no sample inside this" in warnings[0]
    assert "Prometheus samples every 4s" in warnings[0]
    assert "check its name" not in warnings[0]


def latest_scrape(prometheus: PrometheusServer) -> float:
    return max(float(s["value"][1]) for s in prometheus.query('timestamp(up{job="rollout"})'))
