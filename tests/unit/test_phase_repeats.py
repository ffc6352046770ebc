"""Issue 39: a phase repeated within one step (verl's asynchronous trainers time one ``gen`` per local update) is one
set of keys by default, the occurrences' seconds added and their statistics those of their union; per-occurrence keys
(``gen_2``...) with ``naming.phase_repeats: each``."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.metrics.export import Gauge, Metric

from otel_bridge import Bridge
from otel_bridge.config import BridgeConfig
from otel_bridge.errors import ConfigError
from otel_bridge.exporters.naming import OUTSIDE_PHASES_KEY, STEP_SECONDS_KEY
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.statistics import StatPoint, combine_window_metrics, combine_windows, to_metric
from otel_bridge.schema import STAT_ATTRIBUTE
from otel_bridge.window import StepWindow


def bridge(tmp_path: Path, **naming: str) -> Bridge:
    return Bridge.from_config(
        {"trackers": [{"type": "jsonl"}], "run": {"name": "repeats", "dir": str(tmp_path)}, "naming": naming}
    )


def phase_keys(record: dict[str, float]) -> list[str]:
    return sorted(k for k in record if k.startswith("phase/") and k not in (STEP_SECONDS_KEY, OUTSIDE_PHASES_KEY))


def test_a_repeated_phase_is_one_key_holding_the_seconds_of_all_its_occurrences(tmp_path: Path) -> None:
    with bridge(tmp_path) as b:
        b.log({"x": 0.0}, step=0)
        for _ in range(3):  # trigger_parameter_sync_step = 3 local updates in one sync cycle
            with b.phase("gen"):
                pass
            with b.phase("update_actor"):
                pass
        with b.phase("update_weights"):
            pass
        b.log({"x": 1.0}, step=1)
    full = b.record(1)
    assert full is not None
    assert phase_keys(full.values) == [
        "phase/gen/seconds",
        "phase/update_actor/seconds",
        "phase/update_weights/seconds",
    ]
    step_s = full.values[STEP_SECONDS_KEY]
    covered = sum(full.values[k] for k in phase_keys(full.values))
    assert covered + full.values[OUTSIDE_PHASES_KEY] == pytest.approx(step_s)


def test_per_occurrence_keys_on_request(tmp_path: Path) -> None:
    with bridge(tmp_path, phase_repeats="each") as b, b.step(1):
        for _ in range(3):
            with b.phase("gen"):
                pass
    assert phase_keys(b.collect(1)) == ["phase/gen/seconds", "phase/gen_2/seconds", "phase/gen_3/seconds"]


def test_phase_repeats_takes_sum_or_each_only() -> None:
    assert BridgeConfig.load({}).naming.phase_repeats == "sum"
    with pytest.raises(ConfigError, match="phase_repeats"):
        BridgeConfig.load({"naming": {"phase_repeats": "numbered"}})


@pytest.mark.parametrize(
    ("kind", "stat", "expected"),
    [
        ("counter", "delta", 30.0),  # 10 + 20
        ("counter", "rate", 30.0 / 4.0),  # the union's delta over its seconds, not the mean of the rates
        ("gauge", "max", 20.0),
        ("gauge", "min", 10.0),
        ("gauge", "last", 20.0),
        ("gauge", "mean", (1.0 * 10.0 + 3.0 * 20.0) / 4.0),  # time-weighted
        ("gauge", "idle_seconds", 30.0),
        ("histogram", "count", 30.0),
        ("histogram", "sum", 30.0),
        ("histogram", "p99", None),  # a quantile of a union is not known from the windows' quantiles
        ("", None, None),  # ratios and raw PromQL
    ],
)
def test_how_a_statistic_of_several_windows_combines(kind: str, stat: str | None, expected: float | None) -> None:
    # window 1: 1 s, value 10; window 2: 3 s, value 20 (a rate of 10/s then 20/3 per s would not be "10 then 20")
    values = [(1.0, 10.0), (3.0, 20.0)]
    if kind == "counter" and stat == "rate":
        values = [(1.0, 10.0 / 1.0), (3.0, 20.0 / 3.0)]
    result = combine_windows(kind, stat, values)
    assert result == (pytest.approx(expected) if expected is not None else None)


def _points(metric: Metric) -> dict[tuple[tuple[str, object], ...], float]:
    assert isinstance(metric.data, Gauge)
    return {tuple(sorted((p.attributes or {}).items())): float(p.value) for p in metric.data.data_points}


def test_metrics_of_repeated_windows_combine_by_their_kind_and_a_histogram_mean_by_its_counts() -> None:
    ttft = MetricQuery(key_name="ttft", name="ttft", kind="histogram", stats=("mean", "count", "p50"))
    hit_rate = MetricQuery(key_name="hit_rate", ratio=("hits", "queries"))
    first, second = StepWindow(1, 0.0, 1.0), StepWindow(1, 2.0, 5.0)
    occurrences = [
        (1.0, [to_metric(ttft, [StatPoint("mean", (), 0.1), StatPoint("count", (), 1.0), StatPoint("p50", (), 0.1)],
                         first), to_metric(hit_rate, [StatPoint(None, (), 0.5)], first)]),
        (3.0, [to_metric(ttft, [StatPoint("mean", (), 0.5), StatPoint("count", (), 3.0), StatPoint("p50", (), 0.5)],
                         second), to_metric(hit_rate, [StatPoint(None, (), 0.9)], second)]),
    ]  # fmt: skip
    (combined,) = combine_window_metrics(occurrences, StepWindow(1, 0.0, 5.0))
    assert combined.name == "ttft"
    assert combined.description == "histogram"
    assert _points(combined) == {
        ((STAT_ATTRIBUTE, "mean"),): pytest.approx((0.1 * 1 + 0.5 * 3) / 4),  # the mean of the 4 observations
        ((STAT_ATTRIBUTE, "count"),): 4.0,
    }
