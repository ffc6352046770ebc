"""``metrics[].otlp``: a trainer metric named by its OpenTelemetry instrument, queried by its Prometheus name."""

from __future__ import annotations

from typing import Any

import pytest

from otel_bridge.config import BridgeConfig
from otel_bridge.errors import ConfigError
from otel_bridge.producers.metric_set import MetricQuery, resolve_metrics
from otel_bridge.producers.promql._internal.checks import check_names
from otel_bridge.producers.promql._internal.store import Store

PROM = {"url": "http://prometheus:9090"}
TOKENS = {"name": "trainer.tokens", "unit": "{token}", "instrument": "counter"}


def queries(*entries: dict[str, Any]) -> list[MetricQuery]:
    return resolve_metrics(BridgeConfig.from_dict({"prometheus": PROM, "metrics": list(entries)}).metrics)


def config_error(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        BridgeConfig.from_dict(data)
    return str(info.value)


def test_a_counter_is_read_as_its_total_with_counter_statistics() -> None:
    (query,) = queries({"otlp": TOKENS})
    assert (query.name, query.key_name, query.kind, query.stats) == (
        "trainer_tokens_total",
        "trainer_tokens_total",
        "counter",
        ("delta", "rate"),
    )
    assert query.series_names() == ("trainer_tokens_total",)


def test_a_histogram_reads_its_bucket_sum_and_count_series() -> None:
    (query,) = queries(
        {"otlp": {"name": "trainer.step.duration", "unit": "s", "instrument": "histogram"}, "stats": ["p99"]}
    )
    assert query.kind == "histogram"
    assert query.stats == ("p99",)
    assert query.series_names() == (
        "trainer_step_duration_seconds_bucket",
        "trainer_step_duration_seconds_sum",
        "trainer_step_duration_seconds_count",
    )


def test_gauges_and_up_down_counters_are_gauges_and_keep_alias_labels_by_agg() -> None:
    ratio, in_flight = queries(
        {
            "otlp": {"name": "trainer.gpu.utilization", "unit": "1", "instrument": "gauge"},
            "agg": "max",
            "by": ["otel_bridge_rank"],
            "labels": {"service_name": "trainer"},
            "alias": "gpu_util",
        },
        {"otlp": {"name": "trainer.rollouts.in_flight", "unit": "{rollout}", "instrument": "up_down_counter"}},
    )
    assert (ratio.name, ratio.key_name, ratio.kind, ratio.agg) == (
        "trainer_gpu_utilization_ratio",
        "gpu_util",
        "gauge",
        "max",
    )
    assert ratio.by == ("otel_bridge_rank",)
    assert ratio.matchers == (("service_name", "trainer"),)
    assert (in_flight.name, in_flight.kind) == ("trainer_rollouts_in_flight", "gauge")


def test_the_exporter_namespace_is_put_in_front() -> None:
    (query,) = queries({"otlp": {**TOKENS, "namespace": "rl"}})
    assert query.name == "rl_trainer_tokens_total"


def test_on_the_scrape_path_the_error_names_the_key_and_the_translated_name() -> None:
    message = config_error({"scrape": {"targets": ["127.0.0.1:8000"]}, "metrics": [{"name": "up"}, {"otlp": TOKENS}]})
    assert "metrics[1].otlp" in message
    assert "PromQL path: set prometheus.url" in message
    assert "`name: trainer_tokens_total`" in message


def test_type_is_refused_beside_otlp() -> None:
    message = config_error({"prometheus": PROM, "metrics": [{"otlp": TOKENS, "type": "gauge"}]})
    assert "metrics[0]" in message
    assert "takes its type from otlp.instrument: remove type" in message


def test_stats_are_checked_against_the_instrument() -> None:
    message = config_error({"prometheus": PROM, "metrics": [{"otlp": TOKENS, "stats": ["max"]}]})
    assert "stats ['max'] are not valid for a counter; allowed: delta, rate" in message


def test_otlp_is_one_of_the_exclusive_kinds_of_entry() -> None:
    message = config_error({"prometheus": PROM, "metrics": [{"otlp": TOKENS, "name": "trainer_tokens_total"}]})
    assert "set exactly one of name, promql, preset, ratio, otlp (got ['name', 'otlp'])" in message


@pytest.mark.parametrize(
    ("otlp", "key", "words"),
    [
        ({"name": "trainer.tokens", "instrument": "sum"}, "metrics[0].otlp.instrument", "'counter', 'up_down_counter'"),
        ({"name": "trainer.tokens"}, "metrics[0].otlp.instrument", "missing key"),
        ({"name": "...", "instrument": "gauge"}, "metrics[0].otlp", "cannot translate"),
        ({"name": "x", "instrument": "gauge", "namespace": "rl-prod"}, "metrics[0].otlp", "not a valid Prometheus"),
        ({**TOKENS, "units": "s"}, "metrics[0].otlp", "units"),
    ],
)
def test_bad_otlp_entries_name_the_key(otlp: dict[str, Any], key: str, words: str) -> None:
    message = config_error({"prometheus": PROM, "metrics": [{"otlp": otlp}]})
    assert key in message
    assert words in message


def test_without_suffixes_the_entry_queries_the_bare_escaped_name() -> None:
    """An exporter with add_metric_suffixes: false writes no unit, _total or _ratio (otlptranslator's simple case)."""
    bare = {"add_metric_suffixes": False}
    tokens, duration, ratio = queries(
        {"otlp": {**TOKENS, **bare}},
        {"otlp": {"name": "trainer.step.duration", "unit": "s", "instrument": "histogram", **bare}},
        {"otlp": {"name": "trainer.gpu.utilization", "unit": "1", "instrument": "gauge", **bare}},
    )
    assert (tokens.name, tokens.kind, tokens.series_names()) == ("trainer_tokens", "counter", ("trainer_tokens",))
    assert duration.series_names() == (
        "trainer_step_duration_bucket",
        "trainer_step_duration_sum",
        "trainer_step_duration_count",
    )
    assert ratio.name == "trainer_gpu_utilization"


def test_a_translation_strategy_wins_over_add_metric_suffixes() -> None:
    """The prometheus exporter (translation_strategy since v0.132.0): an explicit strategy decides, whatever
    add_metric_suffixes says."""
    without, with_ = queries(
        {"otlp": {**TOKENS, "translation_strategy": "UnderscoreEscapingWithoutSuffixes"}},
        {"otlp": {**TOKENS, "add_metric_suffixes": False, "translation_strategy": "UnderscoreEscapingWithSuffixes"}},
    )
    assert (without.name, with_.name) == ("trainer_tokens", "trainer_tokens_total")


@pytest.mark.parametrize(
    ("strategy", "name"), [("NoUTF8EscapingWithSuffixes", "trainer.tokens_total"), ("NoTranslation", "trainer.tokens")]
)
def test_strategies_that_keep_dots_read_utf8_names_on_a_store_that_has_them(strategy: str, name: str) -> None:
    """The entry takes the strategy (Prometheus 3's OTLP receiver writes such names); whether the store can hold them
    is known only from the store, at start-up: a store without UTF-8 names refuses the entry with the keys to change."""
    (query,) = queries({"otlp": {**TOKENS, "translation_strategy": strategy}})
    assert (query.name, query.utf8, query.utf8_names) == (name, True, (name,))
    check_names([query], Store("Prometheus", "3.16.0", utf8_names=True))
    with pytest.raises(ConfigError) as refused:
        check_names([query], Store("Prometheus", "2.42.0", utf8_names=False))
    message = str(refused.value)
    for part in (f"metrics[0].otlp reads {name}", "Prometheus 2.42.0 has no UTF-8 metric names"):
        assert part in message, message
    for part in (
        "metrics[0].otlp.translation_strategy",
        "UnderscoreEscapingWithSuffixes",
        "otlp: translation_strategy",
    ):
        assert part in message, message


def test_escaping_strategies_need_no_utf8_names() -> None:
    (query,) = queries({"otlp": {**TOKENS, "translation_strategy": "UnderscoreEscapingWithoutSuffixes"}})
    assert (query.utf8, query.utf8_names) == (False, ())
    check_names([query], Store("Prometheus", "2.42.0", utf8_names=False))


def test_an_unknown_translation_strategy_names_the_allowed_ones() -> None:
    message = config_error(
        {"prometheus": PROM, "metrics": [{"otlp": {**TOKENS, "translation_strategy": "underscores"}}]}
    )
    assert "metrics[0].otlp.translation_strategy" in message
    assert "'UnderscoreEscapingWithSuffixes'" in message
