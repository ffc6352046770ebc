"""otel-bridge's recording rules in a real Prometheus: the shipped file is recognised as it is printed back, a
changed or missing group is named, ``required`` refuses to start without it. (What the rules read is checked against
the traffic's truth in test_boundary_truth.py, the ``rules`` path.)"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from otel_bridge import Bridge
from otel_bridge.config import MetricConfig, PrometheusConfig
from otel_bridge.errors import ConfigError
from otel_bridge.producers.metric_set import resolve_metrics
from otel_bridge.producers.promql import PromQLProducer, connect
from otel_bridge.producers.promql._internal.rules import RECORD, counting, find_rules, part_selector
from tests.conftest import Replica
from tests.deploy.support import RULES_DIR
from tests.helpers.prometheus_server import PrometheusServer

pytestmark = pytest.mark.integration

SHIPPED = RULES_DIR / "otel-bridge.rules.yml"


def shipped_rules() -> dict[str, Any]:
    rules: dict[str, Any] = yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))
    return rules


def started_with(
    tmp_path: Path, replicas: list[Replica], rules: dict[str, Any], version: str, caplog: pytest.LogCaptureFixture
) -> PromQLProducer:
    """A producer for the ``vllm`` preset started (then closed) against a real Prometheus running ``rules``, its
    logs captured from INFO on."""
    targets = [r.hostport for r in replicas]
    with PrometheusServer(tmp_path / "prom", targets, rules=rules, version=version) as prometheus:
        prometheus.wait_for_samples("vllm:generation_tokens_total")
        producer = PromQLProducer(
            connect(PrometheusConfig(url=prometheus.url)), resolve_metrics([MetricConfig(preset="vllm")])
        )
        with caplog.at_level(logging.INFO, logger="otel_bridge"):
            producer.start()
        producer.close()
    return producer


def test_prometheus_runs_the_shipped_rules_as_the_bridge_expects_them(
    tmp_path: Path, replicas: list[Replica], prometheus_version: str
) -> None:
    with PrometheusServer(
        tmp_path / "prom", [r.hostport for r in replicas], rules=shipped_rules(), version=prometheus_version
    ) as prometheus:
        prometheus.wait_for_samples("vllm:generation_tokens_total")
        client = connect(PrometheusConfig(url=prometheus.url))
        try:
            groups = client.rule_groups()
        finally:
            client.close()
    queries = resolve_metrics([MetricConfig(preset="vllm")])
    ruleset, problems = find_rules(queries, groups)
    assert problems == ""
    assert ruleset is not None
    assert sorted(ruleset.records) == [i for i, q in enumerate(queries) if counting(q)]
    assert ruleset.interval_s == 15.0


def test_a_changed_part_is_named_and_its_metric_read_raw(
    tmp_path: Path, replicas: list[Replica], caplog: pytest.LogCaptureFixture, prometheus_version: str
) -> None:
    rules = shipped_rules()
    (rule,) = rules["groups"][0]["rules"]
    name = "vllm:generation_tokens_total"  # its sum is the first part; the per-target parts select it later
    rule["expr"] = rule["expr"].replace(f"{name}[5m]", f"{name}[10m]", 1)
    producer = started_with(tmp_path, replicas, rules, prometheus_version, caplog)
    assert producer.rules is not None
    assert 0 not in producer.rules.records  # vllm:generation_tokens_total, the changed part's metric
    assert 1 in producer.rules.records
    assert part_selector(f"{name}:last5m_sum") in caplog.text


def test_a_group_whose_rules_add_labels_is_not_the_bridges(
    tmp_path: Path, replicas: list[Replica], caplog: pytest.LogCaptureFixture, prometheus_version: str
) -> None:
    """Issue 37 finding 2: the same expressions with an ``instance`` label added record other series (every target's
    under one instance): read as the bridge's, the first steps had no delta and a restart step -767. A group whose
    rule differs in anything that changes its series is not the bridge's: read raw, said."""
    rules = shipped_rules()
    (rule,) = rules["groups"][0]["rules"]
    rule["labels"] = {"instance": "gateway:9090"}
    producer = started_with(tmp_path, replicas, rules, prometheus_version, caplog)
    assert producer.rules is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(RECORD in w and "labels" in w for w in warnings), caplog.text


def test_required_rules_missing_is_a_start_up_error_naming_the_key(
    tmp_path: Path, replicas: list[Replica], prometheus_version: str
) -> None:
    with PrometheusServer(tmp_path / "prom", [r.hostport for r in replicas], version=prometheus_version) as prometheus:
        prometheus.wait_for_samples("vllm:generation_tokens_total")
        config = {
            "prometheus": {"url": prometheus.url, "boundary": "samples", "recording_rules": "required"},
            "metrics": [{"preset": "vllm"}],
            "run": {"dir": str(tmp_path / "runs")},
        }
        with pytest.raises(ConfigError) as error:
            Bridge.from_config(config)
    message = str(error.value)
    assert "prometheus.recording_rules" in message
    assert "otel-bridge prometheus-rules" in message
    assert not list((tmp_path / "runs").glob("*/*")), "a failed start-up left a run behind"
