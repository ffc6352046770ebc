"""PromQL built from configuration cannot be bent by a config value.

Label values are quoted (quotes, backslashes, newlines, braces, PromQL syntax), metric and label names are checked
against Prometheus' grammar. Checked against a REAL Prometheus: a hostile label value matches no series instead of
matching others, and never makes the query invalid.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_bridge import Bridge, BridgeConfig, ConfigError
from otel_bridge.health import MISSING_METRICS
from otel_bridge.prometheus.promql import selector
from tests.conftest import Replica
from tests.helpers.prometheus_server import PrometheusServer, either_name

pytestmark = pytest.mark.integration

KEY = "rollout/vllm/num_requests_running/last"
METRIC = "vllm:num_requests_running"
HOSTILE = [
    'tiny"} or vector(1) or {a="',
    'tiny"}) or (up',
    "tiny\\",
    'tiny\\"',
    "tiny\n",
    'tiny",model_name!="',
    ".*",
    "tiny|.*",
    "",
    "${window}",
    "tiny\x00",
]


def config_for(tmp_path: Path, url: str, name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "prometheus": {"url": url, "scrape_interval_s": 1, "retries": 0},
        "metrics": [{"name": METRIC, "type": "gauge", "stats": ["last"], "labels": labels}],
        "run": {"name": name, "dir": str(tmp_path)},
    }


def test_hostile_label_values_match_nothing(
    tmp_path: Path, replicas: list[Replica], prometheus: PrometheusServer
) -> None:
    results: dict[str, dict[str, float]] = {}
    for index, value in enumerate(["tiny", *HOSTILE]):
        with Bridge.from_config(config_for(tmp_path, prometheus.url, f"run{index}", {"model_name": value})) as bridge:
            bridge.log({"actor/loss": 1.0}, step=0)
            results[value] = bridge.collect(0)
    assert KEY in results["tiny"]  # the honest value matches both replicas
    for value in HOSTILE:
        assert KEY not in results[value], f"label value {value!r} matched series"
        assert results[value][MISSING_METRICS] == 1, value
        assert results[value]["actor/loss"] == 1.0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=40).filter(lambda v: v != "tiny"))
def test_any_label_value_is_a_literal_in_real_prometheus(
    replicas: list[Replica], prometheus: PrometheusServer, value: str
) -> None:
    try:
        expr = selector(METRIC, {"model_name": value})
    except ConfigError:
        assert any(0xD800 <= ord(c) <= 0xDFFF for c in value)  # unpaired surrogates cannot be sent at all
        return
    assert prometheus.query(expr) == []  # valid PromQL (no error answer) that matches nothing
    assert len(prometheus.query(either_name(METRIC, 'model_name="tiny"'))) == 2


@pytest.mark.parametrize(
    "metric",
    [
        {"name": 'vllm:x{model_name="tiny"}'},
        {"name": "up or vector(1)"},
        {"name": "up[5m]"},
        {"name": "1up"},
        {"name": METRIC, "labels": {'a"b': "x"}},
        {"name": METRIC, "labels": {"__name__": "up"}},
        {"name": METRIC, "by": ["model_name) or (up"]},
        {"ratio": {"numerator": "up or vector(1)", "denominator": "up"}, "alias": "r"},
    ],
)
def test_names_outside_the_prometheus_grammar_are_config_errors(metric: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        BridgeConfig.from_dict({"prometheus": {"url": "http://127.0.0.1:9"}, "metrics": [metric]})
