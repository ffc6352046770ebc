"""``max_groups``: which label groups a metric keeps in a record, what the ``_other`` group holds, and what is left
out (issue 27, finding 5). The end-to-end behaviour is in ``tests/faults/test_high_cardinality.py``."""

from __future__ import annotations

import logging
import math

import pytest

from otel_bridge.config import BridgeConfig
from otel_bridge.errors import ConfigError
from otel_bridge.health import GROUPS_DROPPED, Health
from otel_bridge.producers.metric_set import MetricQuery, resolve_metrics
from otel_bridge.producers.statistics import OTHER_VALUE, StatPoint, bound_groups
from otel_bridge.producers.window_report import WindowReport, WindowReporter
from otel_bridge.ratelimit import RateLimitedLogger
from otel_bridge.window import StepWindow


def points(stats: tuple[str, ...], n: int) -> list[StatPoint]:
    return [StatPoint(stat, (("lora", f"a{i:02d}"),), float(i + 1)) for i in range(n) for stat in stats]


def by_group(bounded: list[StatPoint]) -> dict[tuple[str | None, str], float]:
    return {(p.stat, p.group[0][1]): p.value for p in bounded}


def test_counters_keep_the_first_groups_in_label_order_and_sum_the_rest() -> None:
    query = MetricQuery("tokens", name="tokens", kind="counter", stats=("delta", "rate"), by=("lora",), max_groups=4)
    result = bound_groups(query, list(reversed(points(("delta", "rate"), 10))))
    values = by_group(result.points)
    assert {g for _, g in values} == {"a00", "a01", "a02", OTHER_VALUE}
    assert values[("delta", OTHER_VALUE)] == sum(range(4, 11))
    assert values[("rate", OTHER_VALUE)] == sum(range(4, 11))
    assert math.fsum(v for (s, _), v in values.items() if s == "delta") == sum(range(1, 11))
    assert (result.groups, result.dropped) == (10, 7)


def test_at_the_bound_nothing_is_folded() -> None:
    query = MetricQuery("tokens", name="tokens", kind="counter", stats=("delta",), by=("lora",), max_groups=4)
    result = bound_groups(query, points(("delta",), 4))
    assert result.dropped == 0
    assert len(result.points) == 4


def test_quantiles_and_means_are_left_out_and_counts_summed() -> None:
    query = MetricQuery(
        "ttft", name="ttft", kind="histogram", stats=("p99", "mean", "count"), by=("lora",), max_groups=3
    )
    values = by_group(bound_groups(query, points(("p99", "mean", "count"), 6)).points)
    assert ("count", OTHER_VALUE) in values
    assert values[("count", OTHER_VALUE)] == 3 + 4 + 5 + 6
    assert ("p99", OTHER_VALUE) not in values
    assert ("mean", OTHER_VALUE) not in values


@pytest.mark.parametrize(("agg", "expected"), [("sum", 3 + 4 + 5), ("max", 5.0), ("min", 3.0), ("mean", None)])
def test_gauges_fold_with_their_aggregation_except_mean(agg: str, expected: float | None) -> None:
    query = MetricQuery("kv", name="kv", kind="gauge", stats=("last",), by=("lora",), agg=agg, max_groups=3)  # type: ignore[arg-type]
    values = by_group(bound_groups(query, points(("last",), 5)).points)
    assert values.get(("last", OTHER_VALUE)) == expected


def test_ratios_are_left_out() -> None:
    query = MetricQuery("hit", ratio=("a", "b"), kind="counter", by=("lora",), max_groups=2)
    result = bound_groups(query, [StatPoint(None, (("lora", f"x{i}"),), 0.5) for i in range(5)])
    assert [p.group for p in result.points] == [(("lora", "x0"),)]
    assert result.dropped == 4


def test_a_real_other_value_is_folded_not_duplicated() -> None:
    query = MetricQuery("tokens", name="tokens", kind="counter", stats=("delta",), by=("lora",), max_groups=2)
    given = [StatPoint("delta", (("lora", OTHER_VALUE),), 1.0), *points(("delta",), 3)]
    result = bound_groups(query, given)
    assert by_group(result.points) == {("delta", "a00"): 1.0, ("delta", OTHER_VALUE): 1.0 + 2.0 + 3.0}


def test_the_health_gauge_and_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    health = Health()
    reporter = WindowReporter(health, RateLimitedLogger(logging.getLogger("otel_bridge.test"), 60.0))

    def bound(query: MetricQuery, given: list[StatPoint], window: StepWindow) -> None:
        report = WindowReport(window)  # what a wing builds for each window, and the reporter says
        report.within_bounds(query, given)
        reporter.publish(report)

    query = MetricQuery(
        "tokens", name="tokens", kind="counter", stats=("delta",), by=("lora",), max_groups=3, source_index=2
    )
    for step in range(3):
        bound(query, points(("delta",), 10), StepWindow(step, float(step), step + 1.0))
    assert health.gauge(GROUPS_DROPPED, {"metric": "tokens"}) == 8
    warnings = [r.getMessage() for r in caplog.records if "max_groups" in r.getMessage()]
    assert len(warnings) == 1
    assert "metrics[2].max_groups" in warnings[0]
    assert "the 8 groups" in warnings[0]
    assert "bound of 3" in warnings[0]
    bound(query, points(("delta",), 3), StepWindow(3, 3.0, 4.0))
    assert all(name != GROUPS_DROPPED for name, _, _ in health.snapshot())


def test_max_groups_resolves_from_the_entry_then_the_top_level() -> None:
    config = BridgeConfig.model_validate(
        {
            "scrape": {"targets": ["127.0.0.1:8000"]},
            "max_groups": 7,
            "metrics": [
                {"name": "a_total", "type": "counter", "by": ["x"]},
                {"name": "b_total", "type": "counter", "by": ["x"], "max_groups": 3},
                {"preset": "vllm", "max_groups": 5},
            ],
        }
    )
    queries = resolve_metrics(config.metrics, config.roles, config.max_groups)
    assert [q.max_groups for q in queries[:2]] == [7, 3]
    assert {q.max_groups for q in queries[2:]} == {5}
    assert BridgeConfig().max_groups == 100


def test_max_groups_below_two_is_refused() -> None:
    with pytest.raises(ConfigError, match="max_groups"):
        BridgeConfig.from_dict({"max_groups": 1})
