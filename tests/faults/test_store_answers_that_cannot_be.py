"""A store that lies: counter figures no window can have, from a real Prometheus 3.16 behind a reverse proxy that
rewrites its answers (issue 37 finding 2).

Before: a store claiming ``anchored`` support that answered ``-1000000`` for a window's increase put ``-1000000`` into
the records' ``.../delta`` (and ``+Inf``/``NaN`` went the same way). A window's counter increase is never negative
and never non-finite: such an answer is an answer error, left out of the step (never fabricated), counted in
``otel_bridge/answer_errors{metric}`` and named in one WARNING.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from otel_bridge.health import ANSWER_ERRORS
from tests.faults.support import CounterServer, base_config, collect_steps, count_logs, prometheus_scraping
from tests.helpers.http_servers import Forward, RecordedRequest, Response, forwarding_proxy

pytestmark = pytest.mark.integration

NAME = "vllm:generation_tokens_total"
METRICS = [{"name": NAME, "type": "counter", "stats": ["delta", "rate"]}]
DELTA = "rollout/vllm/generation_tokens_total/delta"
RATE = "rollout/vllm/generation_tokens_total/rate"


class LyingStore:
    """Answers every window increase (a series tagged ``.../increase/...``) with ``value``, the rest as forwarded."""

    def __init__(self, value: str) -> None:
        self.value = value
        self.lies = 0

    def __call__(self, request: RecordedRequest, forward: Forward) -> Response:
        answer = forward()
        if request.path.split("?")[0] != "/api/v1/query" or answer.status != 200:
            return answer
        body = json.loads(answer.body)
        data = body.get("data", {})
        result = data.get("result")
        if data.get("resultType") != "vector" or not isinstance(result, list):  # a scalar: the store's time()
            return answer
        for series in result:
            if "/increase/" in series.get("metric", {}).get("otel_bridge_q", ""):
                series["value"][1] = self.value
                self.lies += 1
        return Response(body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("value", ["-1000000", "+Inf", "NaN"])
def test_a_counter_increase_no_window_can_have_is_an_answer_error(
    tmp_path: Path, value: str, caplog: pytest.LogCaptureFixture
) -> None:
    target = CounterServer(NAME)
    target.set(100.0)
    store = LyingStore(value)
    with (
        prometheus_scraping(tmp_path / "prometheus", target, NAME, version="3.16") as prometheus,
        forwarding_proxy(prometheus.url, store) as proxy,
    ):
        config = base_config(
            tmp_path,
            "lying-store",
            prometheus={
                "url": proxy.url,
                "scrape_interval_s": 0.25,
                "boundary": "samples",
                "recording_rules": "off",
                "retries": 0,
            },
            metrics=METRICS,
        )
        collecting, bridge = collect_steps(config, 5, seconds=0.6, caplog=caplog)  # two scrapes in each window
        errors = bridge.health.counter(ANSWER_ERRORS, {"metric": NAME})
    records = collecting.by_step()
    assert store.lies >= 5
    # no record carries a figure no window can have: where the store lied (every step), delta and rate are left out
    for step, values in records.items():
        for key in (DELTA, RATE):
            if key in values:
                assert math.isfinite(values[key]), (step, values)
                assert values[key] >= 0.0, (step, values)
    assert [step for step in range(5) if DELTA not in records[step] and RATE not in records[step]] == [0, 1, 2, 3, 4]
    assert errors == 5.0
    assert records[4][f"{ANSWER_ERRORS}/metric.vllm_generation_tokens_total"] == 5.0
    assert count_logs(caplog, f"metric {NAME}") == 1
