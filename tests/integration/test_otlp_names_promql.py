"""The trainer's metrics, configured by their OpenTelemetry names, read per step from a real Prometheus.

Two trainer ranks push ``trainer.tokens`` (a ``Counter`` of ``{token}``), ``trainer.step.duration`` (a ``Histogram`` in
``s``) and ``trainer.gpu.utilization`` (a ``Gauge`` of unit ``1``) to the collector, which writes them into Prometheus
as ``trainer_tokens_total``, ``trainer_step_duration_seconds_{bucket,sum,count}`` and ``trainer_gpu_utilization_ratio``
with one series per rank (``collector/otelcol.yaml``: remote write, resource attributes as labels). Here a small HTTP
server serves exactly those series (names written out, not computed, and without ``# TYPE`` lines: remote-written
series have no metadata in Prometheus) and a real Prometheus scrapes it every second. The bridge is configured with
``otlp:`` entries only and must report the sum over both ranks of what happened in each step.

Each step is quiet for longer than the scrape interval around its changes, so Prometheus' last sample before a
boundary is the state at the boundary (as in ``test_promql_pipeline.py``).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from otel_bridge import Bridge
from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer
from tests.helpers.prometheus_server import PrometheusServer

QUIET_S = 1.5
STEPS = 3
BOUNDS = (0.1, 0.5, 1.0)


class TrainerSeries:
    """What Prometheus would hold after the collector: one series per rank, named as the collector names them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tokens = {0: 0.0, 1: 0.0}
        self.utilization = {0: 0.0, 1: 0.0}
        self.durations: dict[int, list[float]] = {0: [], 1: []}

    def render(self, _request: RecordedRequest) -> Response:
        lines: list[str] = []
        with self.lock:
            for rank in (0, 1):
                labels = f'otel_bridge_rank="{rank}",service_name="trainer"'
                lines.append(f"trainer_tokens_total{{{labels}}} {self.tokens[rank]}")
                lines.append(f"trainer_gpu_utilization_ratio{{{labels}}} {self.utilization[rank]}")
                observed = self.durations[rank]
                for bound in BOUNDS:
                    count = sum(1 for value in observed if value <= bound)
                    lines.append(f'trainer_step_duration_seconds_bucket{{{labels},le="{bound}"}} {count}')
                lines.append(f'trainer_step_duration_seconds_bucket{{{labels},le="+Inf"}} {len(observed)}')
                lines.append(f"trainer_step_duration_seconds_sum{{{labels}}} {sum(observed)}")
                lines.append(f"trainer_step_duration_seconds_count{{{labels}}} {len(observed)}")
        body = ("\n".join(lines) + "\n").encode()
        return Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})

    def step(self, step: int) -> None:
        """Both ranks' work of one step, all at once."""
        with self.lock:
            self.tokens[0] += 100 * (step + 1)
            self.tokens[1] += 50 * (step + 1)
            self.utilization[0] = 0.5 + 0.1 * step
            self.utilization[1] = 0.25
            self.durations[0].append(0.3)
            self.durations[1].extend([0.05, 0.8])


@pytest.mark.integration
def test_trainer_metrics_by_otel_name_are_read_per_step(tmp_path: Path) -> None:
    series = TrainerSeries()
    with ScriptedHTTPServer(series.render) as target:
        hostport = target.url.split("://", 1)[1].rstrip("/")
        prometheus = PrometheusServer(tmp_path / "prometheus", [hostport], scrape_interval_s=1.0)
        try:
            prometheus.start()
            prometheus.wait_for_samples("trainer_tokens_total", count=2)
            config: dict[str, Any] = {
                "prometheus": {"url": prometheus.url, "scrape_interval_s": 1.0, "boundary": "samples"},
                "metrics": [
                    {"otlp": {"name": "trainer.tokens", "unit": "{token}", "instrument": "counter"}},
                    {
                        "otlp": {"name": "trainer.step.duration", "unit": "s", "instrument": "histogram"},
                        "stats": ["count", "sum"],
                    },
                    {
                        "otlp": {"name": "trainer.gpu.utilization", "unit": "1", "instrument": "gauge"},
                        "stats": ["last"],
                        "agg": "max",
                        "alias": "trainer_gpu_utilization_busiest_rank",
                    },
                ],
                "trackers": [{"type": "jsonl"}],
                "run": {"name": "otlp-names", "dir": str(tmp_path / "runs")},
            }
            with Bridge.from_config(config) as bridge:
                for step in range(STEPS):
                    with bridge.step(step):
                        time.sleep(QUIET_S)
                        series.step(step)
                        time.sleep(QUIET_S)
        finally:
            prometheus.stop()

    records = [json.loads(line) for line in (bridge.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [record["step"] for record in records] == list(range(STEPS))
    for step, record in enumerate(records):
        assert record["rollout/trainer_tokens_total/delta"] == pytest.approx(150 * (step + 1)), record
        assert record["rollout/trainer_step_duration_seconds/count"] == pytest.approx(3), record
        assert record["rollout/trainer_step_duration_seconds/sum"] == pytest.approx(1.15), record
        assert record["rollout/trainer_gpu_utilization_busiest_rank/last"] == pytest.approx(0.5 + 0.1 * step), record
        assert record.get("otel_bridge/missing_metrics", 0) == 0, record
