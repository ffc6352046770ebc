"""A boundary that reaches the scrape producer late: the trainer took the boundary's time, then (GIL contention, a
garbage-collection pause, a busy training thread) told the producer only after the sampler had already taken an
in-step sample stamped later than the boundary. The boundary scrape's values are newer than that sample's, so in time
order the counter seemed to fall: read as a restart, one window counted the counter's whole value since the server
started (the clean-clone CI's scrape-path step 4: 11,414 tokens against a truth of 2,480).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest
from opentelemetry.sdk.metrics.export import Metric, NumberDataPoint

from otel_bridge.http.transport import TransportOptions
from otel_bridge.producers.base import metrics_of
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.scrape import ScrapeProducer
from otel_bridge.window import StepWindow
from tests.conftest import Replica

pytestmark = pytest.mark.integration

TOKENS = "vllm:generation_tokens_total"
QUERY = MetricQuery(key_name=TOKENS, name=TOKENS, kind="counter", stats=("delta",))


def generated(replica: Replica) -> float:
    return replica.sim.totals()["vllm:generation_tokens_total"]


def delta_of(metrics: Sequence[Metric]) -> float:
    (metric,) = metrics
    (point,) = metric.data.data_points
    assert isinstance(point, NumberDataPoint)
    return float(point.value)


def test_a_late_boundary_never_reads_as_a_restart(replicas: list[Replica]) -> None:
    replica = replicas[0]
    producer = ScrapeProducer(
        [replica.url],
        [QUERY],
        sample_interval_s=0.02,
        transport=TransportOptions(timeout_s=2, max_response_bytes=20_000_000),
        produce_timeout_s=5,
    )
    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            replica.sim.complete_request(
                prompt_tokens=4, generation_tokens=10, ttft_s=0.01, e2e_s=0.02, queue_s=0.0, itl_s=0.001
            )
            time.sleep(0.005)

    producer.start()
    generator = threading.Thread(target=traffic, daemon=True)
    try:
        start = time.time()
        producer.on_boundary(start)
        producer.produce(window=StepWindow(step=0, start=None, end=start))  # waits for the boundary scrape
        before = generated(replica)
        generator.start()
        deltas = []
        for step in range(1, 6):
            time.sleep(0.15)
            end = time.time()
            time.sleep(0.1)  # the boundary reaches the producer 0.1 s late: the sampler took ~5 samples since
            producer.on_boundary(end)
            deltas.append(delta_of(metrics_of(producer.produce(window=StepWindow(step=step, start=start, end=end)))))
            start = end
        stop.set()
        generator.join()
        end = time.time()
        producer.on_boundary(end)
        deltas.append(delta_of(metrics_of(producer.produce(window=StepWindow(step=6, start=start, end=end)))))
        total = generated(replica) - before
    finally:
        stop.set()
        producer.close()
    assert all(d >= 0 for d in deltas), deltas
    assert sum(deltas) == total, (deltas, total)
