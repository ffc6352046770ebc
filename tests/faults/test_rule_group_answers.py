"""``/api/v1/rules`` fields no rule group has, from a real Prometheus running otel-bridge's rules behind a reverse
proxy that rewrites them (issue 37 finding 3).

Before: ``evaluationTime: 1e9`` made every step wait for stored evaluations until the step was given up
(``infra_unavailable`` 1, no delta); an infinite ``evaluationTime`` or ``interval`` raised an untyped
``OverflowError`` at every step. Now the waits are bounded by the rule intervals the docs promise, and a group whose
interval or evaluation time is not a number of seconds is not used (read raw), with one WARNING naming the field.
"""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import pytest
import requests

from otel_bridge import Bridge
from otel_bridge.config import MetricConfig
from otel_bridge.health import INFRA_UNAVAILABLE
from otel_bridge.producers.metric_set import resolve_metrics
from otel_bridge.producers.promql import rules_document
from tests.faults.support import (
    CounterServer,
    base_config,
    collect_steps,
    count_logs,
    prometheus_scraping,
    run_steps,
)
from tests.helpers.backends import BackendDouble
from tests.helpers.http_servers import Forward, RecordedRequest, Response, forwarding_proxy

pytestmark = pytest.mark.integration

NAME = "vllm:generation_tokens_total"
METRICS = [{"name": NAME, "type": "counter", "stats": ["delta"]}]
DELTA = "rollout/vllm/generation_tokens_total/delta"
RULE_INTERVAL_S = 0.5


class RulesRewriter:
    """Answers ``/api/v1/rules`` with ``field`` of every group set to ``value``; the rest as forwarded."""

    def __init__(self, field: str, value: float) -> None:
        self.field = field
        self.value = value

    def __call__(self, request: RecordedRequest, forward: Forward) -> Response:
        answer = forward()
        if request.path.split("?")[0] != "/api/v1/rules" or answer.status != 200:
            return answer
        body = json.loads(answer.body)
        for group in body["data"]["groups"]:
            group[self.field] = self.value
        return Response(body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})


@pytest.mark.parametrize(
    ("field", "value"),
    [("evaluationTime", 1e9), ("evaluationTime", math.inf), ("interval", math.inf), ("interval", math.nan)],
    ids=["evaluationTime-1e9", "evaluationTime-inf", "interval-inf", "interval-nan"],
)
def test_a_rule_groups_impossible_times_neither_stall_nor_break_a_step(
    tmp_path: Path, field: str, value: float, prometheus_version: str, caplog: pytest.LogCaptureFixture
) -> None:
    target = CounterServer(NAME)
    target.set(100.0)
    rules = rules_document(resolve_metrics([MetricConfig.model_validate(m) for m in METRICS]), RULE_INTERVAL_S)
    with (
        prometheus_scraping(tmp_path / "prometheus", target, NAME, version=prometheus_version, rules=rules) as prom,
        forwarding_proxy(prom.url, RulesRewriter(field, value)) as proxy,
    ):
        prometheus = {"url": proxy.url, "scrape_interval_s": 0.25, "boundary": "samples", "retries": 0}
        config = base_config(
            tmp_path, "rule-times", prometheus=prometheus, metrics=METRICS, delivery={"produce_timeout_s": 4}
        )
        collecting, _ = collect_steps(config, 4, seconds=0.3, caplog=caplog)
    records = collecting.by_step()
    for step in range(1, 4):
        assert records[step][INFRA_UNAVAILABLE] == 0, records[step]
        assert records[step][DELTA] == 0.0, records[step]
    assert count_logs(caplog, "raised unexpectedly") == 0
    if not (field == "evaluationTime" and math.isfinite(value)):
        assert count_logs(caplog, f"no usable {field}") == 1


def test_a_rule_group_removed_mid_run_leaves_later_steps_to_the_raw_series(
    tmp_path: Path, prometheus_version: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: every record after the group's removal went out without the delta (801 of 1,201 counted)."""
    target = CounterServer(NAME)
    target.set(100.0)
    rules = rules_document(resolve_metrics([MetricConfig.model_validate(m) for m in METRICS]), RULE_INTERVAL_S)
    collecting = BackendDouble()
    with prometheus_scraping(
        tmp_path / "prometheus", target, NAME, version=prometheus_version, rules=rules, enable_lifecycle=True
    ) as prometheus:
        settings = {"url": prometheus.url, "scrape_interval_s": 0.25, "boundary": "samples", "retries": 0}
        settings["recording_rules"] = "required"
        config = base_config(tmp_path, "rules-removed", prometheus=settings, metrics=METRICS)
        with (
            caplog.at_level(logging.WARNING, logger="otel_bridge"),
            Bridge.from_config(config, backends=[collecting]) as bridge,
        ):
            run_steps(bridge, 3, collect=True, seconds=0.3)
            (prometheus.workdir / "rules.yml").write_text("groups: []\n", encoding="utf-8")
            requests.post(f"{prometheus.url}/-/reload", timeout=10).raise_for_status()
            while requests.get(f"{prometheus.url}/api/v1/rules", timeout=5).json()["data"]["groups"]:
                time.sleep(0.05)
            target.set(150.0)  # counted after the group is gone: only the raw series can say so
            run_steps(bridge, 4, collect=True, seconds=0.3, first=3)
    records = collecting.by_step()
    assert all(DELTA in records[step] for step in (1, 2)), records  # read through the rules
    assert all(DELTA in records[step] for step in range(3, 7)), records
    assert sum(records[step][DELTA] for step in range(3, 7)) == 50.0
    assert count_logs(caplog, "no evaluation of otel-bridge's recording rules") == 1
