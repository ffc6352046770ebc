"""UTF-8 metric names: the OTLP translation strategies that keep dots, the selectors that quote them, the entries
that name them (otel_bridge/prometheus_names.py, otel_bridge/prometheus/promql.py, ``metrics[].otlp``).

The expected names are the ``UTF8Allowed: true`` rows of ``TestMetricNamer_Build`` in
github.com/prometheus/otlptranslator v1.0.0's ``metric_namer_test.go`` (the version Prometheus 3.16, module v0.316.0,
requires), written out, never computed by the module under test; the last rows are this project's own instruments
under ``NoUTF8EscapingWithSuffixes`` and ``NoTranslation``, checked against a real Prometheus 3.16 by
tests/integration/test_prometheus_otlp_receiver.py.
"""

from __future__ import annotations

import pytest

from otel_bridge.config import BridgeConfig
from otel_bridge.errors import ConfigError
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.promql._internal.rules import RECORD, sum_part
from otel_bridge.prometheus import promql
from otel_bridge.prometheus_names import STRATEGIES, Instrument, is_classic_name, prometheus_name, prometheus_series

# (name, unit, instrument, namespace, with suffixes, expected)
ROWS: list[tuple[str, str, Instrument, str, bool, str]] = [
    ("requests_total", "", "counter", "", True, "requests_total"),
    ("cpu_usage_ratio", "1", "gauge", "", True, "cpu_usage_ratio"),
    ("response_time_seconds", "s", "gauge", "", True, "response_time_seconds"),
    ("cpu_seconds_total", "s", "counter", "", True, "cpu_seconds_total"),
    ("otelcol_process_cpu_seconds", "s", "counter", "", True, "otelcol_process_cpu_seconds_total"),
    ("___", "", "gauge", "", False, "___"),
    ("métric_with_ñ_chars", "", "gauge", "", False, "métric_with_ñ_chars"),
    ("requêsts", "", "counter", "", True, "requêsts_total"),
    ("cpu_usagé", "1", "gauge", "", True, "cpu_usagé_ratio"),
    ("respønse_time", "ms", "gauge", "", True, "respønse_time_milliseconds"),
    ("requêsts", "1/s", "gauge", "", True, "requêsts_per_second"),
    ("@#$%", "", "counter", "", True, "@#$%_total"),
    ("metric", "", "counter", "test@namespace", True, "test@namespace_metric_total"),
    ("http.request.duration", "ms", "histogram", "", False, "http.request.duration"),
    ("http.requests", "1", "counter", "", False, "http.requests"),
    # this project's instruments
    ("trainer.tokens", "{token}", "counter", "", True, "trainer.tokens_total"),
    ("trainer.step.duration", "s", "histogram", "", True, "trainer.step.duration_seconds"),
    ("trainer.gpu.utilization", "1", "gauge", "", True, "trainer.gpu.utilization_ratio"),
    ("trainer.tokens", "{token}", "counter", "", False, "trainer.tokens"),
]


@pytest.mark.parametrize(("name", "unit", "instrument", "namespace", "suffixes", "expected"), ROWS)
def test_utf8_names_as_otlptranslator_builds_them(
    name: str, unit: str, instrument: Instrument, namespace: str, suffixes: bool, expected: str
) -> None:
    assert prometheus_name(name, unit, instrument, namespace, suffixes, escape=False) == expected


def test_strategies_are_the_four_of_otlptranslator() -> None:
    assert STRATEGIES == {
        "UnderscoreEscapingWithSuffixes": (True, True),
        "UnderscoreEscapingWithoutSuffixes": (False, True),
        "NoUTF8EscapingWithSuffixes": (True, False),
        "NoTranslation": (False, False),
    }


def test_a_utf8_histogram_has_the_three_series() -> None:
    assert prometheus_series("trainer.step.duration", "s", "histogram", escape=False) == (
        "trainer.step.duration_seconds_bucket",
        "trainer.step.duration_seconds_sum",
        "trainer.step.duration_seconds_count",
    )


def test_selector_quotes_a_utf8_name_inside_the_braces() -> None:
    assert promql.selector("trainer.tokens_total", utf8=True) == '{"trainer.tokens_total"}'
    assert promql.selector("trainer.tokens_total", {"job": "t", "a": 'x"y'}, utf8=True) == (
        '{"trainer.tokens_total",a="x\\"y",job="t"}'
    )
    assert promql.selector("trainer_tokens_total", {"job": "t"}, utf8=True) == 'trainer_tokens_total{job="t"}'
    assert is_classic_name("vllm:x")
    assert not is_classic_name("trainer.tokens_total")


@pytest.mark.parametrize(("name", "utf8"), [("trainer.tokens_total", False), ("", True), ("a\ud800b", True)])
def test_selector_refuses_a_name_it_may_not_write(name: str, utf8: bool) -> None:
    """Without ``utf8`` a dotted name is a misspelling (the classic grammar); no name, or one that is not UTF-8, never
    makes a selector."""
    with pytest.raises(ConfigError):
        promql.selector(name, utf8=utf8)


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        ("UnderscoreEscapingWithSuffixes", "trainer_tokens_total"),
        ("UnderscoreEscapingWithoutSuffixes", "trainer_tokens"),
        ("NoUTF8EscapingWithSuffixes", "trainer.tokens_total"),
        ("NoTranslation", "trainer.tokens"),
    ],
)
def test_an_entry_names_the_series_of_its_strategy(strategy: str, expected: str) -> None:
    config = BridgeConfig.model_validate(
        {
            "prometheus": {"url": "http://127.0.0.1:9"},
            "metrics": [
                {
                    "otlp": {
                        "name": "trainer.tokens",
                        "unit": "{token}",
                        "instrument": "counter",
                        "translation_strategy": strategy,
                    }
                }
            ],
        }
    )
    otlp = config.metrics[0].otlp
    assert otlp is not None
    assert otlp.prometheus_name == expected


def test_pushing_to_prometheus_receiver_needs_traces_off() -> None:
    """Prometheus' OTLP receiver takes metrics only (its traces path answers 404): the bridge refuses to send step
    traces there at start-up, naming the key that turns them off."""
    otlp = {"enabled": True, "endpoint": "http://prometheus:9090/api/v1/otlp/v1/metrics"}
    with pytest.raises(ConfigError) as refused:
        BridgeConfig.from_dict({"otel": {"otlp": otlp}})
    assert "otel.otlp.traces: false" in str(refused.value)
    config = BridgeConfig.from_dict({"otel": {"otlp": {**otlp, "traces": False}}})
    assert not config.otel.otlp.traces
    collector = BridgeConfig.from_dict({"otel": {"otlp": {**otlp, "endpoint": "http://collector:4318/v1/metrics"}}})
    assert collector.otel.otlp.traces


def test_a_recording_rule_for_a_utf8_name_records_a_classic_name() -> None:
    """The rule's record is a classic name, read bare, and a UTF-8 sample name's part is escaped to ASCII, with a hash
    that keeps ``trainer.tokens_total`` and ``trainer_tokens_total`` apart."""
    dotted = MetricQuery(key_name="t", name="trainer.tokens_total", kind="counter", utf8=True)
    plain = MetricQuery(key_name="t", name="trainer_tokens_total", kind="counter")
    assert is_classic_name(RECORD)
    part = sum_part(dotted, 0).part
    assert part.isascii(), part
    assert is_classic_name(part), part
    assert part.startswith("trainer_tokens_total_"), part
    assert part != sum_part(plain, 0).part
    assert '{"trainer.tokens_total"}' in sum_part(dotted, 0).expr
