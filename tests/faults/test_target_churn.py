"""A target that joins after a boundary is not awaited at it, on the scrape path (issue 37 finding 8).

Before: with scrape targets coming and going (Ray's service-discovery file) and steps faster than the worker, a target
that joined *after* a boundary was awaited *at* that boundary ("no reading of 127.0.0.1:20004 came within 28s" for
step 957, while 20004 joined after step 999): each backlog step waited the whole ``produce_timeout_s``, and records
arrived a minute late. Now a boundary before a target joined is not the target's: the backlog's windows are computed
from the targets that existed at their boundaries, without a wait and without naming the newcomer unread; a target
that left is not waited for either. Real local servers: a counter that answers, and newcomers that never answer (each
scrape of them hangs until ``scrape.timeout_s``), in this process and in the scrape child.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import pytest
from opentelemetry.sdk.metrics.export import ScopeMetrics

from otel_bridge.config import MetricConfig
from otel_bridge.health import TARGETS_UNREAD, Health
from otel_bridge.http.transport import TransportOptions
from otel_bridge.producers.base import metrics_of
from otel_bridge.producers.metric_set import resolve_metrics
from otel_bridge.producers.scrape import ScrapeProducer
from otel_bridge.producers.scrape.process import ScrapeProcess
from otel_bridge.window import StepWindow
from tests.faults.test_bad_samples import CounterServer
from tests.helpers.http_servers import Response, ScriptedHTTPServer

pytestmark = pytest.mark.integration

STEPS = 6
TIMEOUT_S = 4.0  # the newcomers' scrapes hang this long; a window that waited for them would wait as long


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_a_target_that_joins_after_the_backlogs_boundaries_is_not_awaited_there(
    isolation: str, caplog: pytest.LogCaptureFixture
) -> None:
    counter = CounterServer()
    hanging = [ScriptedHTTPServer(lambda request: Response(hang=True)) for _ in range(2)]
    newcomers = [f"127.0.0.1:{server.port}" for server in hanging]
    healthy = f"127.0.0.1:{counter.server.port}"
    queries = resolve_metrics([MetricConfig(name="vllm:generation_tokens_total", type="counter", stats=["delta"])])
    health = Health()
    options = {
        "health": health,
        "sample_interval_s": 0,
        "transport": TransportOptions(timeout_s=TIMEOUT_S, max_response_bytes=1_000_000),
        "produce_timeout_s": 2.0,
    }
    producer = (
        ScrapeProducer([healthy], queries, **options)
        if isolation == "thread"
        else ScrapeProcess([healthy], queries, **options)
    )
    deltas: list[float | None] = []
    unread: list[float] = []
    try:
        producer.start()
        boundaries = []
        for step in range(STEPS + 1):  # the trainer runs ahead: every boundary before the worker asks for any window
            scraped = counter.scrapes
            boundaries.append(time.time())
            producer.on_boundary(boundaries[-1])
            counter.wait_for_scrapes(scraped + 1)
            if step < STEPS:
                counter.set(counter.value + 10.0)
        producer.set_targets([healthy, *newcomers])  # discovery finds two targets after the last boundary
        with caplog.at_level(logging.WARNING, logger="otel_bridge"):
            for step in range(STEPS):  # the backlog: each window ended before the newcomers joined
                window = StepWindow(step, boundaries[step], boundaries[step + 1])
                deltas.append(_delta(producer.produce(3 * TIMEOUT_S * 1000, window=window)))
                unread.append(health.gauge(TARGETS_UNREAD))
        producer.set_targets([healthy])  # they leave while their scrapes still hang: forgotten at once
        end = time.time()
        producer.on_boundary(end)
        with caplog.at_level(logging.WARNING, logger="otel_bridge"):
            deltas.append(_delta(producer.produce(3 * TIMEOUT_S * 1000, window=StepWindow(STEPS, boundaries[-1], end))))
            unread.append(health.gauge(TARGETS_UNREAD))
    finally:
        producer.close()
        counter.server.close()
        for server in hanging:
            server.close()
    assert deltas == [10.0] * STEPS + [0.0]
    assert unread == [0.0] * (STEPS + 1)  # nobody is named unread: the newcomers were not targets at those boundaries
    awaited = [r.getMessage() for r in caplog.records if "no reading of" in r.getMessage()]
    assert not [m for m in awaited if any(newcomer in m for newcomer in newcomers)], awaited


def _delta(scopes: Sequence[ScopeMetrics]) -> float | None:
    values = [point.value for metric in metrics_of(scopes) for point in metric.data.data_points]
    return sum(values) if values else None
