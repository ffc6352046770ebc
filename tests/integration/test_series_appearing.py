"""A counter series that appears inside a step (a replica that joins mid-run, a trainer rank's first push) contributes
what it counted after its first sample, on every plan and both Prometheus versions alike (docs/step-numbers.md): its
first sample is its baseline, because nothing in Prometheus says whether the series was born then or only became
visible (a long-running server added to Prometheus' targets would otherwise put its whole history into one step).
3.16's exact-increase plan (``increase(x[w] anchored)``) and the boundary sums of 2.42 must agree on it.

The samples are remote-written with their own timestamps, so each window's truth is known exactly: ``old`` has had
samples since before the run, ``new`` first appears in the middle of window 0.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics.export import NumberDataPoint

from otel_bridge.config import MetricConfig, PrometheusConfig
from otel_bridge.producers.base import metrics_of
from otel_bridge.producers.metric_set import resolve_metrics
from otel_bridge.producers.promql import client_for
from otel_bridge.producers.promql._internal.store import detect_store
from otel_bridge.producers.promql.producer import PromQLProducer
from otel_bridge.window import StepWindow
from tests.helpers.prometheus_server import PrometheusServer
from tests.helpers.remote_write import push

pytestmark = pytest.mark.integration

NAME = "rollout_requests_total"
INTERVAL_S = 15.0
# seconds after t0 -> {instance: value}: "old" from before the run; "new" first at t0 + 20, inside window 0.
SAMPLES: dict[float, dict[str, float]] = {
    -30: {"old": 10.0},
    -15: {"old": 10.0},
    5: {"old": 15.0},
    20: {"old": 22.0, "new": 4.0},
    35: {"old": 30.0, "new": 9.0},
    50: {"old": 31.0, "new": 12.0},
    65: {"old": 31.0, "new": 12.0},
}
WINDOWS = ((0.0, 30.0), (30.0, 60.0))
TRUTH = {  # per window: old's and new's increase, new's first sample its baseline
    0: (22.0 - 10.0) + 0.0,
    1: (31.0 - 22.0) + (12.0 - 4.0),
}


@pytest.fixture
def history(tmp_path: Path, prometheus_version: str) -> Iterator[tuple[PrometheusServer, float]]:
    server = PrometheusServer(tmp_path / "prometheus", remote_write=True, version=prometheus_version)
    server.start()
    try:
        t0 = math.floor(time.time()) - 120.0
        for offset, values in sorted(SAMPLES.items()):
            push(
                server.url,
                [({"__name__": NAME, "job": "rollout", "instance": i}, v) for i, v in values.items()],
                t0 + offset,
            )
        yield server, t0
    finally:
        server.stop()


@pytest.mark.parametrize("plan", ["store's own", "boundary sums"])
def test_a_series_that_appears_in_a_step_counts_from_its_first_sample_on_every_plan(
    history: tuple[PrometheusServer, float], plan: str
) -> None:
    server, t0 = history
    client = client_for(PrometheusConfig(url=server.url))
    store = detect_store(client)
    producer = PromQLProducer(
        client,
        resolve_metrics([MetricConfig.model_validate({"name": NAME, "type": "counter", "stats": ["delta"]})]),
        scrape_interval_s=INTERVAL_S,
        recording_rules="off",
        store=store if plan == "store's own" else replace(store, increase=None),
    )
    producer.start()
    try:
        got = {}
        for step, (start, end) in enumerate(WINDOWS):
            (metric,) = metrics_of(producer.produce(window=StepWindow(step, t0 + start, t0 + end)))
            (point,) = metric.data.data_points
            assert isinstance(point, NumberDataPoint)
            got[step] = point.value
    finally:
        producer.close()
    assert got == TRUTH, f"{store.name}, {plan}: {got}"
