"""Targets that leave take their health keys with them, on the scrape path, under real churn (issue 27 finding 6).

Before: in a 5,000-step run with a flapping target and target churn, 15 ``scrape_errors/instance.*`` keys (21 with
``scrape.isolation: thread``) remained for 2 live targets, each at exactly 1.0: a scrape that failed as its target was
being forgotten counted its error after the forgetting (the count ran outside the lock the forgetting held), and a
window's report could name as unread a target that had just left. Every update of a target's keys now happens under
the producer's lock, and a window names only the targets still there. Real endpoints: live replicas and ports that
refuse connections, swapped in and out between boundaries, in this process and in the scrape child.
"""

from __future__ import annotations

import time

import pytest

from otel_bridge.config import MetricConfig
from otel_bridge.health import SCRAPE_ERRORS, UNREAD, Health
from otel_bridge.http.transport import TransportOptions
from otel_bridge.producers.metric_set import resolve_metrics
from otel_bridge.producers.scrape import ScrapeProducer
from otel_bridge.producers.scrape.process import ScrapeProcess
from otel_bridge.window import StepWindow
from tests.conftest import Replica
from tests.helpers.http_servers import free_port

pytestmark = pytest.mark.integration

ROUNDS = 60


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_departed_targets_leave_no_scrape_error_or_unread_key(replicas: list[Replica], isolation: str) -> None:
    queries = resolve_metrics([MetricConfig(name="vllm:generation_tokens_total", type="counter", stats=["delta"])])
    live = [r.url for r in replicas]
    dead = [f"http://127.0.0.1:{free_port()}/metrics" for _ in range(6)]  # nothing listens: refused at once
    health = Health()
    transport = TransportOptions(timeout_s=0.5, max_response_bytes=20_000_000)
    options = {"health": health, "sample_interval_s": 0.01, "transport": transport, "produce_timeout_s": 2.0}
    producer = (
        ScrapeProducer(live + dead[:2], queries, **options)
        if isolation == "thread"
        else ScrapeProcess(live + dead[:2], queries, **options)
    )
    try:
        producer.start()
        previous = time.time()
        producer.on_boundary(previous)
        for round_ in range(ROUNDS):
            # churn: a different pair of dead targets each round, sometimes none; failed scrapes always in flight
            chosen = [] if round_ % 5 == 4 else [dead[round_ % 6], dead[(round_ + 3) % 6]]
            producer.set_targets(live + chosen)
            time.sleep(0.02)
            now = time.time()
            producer.on_boundary(now)
            producer.produce(3000, window=StepWindow(round_, previous, now))
            previous = now
        producer.set_targets(live)
        for step in range(ROUNDS, ROUNDS + 3):  # the last windows' reports, and any scrape answering late
            time.sleep(0.6)
            now = time.time()
            producer.on_boundary(now)
            producer.produce(3000, window=StepWindow(step, previous, now))
            previous = now
    finally:
        producer.close()
    hostports = {url.split("//")[1].split("/")[0] for url in dead}
    left = [
        (name, labels, value)
        for name, labels, value in health.snapshot()
        if name in (SCRAPE_ERRORS, UNREAD) and any(v in hostports for _, v in labels)
    ]
    assert left == []
    live_hostports = {url.split("//")[1].split("/")[0] for url in live}
    errors = {dict(labels)["instance"] for name, labels, _ in health.snapshot() if name == SCRAPE_ERRORS}
    assert errors == live_hostports
