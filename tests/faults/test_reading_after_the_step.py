"""A target whose reading of a step's start is taken only after the step ended, on the scrape path.

A simulated vLLM server behind a real proxy that holds one scrape (a server too busy to render its page) from before
a step's start until after its end: the boundaries of that step share the target's next answer, sent after the step
ended. That reading stood for both of the step's boundaries, and the step showed 0 for the replica (20 tokens
generated in it) without naming it unread, with a ``boundary_lag_s`` longer than the step: a 0 that looks measured
(node agents, ``tests/integration/test_node_agents.py``: a replacement agent's first reading after both boundaries of
a step, 0 where 1,100-1,450 requests were made). The step now names the replica unread and takes nothing of it; the
step before takes what was counted until that reading, so the run's sum stays exact.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest
from opentelemetry.sdk.metrics.export import NumberDataPoint, ScopeMetrics

from otel_bridge.health import UNREAD, Health
from otel_bridge.http.transport import TransportOptions
from otel_bridge.producers.base import metrics_of
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.scrape import ScrapeProducer
from otel_bridge.window import StepWindow
from tests.conftest import Replica
from tests.helpers.http_servers import Forward, RecordedRequest, Response, forwarding_proxy

pytestmark = pytest.mark.integration

TOKENS = "vllm:generation_tokens_total"
QUERY = MetricQuery(key_name=TOKENS, name=TOKENS, kind="counter", stats=("delta",))


def delta_of(scopes: Sequence[ScopeMetrics]) -> float | None:
    values = [float(p.value) for m in metrics_of(scopes) for p in m.data.data_points if isinstance(p, NumberDataPoint)]
    return sum(values) if values else None


def test_a_step_read_only_after_it_ended_names_the_target_unread(replicas: list[Replica]) -> None:
    replica = replicas[0]
    holding, held, release = threading.Event(), threading.Event(), threading.Event()

    def answer(request: RecordedRequest, forward: Forward) -> Response:
        if holding.is_set():
            holding.clear()
            held.set()
            release.wait(30)  # rendered only once released: after the step ended
        return forward()

    proxy = forwarding_proxy(f"http://{replica.hostport}", answer)
    hostport = proxy.url.split("//")[1]
    health = Health()
    producer = ScrapeProducer(
        [f"{proxy.url}/metrics"],
        [QUERY],
        sample_interval_s=0.05,
        transport=TransportOptions(timeout_s=30, max_response_bytes=20_000_000),
        produce_timeout_s=30,
        health=health,
    )

    def generate(tokens: int) -> None:
        replica.sim.complete_request(
            prompt_tokens=4, generation_tokens=tokens, ttft_s=0.01, e2e_s=0.02, queue_s=0.0, itl_s=0.001
        )

    def unread() -> list[float]:
        snapshot = health.snapshot()
        return [value for name, labels, value in snapshot if name == UNREAD and ("instance", hostport) in labels]

    try:
        producer.start()
        b0 = time.time()
        producer.on_boundary(b0)
        producer.produce(window=StepWindow(0, None, b0))
        generate(10)
        holding.set()  # the next in-step sample is held: the target is busy at the step boundaries below
        assert held.wait(10)
        generate(10)
        b1 = time.time()
        producer.on_boundary(b1)
        generate(20)  # the true count of step 2
        b2 = time.time()
        producer.on_boundary(b2)
        release.set()  # the held scrape answers; the next one (standing for b1 and b2) is sent after b2
        step1 = delta_of(producer.produce(window=StepWindow(1, b0, b1)))
        unread1 = unread()
        step2 = delta_of(producer.produce(window=StepWindow(2, b1, b2)))
        unread2 = unread()
        generate(5)
        b3 = time.time()
        producer.on_boundary(b3)
        step3 = delta_of(producer.produce(window=StepWindow(3, b2, b3)))
        unread3 = unread()
    finally:
        release.set()
        producer.close()
        proxy.close()
    assert step1 == 40.0  # what was counted until the reading that stands for its end
    assert unread1 == []
    assert len(unread2) == 1, f"step 2 read nothing of {hostport} (its reading came after the step) but shows {step2}"
    assert unread2[0] >= b2 - b1  # its last reading was sent before the step began
    assert step2 in (None, 0.0)  # it takes nothing of it, and the same record says so
    assert step3 == 5.0
    assert unread3 == []
    assert (step1 or 0.0) + (step2 or 0.0) + (step3 or 0.0) == 45.0
