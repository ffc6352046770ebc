"""compute_stats: combining raw series (replicas) into window statistics per label group."""

from __future__ import annotations

import math

import pytest

from otel_bridge.config import MetricConfig
from otel_bridge.producers.metric_set import MetricQuery, resolve_metrics
from otel_bridge.producers.statistics import (
    RawSeries,
    StatPoint,
    compute_stats,
    group_of,
    histogram_quantile,
    possible_increases,
    possible_points,
)
from otel_bridge.window import StepWindow

W = StepWindow(step=3, start=10.0, end=20.0)
FIRST = StepWindow(step=0, start=None, end=20.0)

TOKENS = "vllm:generation_tokens_total"
KV = "vllm:kv_cache_usage_perc"
TTFT = "vllm:time_to_first_token_seconds"
HITS = "vllm:prefix_cache_hits_total"
QUERIES = "vllm:prefix_cache_queries_total"


def series(name: str, samples: list[tuple[float, float]], **labels: str) -> RawSeries:
    return RawSeries(name=name, labels=labels, samples=samples)


def counter_query(stats: tuple[str, ...] = ("delta", "rate"), **kwargs: object) -> MetricQuery:
    return MetricQuery(key_name=TOKENS, name=TOKENS, kind="counter", stats=stats, **kwargs)  # type: ignore[arg-type]


def by_stat(points: list[StatPoint] | None) -> dict[tuple[str | None, tuple[tuple[str, str], ...]], float]:
    assert points is not None
    return {(p.stat, p.group): p.value for p in points}


# --- counters ---


def test_counter_summed_across_replicas() -> None:
    raw = [
        series(TOKENS, [(10.0, 100.0), (20.0, 130.0)], instance="a:8000"),
        # replica b restarted mid-window: 10 before the restart, 25 after
        series(TOKENS, [(10.0, 50.0), (12.0, 60.0), (15.0, 10.0), (20.0, 25.0)], instance="b:8000"),
    ]
    assert compute_stats(counter_query(), raw, W) == [StatPoint("delta", (), 65.0), StatPoint("rate", (), 6.5)]


def test_counter_by_keeps_groups_apart_and_sorted() -> None:
    raw = [
        series(TOKENS, [(10.0, 0.0), (20.0, 5.0)], instance="a", model_name="ref"),
        series(TOKENS, [(10.0, 0.0), (20.0, 7.0)], instance="a", model_name="policy"),
        series(TOKENS, [(10.0, 0.0), (20.0, 3.0)], instance="b", model_name="policy"),
    ]
    points = compute_stats(counter_query(stats=("delta",), by=("model_name",)), raw, W)
    assert points == [
        StatPoint("delta", (("model_name", "policy"),), 10.0),
        StatPoint("delta", (("model_name", "ref"),), 5.0),
    ]


def test_group_of_leaves_out_missing_and_empty_labels() -> None:
    assert group_of({"a": "1", "b": "", "c": "3"}, ("c", "b", "a", "d")) == (("c", "3"), ("a", "1"))


def test_counter_matchers_filter_series() -> None:
    raw = [
        series(TOKENS, [(10.0, 0.0), (20.0, 7.0)], model_name="policy"),
        series(TOKENS, [(10.0, 0.0), (20.0, 100.0)], model_name="ref"),
    ]
    query = counter_query(stats=("delta",), matchers=(("model_name", "policy"),))
    assert compute_stats(query, raw, W) == [StatPoint("delta", (), 7.0)]


def test_missing_metric_is_none() -> None:
    raw = [series("vllm:prompt_tokens_total", [(10.0, 0.0), (20.0, 7.0)])]
    assert compute_stats(counter_query(), raw, W) is None
    assert compute_stats(counter_query(), [], W) is None


def test_matchers_excluding_every_series_is_missing() -> None:
    raw = [series(TOKENS, [(10.0, 0.0), (20.0, 7.0)], model_name="ref")]
    assert compute_stats(counter_query(matchers=(("model_name", "policy"),)), raw, W) is None


def test_counter_rate_of_zero_length_window_is_absent() -> None:
    """Issue 26: a window of no length has no rate; no NaN (counted as a fault) is made for it."""
    window = StepWindow(step=1, start=20.0, end=20.0)
    points = by_stat(compute_stats(counter_query(), [series(TOKENS, [(20.0, 5.0)])], window))
    assert points == {("delta", ()): 0.0}


# --- gauges ---

KV_SERIES = [
    series(KV, [(10.0, 0.9), (12.0, 0.2), (15.0, 0.4), (20.0, 0.3)], instance="a"),
    series(KV, [(12.0, 0.5), (16.0, 0.7), (19.0, 0.6)], instance="b"),
]


@pytest.mark.parametrize(
    ("agg", "expected_max", "expected_last"),
    [("sum", 1.1, 0.9), ("mean", 0.55, 0.45), ("max", 0.7, 0.6), ("min", 0.4, 0.3)],
)
def test_gauge_aggregation_across_series(agg: str, expected_max: float, expected_last: float) -> None:
    query = MetricQuery(key_name=KV, name=KV, kind="gauge", stats=("max", "last"), agg=agg)  # type: ignore[arg-type]
    points = compute_stats(query, KV_SERIES, W)
    assert points is not None
    assert [(p.stat, p.group) for p in points] == [("max", ()), ("last", ())]
    assert points[0].value == pytest.approx(expected_max)
    assert points[1].value == pytest.approx(expected_last)


def test_gauge_by_groups() -> None:
    query = MetricQuery(key_name=KV, name=KV, kind="gauge", stats=("mean",), by=("instance",))
    points = by_stat(compute_stats(query, KV_SERIES, W))
    assert points.keys() == {("mean", (("instance", "a"),)), ("mean", (("instance", "b"),))}
    assert points[("mean", (("instance", "a"),))] == pytest.approx(0.3)
    assert points[("mean", (("instance", "b"),))] == pytest.approx(0.6)


def test_gauge_series_with_only_nan_is_left_out_of_the_aggregation() -> None:
    raw = [series(KV, [(12.0, 0.5)], instance="a"), series(KV, [(12.0, math.nan)], instance="b")]
    query = MetricQuery(key_name=KV, name=KV, kind="gauge", stats=("max",), agg="mean")
    assert compute_stats(query, raw, W) == [StatPoint("max", (), 0.5)]


def test_gauge_without_samples_in_window_gives_no_points() -> None:
    query = MetricQuery(key_name=KV, name=KV, kind="gauge", stats=("max",))
    assert compute_stats(query, [series(KV, [(5.0, 0.5)])], W) == []


# --- histograms ---


def _hist_series(instance: str, le_text: dict[float, str], rows: dict[str, list[float]]) -> list[RawSeries]:
    times = [10.0, 15.0, 20.0][: len(rows["count"])]
    out = [
        series(f"{TTFT}_bucket", list(zip(times, rows[str(le)], strict=True)), instance=instance, le=le_text[le])
        for le in (0.1, 0.5, 1.0, math.inf)
    ]
    out.append(series(f"{TTFT}_sum", list(zip(times, rows["sum"], strict=True)), instance=instance))
    out.append(series(f"{TTFT}_count", list(zip(times, rows["count"], strict=True)), instance=instance))
    return out


# replica a: buckets +4, +10, +13, +14; sum +4.0; count +14
REPLICA_A = _hist_series(
    "a",
    {0.1: "0.1", 0.5: "0.5", 1.0: "1", math.inf: "+Inf"},
    {
        "0.1": [10.0, 14.0],
        "0.5": [20.0, 30.0],
        "1.0": [25.0, 38.0],
        "inf": [26.0, 40.0],
        "sum": [5.0, 9.0],
        "count": [26.0, 40.0],
    },
)
# replica b restarted mid-window (baseline, reset, end): buckets +2, +4, +5, +6; sum +3.0; count +6
REPLICA_B = _hist_series(
    "b",
    {0.1: "0.1", 0.5: "0.5", 1.0: "1.0", math.inf: "+Inf"},
    {
        "0.1": [50.0, 1.0, 2.0],
        "0.5": [60.0, 2.0, 4.0],
        "1.0": [70.0, 3.0, 5.0],
        "inf": [80.0, 3.0, 6.0],
        "sum": [30.0, 1.0, 3.0],
        "count": [80.0, 3.0, 6.0],
    },
)


def hist_query(**kwargs: object) -> MetricQuery:
    stats = ("mean", "p50", "p75", "p99", "count", "sum")
    return MetricQuery(key_name=TTFT, name=TTFT, kind="histogram", stats=stats, **kwargs)  # type: ignore[arg-type]


def test_histogram_bucket_deltas_summed_across_replicas_before_the_quantile() -> None:
    # summed bucket increases: le=0.1: 6, le=0.5: 14, le=1: 18, +Inf: 20; sum 7.0; count 20
    points = by_stat(compute_stats(hist_query(), REPLICA_A + REPLICA_B, W))
    assert points[("count", ())] == 20.0
    assert points[("sum", ())] == pytest.approx(7.0)
    assert points[("mean", ())] == pytest.approx(0.35)
    # p50: rank 10 in (0.1, 0.5]: 0.1 + 0.4 * (10 - 6) / (14 - 6) = 0.3
    assert points[("p50", ())] == pytest.approx(0.3)
    # p75: rank 15 in (0.5, 1]: 0.5 + 0.5 * (15 - 14) / (18 - 14) = 0.625
    assert points[("p75", ())] == pytest.approx(0.625)
    # p99: rank 19.8 in the +Inf bucket: highest finite bound
    assert points[("p99", ())] == 1.0
    summed = [(0.1, 6.0), (0.5, 14.0), (1.0, 18.0), (math.inf, 20.0)]
    assert points[("p50", ())] == pytest.approx(histogram_quantile(0.5, summed))


def test_histogram_by_instance_keeps_replicas_apart() -> None:
    points = by_stat(compute_stats(hist_query(by=("instance",)), REPLICA_A + REPLICA_B, W))
    a, b = (("instance", "a"),), (("instance", "b"),)
    assert points[("count", a)] == 14.0
    assert points[("count", b)] == 6.0
    # a: 4, 10, 13, 14 -> p50 rank 7 in (0.1, 0.5]: 0.1 + 0.4 * 3/6
    assert points[("p50", a)] == pytest.approx(0.3)
    # b: 2, 4, 5, 6 -> p50 rank 3 in (0.1, 0.5]: 0.1 + 0.4 * 1/2
    assert points[("p50", b)] == pytest.approx(0.3)
    # b: p75 rank 4.5 in (0.5, 1]: 0.5 + 0.5 * 0.5/1
    assert points[("p75", b)] == pytest.approx(0.75)


def test_histogram_without_observations_in_window_has_no_mean_nor_quantiles() -> None:
    """Issue 26: an empty window is not a non-finite value: count and sum are 0, mean and quantiles absent."""
    flat = [
        series(f"{TTFT}_bucket", [(10.0, 3.0), (20.0, 3.0)], le="1"),
        series(f"{TTFT}_bucket", [(10.0, 3.0), (20.0, 3.0)], le="+Inf"),
        series(f"{TTFT}_sum", [(10.0, 1.0), (20.0, 1.0)]),
        series(f"{TTFT}_count", [(10.0, 3.0), (20.0, 3.0)]),
    ]
    points = by_stat(compute_stats(hist_query(), flat, W))
    assert points == {("count", ()): 0.0, ("sum", ()): 0.0}


def test_histogram_missing_is_none() -> None:
    assert compute_stats(hist_query(), [series(TTFT, [(10.0, 1.0)])], W) is None


# --- ratios ---

RATIO = MetricQuery(key_name="vllm:prefix_cache_hit_rate", ratio=(HITS, QUERIES), kind="counter")


def test_ratio_of_summed_deltas() -> None:
    raw = [
        series(HITS, [(10.0, 10.0), (20.0, 30.0)], instance="a"),
        series(HITS, [(10.0, 5.0), (20.0, 15.0)], instance="b"),
        series(QUERIES, [(10.0, 100.0), (20.0, 200.0)], instance="a"),
        series(QUERIES, [(10.0, 50.0), (20.0, 100.0)], instance="b"),
    ]
    # (20 + 10) / (100 + 50)
    points = compute_stats(RATIO, raw, W)
    assert points is not None
    assert len(points) == 1
    assert points[0].stat is None
    assert points[0].group == ()
    assert points[0].value == pytest.approx(0.2)


def test_ratio_with_zero_denominator_is_absent_not_missing() -> None:
    raw = [series(HITS, [(10.0, 10.0), (20.0, 10.0)]), series(QUERIES, [(10.0, 100.0), (20.0, 100.0)])]
    assert compute_stats(RATIO, raw, W) == []  # the series exist (not missing); the window has no ratio


def test_ratio_missing_either_side_is_none() -> None:
    assert compute_stats(RATIO, [series(HITS, [(10.0, 1.0), (20.0, 2.0)])], W) is None
    assert compute_stats(RATIO, [series(QUERIES, [(10.0, 1.0), (20.0, 2.0)])], W) is None


# --- first window (no start) ---


def test_first_window_counters_histograms_ratios_give_no_points() -> None:
    assert compute_stats(counter_query(), [series(TOKENS, [(15.0, 5.0)])], FIRST) == []
    assert compute_stats(hist_query(), REPLICA_A, FIRST) == []
    raw = [series(HITS, [(15.0, 1.0)]), series(QUERIES, [(15.0, 2.0)])]
    assert compute_stats(RATIO, raw, FIRST) == []


def test_first_window_gauges_give_only_last() -> None:
    query = MetricQuery(key_name=KV, name=KV, kind="gauge", stats=("max", "last"), agg="sum")
    points = compute_stats(query, KV_SERIES, FIRST)
    assert points is not None
    assert [p.stat for p in points] == ["last"]
    assert points[0].value == pytest.approx(0.3 + 0.6)


def test_first_window_missing_metric_is_still_none() -> None:
    assert compute_stats(counter_query(), [], FIRST) is None


# --- end to end from the vllm preset ---


def test_preset_queries_compute_from_raw_series() -> None:
    queries = {q.key_name: q for q in resolve_metrics([MetricConfig(preset="vllm")])}
    raw = [
        series(TOKENS, [(10.0, 100.0), (20.0, 300.0)], instance="a"),
        series(TOKENS, [(10.0, 0.0), (20.0, 100.0)], instance="b"),
        series(HITS, [(10.0, 0.0), (20.0, 25.0)]),
        series(QUERIES, [(10.0, 0.0), (20.0, 100.0)]),
        *KV_SERIES,
    ]
    assert compute_stats(queries[TOKENS], raw, W) == [StatPoint("delta", (), 300.0), StatPoint("rate", (), 30.0)]
    hit_rate = compute_stats(queries["vllm:prefix_cache_hit_rate"], raw, W)
    assert hit_rate == [StatPoint(None, (), 0.25)]
    kv = by_stat(compute_stats(queries[KV], raw, W))  # preset: agg max, stats max + mean
    assert kv[("max", ())] == pytest.approx(0.7)
    assert kv[("mean", ())] == pytest.approx(0.6)
    assert compute_stats(queries[TTFT], raw, W) is None


# --- figures no window can have (a store's wrong answer, issue 37 finding 2) ---


def test_a_negative_or_nonfinite_counter_increase_leaves_its_group_out() -> None:
    query = counter_query(by=("model_name",))
    increases = {
        (TOKENS, (("model_name", "a"),)): 40.0,
        (TOKENS, (("model_name", "b"),)): -1_000_000.0,
        (TOKENS, (("model_name", "c"),)): math.inf,
        (TOKENS, (("model_name", "d"),)): math.nan,
    }
    kept, wrong = possible_increases(query, increases)
    assert kept == {(TOKENS, (("model_name", "a"),)): 40.0}
    assert wrong == 3


def test_a_histograms_sum_may_fall_but_a_bucket_may_not() -> None:
    query = MetricQuery(key_name=TTFT, name=TTFT, kind="histogram", stats=("p99",))
    bucket, total, count = query.series_names()
    falling_sum = {(bucket, (("le", "1"),)): 2.0, (total, ()): -0.5, (count, ()): 2.0}
    assert possible_increases(query, falling_sum) == (falling_sum, 0)
    falling_bucket = {(bucket, (("le", "1"),)): -2.0, (bucket, (("le", "+Inf"),)): 2.0, (total, ()): 1.0}
    assert possible_increases(query, falling_bucket) == ({}, 1)


def test_negative_idle_seconds_are_left_out() -> None:
    gpu0, gpu1 = (("gpu", "0"),), (("gpu", "1"),)
    points = [StatPoint("idle_seconds", gpu0, -49.0), StatPoint("idle_seconds", gpu1, 3.0), StatPoint("max", (), -1.0)]
    assert possible_points(points) == ([points[1], points[2]], 1)


def test_a_group_answered_more_than_once_is_left_out_whole() -> None:
    """An aggregated statistic has one value per group: several (unaggregated series) hold none right."""
    gpu0, gpu1 = (("gpu", "0"),), (("gpu", "1"),)
    points = [StatPoint("max", gpu0, 3.0), StatPoint("max", gpu0, 5.0), StatPoint("max", gpu1, 1.0)]
    points.append(StatPoint("mean", gpu0, 2.0))
    assert possible_points(points) == ([points[2], points[3]], 1)
