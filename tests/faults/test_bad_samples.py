"""Sample values a counter can never have, served by a real local /metrics server on the scrape path (issue 14)."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_bridge import Bridge
from tests.faults.support import CounterServer, base_config
from tests.helpers.backends import BackendDouble

pytestmark = pytest.mark.integration

DELTA = "rollout/vllm/generation_tokens_total/delta"
METRICS = [{"name": "vllm:generation_tokens_total", "type": "counter", "stats": ["delta"]}]


def test_a_negative_counter_sample_never_gives_a_negative_delta(tmp_path: Path) -> None:
    """Finding 13: 200 then -50 then 30. A counter is never negative: -50 is not a value (no increase from it, none
    to it); 30 after 200 is a reset, so it counts 30."""
    counter = CounterServer()
    collecting = BackendDouble()
    scrape = {"targets": [f"127.0.0.1:{counter.server.port}"], "sample_interval_s": 0, "timeout_s": 2}
    try:
        counter.set(200.0)
        with Bridge.from_config(base_config(tmp_path, "negative", scrape=scrape, metrics=METRICS),
                                backends=[collecting]) as bridge:  # fmt: skip
            for step, value in enumerate((-50.0, 30.0, 45.0)):
                scraped = counter.scrapes
                with bridge.step(step):
                    counter.wait_for_scrapes(scraped + 1)  # the step's start is read before the value changes
                    counter.set(value)
                bridge.collect(step)
    finally:
        counter.server.close()
    deltas = {step: values[DELTA] for step, values in collecting.by_step().items()}
    assert deltas == {0: 0.0, 1: 30.0, 2: 15.0}
