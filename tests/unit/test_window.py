"""Window statistics on hand-made sample sequences: counters, gauges, histograms and Prometheus' quantile algorithm."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_bridge.producers.statistics import (
    baseline,
    counter_increase,
    gauge_statistic,
    histogram_quantile,
    histogram_statistic,
    in_window,
    quantile_bounds,
)
from otel_bridge.window import DEFAULT_STATS, StepWindow, allowed_stats, is_valid_stat, quantile_of

INF = math.inf
NAN = math.nan
W = StepWindow(step=1, start=10.0, end=20.0)
NO_START = StepWindow(step=0, start=None, end=20.0)


# --- StepWindow ---


def test_window_rejects_start_after_end() -> None:
    with pytest.raises(ValueError, match="after end"):
        StepWindow(step=1, start=21.0, end=20.0)


def test_window_seconds_and_baseline() -> None:
    assert W.seconds == 10.0
    assert W.has_baseline is True
    assert NO_START.seconds is None
    assert NO_START.has_baseline is False
    empty = StepWindow(step=2, start=20.0, end=20.0)
    assert empty.seconds == 0.0


def test_window_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        W.end = 30.0  # type: ignore[misc]


def test_in_window_is_half_open_and_baseline_is_last_sample_at_or_before_start() -> None:
    samples = [(5.0, 1.0), (10.0, 2.0), (15.0, 3.0), (20.0, 4.0), (25.0, 5.0)]
    assert in_window(samples, W) == [(15.0, 3.0), (20.0, 4.0)]
    assert baseline(samples, W) == (10.0, 2.0)
    assert in_window(samples, NO_START) == samples[:4]
    assert baseline(samples, NO_START) is None
    assert baseline([(11.0, 1.0)], W) is None


# --- counters ---


def test_counter_delta_uses_baseline_before_start_and_ignores_samples_after_end() -> None:
    samples = [(0.0, 100.0), (5.0, 110.0), (10.0, 120.0), (15.0, 130.0), (20.0, 150.0), (25.0, 500.0)]
    assert counter_increase(samples, W) == 30.0


def test_counter_baseline_strictly_before_start() -> None:
    samples = [(8.0, 120.0), (15.0, 130.0), (19.0, 141.0)]
    assert counter_increase(samples, W) == 21.0


def test_counter_reset_mid_window_vllm_restart() -> None:
    # 100 (baseline), 150, [restart] 5, 20 -> 50 + 5 + 15 = 70
    samples = [(10.0, 100.0), (12.0, 150.0), (14.0, 5.0), (16.0, 20.0)]
    assert counter_increase(samples, W) == 70.0


def test_counter_two_resets_in_one_window() -> None:
    samples = [(9.0, 40.0), (12.0, 50.0), (13.0, 7.0), (15.0, 9.0), (17.0, 2.0), (20.0, 4.0)]
    # 10 + 7 + 2 + 2 + 2
    assert counter_increase(samples, W) == 23.0


def test_counter_reset_exactly_at_the_start_boundary() -> None:
    # the process restarted before the boundary: what it counted before belongs to the previous window
    samples = [(0.0, 100.0), (10.0, 5.0), (15.0, 25.0)]
    assert counter_increase(samples, W) == 20.0


def test_counter_reset_at_first_sample_after_the_boundary() -> None:
    samples = [(10.0, 100.0), (11.0, 3.0), (20.0, 8.0)]
    assert counter_increase(samples, W) == 8.0


def test_counter_series_appearing_mid_window_counts_after_its_first_sample() -> None:
    samples = [(13.0, 10.0), (17.0, 30.0)]
    assert counter_increase(samples, W) == 20.0


def test_counter_new_process_is_told_by_its_start_time_even_when_its_counter_passed_the_old_value() -> None:
    """A restart between two samples whose new counter climbed past the old value: the values alone read +5."""
    samples = [(10.0, 100.0), (14.0, 105.0), (20.0, 110.0)]
    assert counter_increase(samples, W) == 10.0
    assert counter_increase(samples, W, [1.0, 12.0, 12.0]) == 110.0  # the new process counted 105 from zero, then 5


def test_counter_series_of_a_process_started_inside_the_window_counts_from_zero() -> None:
    samples = [(13.0, 10.0), (17.0, 30.0)]
    assert counter_increase(samples, W, [12.0, 12.0]) == 30.0
    assert counter_increase(samples, W, [5.0, 5.0]) == 20.0  # began before the window: earlier counts are not ours


def test_counter_single_sample_in_window_without_baseline_is_zero() -> None:
    assert counter_increase([(13.0, 10.0)], W) == 0.0


def test_counter_baseline_only_is_zero() -> None:
    assert counter_increase([(3.0, 10.0), (9.0, 12.0)], W) == 0.0


def test_counter_empty_and_out_of_window_give_none() -> None:
    assert counter_increase([], W) is None
    assert counter_increase([(21.0, 5.0), (30.0, 9.0)], W) is None


def test_counter_without_window_start_is_none() -> None:
    assert counter_increase([(5.0, 1.0), (15.0, 9.0)], NO_START) is None


def test_counter_nan_samples_in_window_are_skipped() -> None:
    samples = [(10.0, 100.0), (12.0, NAN), (14.0, 120.0), (20.0, NAN)]
    assert counter_increase(samples, W) == 20.0


def test_counter_only_nan_samples_is_none() -> None:
    assert counter_increase([(10.0, NAN), (15.0, NAN)], W) is None


def test_counter_nan_at_the_boundary_falls_back_to_the_last_real_baseline() -> None:
    samples = [(0.0, 100.0), (10.0, NAN), (20.0, 150.0)]
    assert counter_increase(samples, W) == 50.0


# --- gauges ---

GAUGE = [(9.0, 100.0), (10.0, 50.0), (12.0, 3.0), (14.0, 7.0), (16.0, NAN), (18.0, 5.0), (20.0, 5.0), (21.0, 99.0)]


@pytest.mark.parametrize(("stat", "expected"), [("last", 5.0), ("min", 3.0), ("max", 7.0)])
def test_gauge_statistics_use_only_samples_inside_the_window(stat: str, expected: float) -> None:
    assert gauge_statistic(stat, GAUGE, W) == expected


def test_gauge_mean_is_nan_when_a_sample_is_nan_like_avg_over_time() -> None:
    assert math.isnan(gauge_statistic("mean", GAUGE, W) or 0.0)
    without_nan = [s for s in GAUGE if not math.isnan(s[1])]
    assert gauge_statistic("mean", without_nan, W) == 5.0


@pytest.mark.parametrize("stat", ["last", "min", "max", "mean"])
def test_gauge_empty_window_is_none(stat: str) -> None:
    assert gauge_statistic(stat, [], W) is None
    assert gauge_statistic(stat, [(5.0, 1.0), (10.0, 2.0), (25.0, 3.0)], W) is None


@pytest.mark.parametrize("stat", ["last", "min", "max", "mean"])
def test_gauge_all_nan_is_nan(stat: str) -> None:
    value = gauge_statistic(stat, [(12.0, NAN), (15.0, NAN)], W)
    assert value is not None
    assert math.isnan(value)


def test_gauge_last_is_the_last_sample_like_last_over_time() -> None:
    value = gauge_statistic("last", [(12.0, 4.0), (15.0, NAN)], W)
    assert value is not None
    assert math.isnan(value)


def test_gauge_without_start_uses_every_sample_up_to_end() -> None:
    samples = [(1.0, 9.0), (15.0, 2.0), (30.0, 50.0)]
    assert gauge_statistic("max", samples, NO_START) == 9.0
    assert gauge_statistic("last", samples, NO_START) == 2.0


def test_gauge_unknown_statistic_raises() -> None:
    with pytest.raises(ValueError, match="allowed: last, min, max, mean"):
        gauge_statistic("delta", [(12.0, 1.0)], W)


# --- histogram_quantile (Prometheus' bucketQuantile) ---

BUCKETS = [(0.1, 2.0), (0.5, 6.0), (1.0, 9.0), (INF, 10.0)]


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        (0.1, 0.05),  # rank 1 in the first bucket: 0 + 0.1 * 1/2
        (0.5, 0.4),  # rank 5 in (0.1, 0.5]: 0.1 + 0.4 * (5-2)/(6-2)
        (0.8, 0.5 + 0.5 * 2 / 3),  # rank 8 in (0.5, 1]: 0.5 + 0.5 * (8-6)/(9-6)
        (0.9, 1.0),  # rank 9 exactly at the top of (0.5, 1]
        (0.99, 1.0),  # rank 9.9 in the +Inf bucket: highest finite bound
        (1.0, 1.0),
    ],
)
def test_histogram_quantile_hand_computed(q: float, expected: float) -> None:
    assert histogram_quantile(q, BUCKETS) == pytest.approx(expected, rel=1e-12)


def test_histogram_quantile_input_order_does_not_matter() -> None:
    assert histogram_quantile(0.5, list(reversed(BUCKETS))) == pytest.approx(0.4)


def test_histogram_quantile_q1_with_all_observations_in_finite_buckets() -> None:
    assert histogram_quantile(1.0, [(1.0, 10.0), (INF, 10.0)]) == 1.0


def test_histogram_quantile_first_bucket_with_upper_bound_not_positive_returns_that_bound() -> None:
    assert histogram_quantile(0.25, [(0.0, 4.0), (1.0, 8.0), (INF, 8.0)]) == 0.0
    # without the rule this would interpolate from 0 down to -2 and give -1
    assert histogram_quantile(0.25, [(-2.0, 4.0), (1.0, 8.0), (INF, 8.0)]) == -2.0


def test_histogram_quantile_missing_inf_bucket_is_nan() -> None:
    assert math.isnan(histogram_quantile(0.5, [(1.0, 5.0), (2.0, 10.0)]))


def test_histogram_quantile_zero_observations_is_nan() -> None:
    assert math.isnan(histogram_quantile(0.5, [(1.0, 0.0), (2.0, 0.0), (INF, 0.0)]))


def test_histogram_quantile_fewer_than_two_buckets_is_nan() -> None:
    assert math.isnan(histogram_quantile(0.5, [(INF, 5.0)]))
    assert math.isnan(histogram_quantile(0.5, []))


def test_histogram_quantile_non_monotonic_buckets_are_repaired() -> None:
    # envelope: (1, 5), (2, 5), (4, 8), (inf, 10); rank 6 in (2, 4]: 2 + 2 * (6-5)/(8-5)
    buckets = [(1.0, 5.0), (2.0, 3.0), (4.0, 8.0), (INF, 10.0)]
    assert histogram_quantile(0.6, buckets) == pytest.approx(2.0 + 2.0 / 3.0)


def test_histogram_quantile_duplicate_le_are_merged() -> None:
    # (1, 2) and (1, 3) coalesce into (1, 5); rank 3 in (0, 1]: 1 * 3/5
    buckets = [(INF, 10.0), (2.0, 10.0), (1.0, 2.0), (1.0, 3.0)]
    assert histogram_quantile(0.3, buckets) == pytest.approx(0.6)


def test_histogram_quantile_out_of_range_q() -> None:
    assert histogram_quantile(-0.1, BUCKETS) == -INF
    assert histogram_quantile(1.1, BUCKETS) == INF
    assert math.isnan(histogram_quantile(NAN, BUCKETS))


def test_histogram_quantile_q0_with_observations_in_first_bucket() -> None:
    assert histogram_quantile(0.0, BUCKETS) == 0.0


def test_histogram_quantile_q0_with_empty_first_bucket_is_nan() -> None:
    assert math.isnan(histogram_quantile(0.0, [(1.0, 0.0), (2.0, 5.0), (INF, 5.0)]))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    counts=st.lists(st.integers(min_value=0, max_value=1000), min_size=1, max_size=8),
    q1=st.floats(min_value=0.01, max_value=1.0),
    q2=st.floats(min_value=0.01, max_value=1.0),
)
def test_histogram_quantile_is_monotonic_in_q_and_within_finite_bounds(counts: list[int], q1: float, q2: float) -> None:
    cumulative = [float(sum(counts[: i + 1])) for i in range(len(counts))]
    bounds = [0.5 * (i + 1) for i in range(len(counts))]
    buckets = [*zip(bounds, cumulative, strict=True), (INF, cumulative[-1] + 1.0)]
    lo, hi = sorted((q1, q2))
    a, b = histogram_quantile(lo, buckets), histogram_quantile(hi, buckets)
    assert 0.0 <= a <= b <= bounds[-1]


# --- histogram_statistic ---


def test_histogram_statistic_fixed_stats() -> None:
    assert histogram_statistic("count", BUCKETS, 3.5, 10.0) == 10.0
    assert histogram_statistic("sum", BUCKETS, 3.5, 10.0) == 3.5
    assert histogram_statistic("mean", BUCKETS, 3.5, 10.0) == pytest.approx(0.35)


def test_histogram_statistic_mean_without_observations_or_data_is_none() -> None:
    assert histogram_statistic("mean", [], 0.0, 0.0) is None
    assert histogram_statistic("mean", [], None, 3.0) is None
    assert histogram_statistic("mean", [], 1.0, None) is None
    assert histogram_statistic("count", [], None, None) is None


def test_histogram_statistic_quantiles() -> None:
    assert histogram_statistic("p50", BUCKETS, None, None) == pytest.approx(0.4)
    assert histogram_statistic("p99", BUCKETS, None, None) == 1.0
    assert histogram_statistic("p90", [(1.0, 0.0), (INF, 0.0)], 0.0, 0.0) is None  # no observations: no value


@pytest.mark.parametrize("stat", ["max", "p100", "p0", "delta", "P99"])
def test_histogram_statistic_unknown_raises(stat: str) -> None:
    with pytest.raises(ValueError, match="pNN"):
        histogram_statistic(stat, BUCKETS, 1.0, 1.0)


def test_histogram_p99_9_agrees_with_prometheus_at_an_exact_bucket_boundary() -> None:
    # 1000 observations, 999 of them <= 0.1: Prometheus' rank 0.999 * 1000 = 999.0 falls exactly on le=0.1
    buckets = [(0.1, 999.0), (1.0, 1000.0), (INF, 1000.0)]
    assert histogram_quantile(0.999, buckets) == 0.1
    assert histogram_statistic("p99.9", buckets, None, None) == 0.1


# --- quantile_bounds: what the buckets and _sum prove ---

# vLLM 0.32's request_queue_time_seconds buckets: the lowest is le=0.3
QUEUE_BOUNDS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, INF)


def cumulative_buckets(
    observations: list[float], bounds: tuple[float, ...] = QUEUE_BOUNDS
) -> list[tuple[float, float]]:
    return [(bound, float(sum(1 for x in observations if x <= bound))) for bound in bounds]


def test_issue_example_every_request_under_0_3_s_with_a_mean_of_1e_5_s() -> None:
    # 200 requests, all in the lowest bucket, 0.002 s of queueing in all
    buckets = cumulative_buckets([1e-5] * 200)
    assert histogram_quantile(0.99, buckets) == pytest.approx(0.297)  # what Prometheus answers
    # k = 198: the 3 requests ranked 198..200 each queued >= p99, the others >= 0, so 3 * p99 <= 0.002
    assert quantile_bounds(0.99, buckets, 0.002) == pytest.approx((0.0, 0.002 / 3))
    assert histogram_statistic("p99", buckets, 0.002, 200.0) == pytest.approx(0.002 / 3)  # 6.7e-4 s, not 0.297 s
    # k = 100: 101 requests each >= p50
    assert histogram_statistic("p50", buckets, 0.002, 200.0) == pytest.approx(0.002 / 101)
    assert histogram_statistic("mean", buckets, 0.002, 200.0) == pytest.approx(1e-5)


def test_real_vllm_capture_twenty_requests_queued_for_0_00096_s_in_all() -> None:
    # tests/fixtures/vllm: 20 completions, every queue time in le=0.3, _sum 0.000959310000325786
    total = 0.000959310000325786
    buckets = [(bound, 20.0) for bound in QUEUE_BOUNDS]
    # p99 is the largest of the 20 (k = ceil(19.8) = 20): at most the sum, at least the mean
    assert quantile_bounds(0.99, buckets, total) == pytest.approx((total / 20, total))
    assert histogram_statistic("p99", buckets, total, 20.0) == pytest.approx(total)


def test_a_sum_that_needs_an_outlier_lifts_the_quantile_out_of_the_highest_finite_bound() -> None:
    # 9 observations <= 1 s and one above the highest finite bound, 100 s in all: the largest is >= 100 - 9 * 1
    buckets = [(1.0, 9.0), (INF, 10.0)]
    assert histogram_quantile(0.99, buckets) == 1.0
    assert quantile_bounds(0.99, buckets, 100.0) == (91.0, 100.0)
    assert histogram_statistic("p99", buckets, 100.0, 10.0) == 91.0


def test_a_sum_near_the_bucket_top_lifts_the_quantile_inside_its_bucket() -> None:
    # 10 observations in (0, 0.3] summing to 2.9 s: ranks 1..5 are <= p50, ranks 6..10 <= 0.3 s, so 5 * p50 >= 1.4
    buckets = [(0.3, 10.0), (INF, 10.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.15)
    assert histogram_statistic("p50", buckets, 2.9, 10.0) == pytest.approx(0.28)


def test_an_estimate_inside_the_proven_interval_is_prometheus_answer() -> None:
    # BUCKETS: 2 in (0, 0.1], 4 in (0.1, 0.5], 3 in (0.5, 1], 1 above; 3.5 in all
    lower, upper = quantile_bounds(0.5, BUCKETS, 3.5) or (NAN, NAN)
    assert lower <= histogram_quantile(0.5, BUCKETS) <= upper
    assert histogram_statistic("p50", BUCKETS, 3.5, 10.0) == pytest.approx(0.4)


@pytest.mark.parametrize(
    ("buckets", "total", "why"),
    [
        ([(0.3, 200.0), (INF, 200.0)], None, "no _sum"),
        ([(0.3, 200.0), (INF, 200.0)], math.inf, "no finite _sum"),
        ([(0.3, 200.0), (INF, 200.0)], -1.0, "a negative sum of non-negative observations"),
        ([(0.3, 200.0), (INF, 200.0)], 61.0, "more than 200 observations <= 0.3 can sum to"),
        ([(1.0, 9.0), (INF, 10.0)], 0.5, "less than 9 * 0 + 1 * 1 (one observation above 1)"),
        ([(0.3, 2.5), (INF, 3.0)], 0.1, "counts that are not whole numbers"),
        ([(0.3, 5.0), (0.5, 3.0), (INF, 5.0)], 0.1, "counts that are not cumulative"),
        ([(0.0, 2.0), (1.0, 3.0), (INF, 3.0)], 0.1, "a lowest bound <= 0: observations may be negative"),
        ([(0.3, 0.0), (INF, 0.0)], 0.0, "no observations"),
        ([(INF, 5.0)], 1.0, "a single bucket"),
    ],
)
def test_nothing_is_proven_from_inconsistent_or_unusable_histograms(
    buckets: list[tuple[float, float]], total: float | None, why: str
) -> None:
    assert quantile_bounds(0.99, buckets, total) is None, why


def test_the_bound_needs_count_and_buckets_to_count_the_same_observations() -> None:
    buckets = cumulative_buckets([1e-5] * 200)
    assert histogram_statistic("p99", buckets, 0.002, 201.0) == pytest.approx(0.297)  # _count disagrees: unbounded
    assert histogram_statistic("p99", buckets, None, 200.0) == pytest.approx(0.297)  # no _sum: unbounded
    assert histogram_statistic("p99", buckets, 0.002, None) == pytest.approx(0.002 / 3)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(
    observations=st.lists(
        st.one_of(st.floats(min_value=0.0, max_value=300.0), st.sampled_from([0.0, 0.3, 0.5, 1.0, 2.5, 240.0])),
        min_size=1,
        max_size=60,
    ),
    q=st.sampled_from([0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999]),
)
def test_the_true_quantile_is_always_inside_the_bounds_and_never_farther_than_prometheus(
    observations: list[float], q: float
) -> None:
    buckets = cumulative_buckets(observations)
    total = 0.0
    for x in observations:  # as an exporter adds them, one by one
        total += x
    n = len(observations)
    truth = sorted(observations)[max(1, math.ceil(q * n)) - 1]
    bounds = quantile_bounds(q, buckets, total)
    assert bounds is not None
    lower, upper = bounds
    slack = 1e-9 * (1.0 + total)
    assert lower - slack <= truth <= upper + slack
    estimate = histogram_quantile(q, buckets)
    bounded = histogram_statistic(f"p{q * 100:g}", buckets, total, float(n))
    assert bounded is not None
    assert lower <= bounded <= upper
    assert abs(bounded - truth) <= abs(estimate - truth) + slack


# --- quantile_of / stat validation ---


@pytest.mark.parametrize(
    ("stat", "expected"),
    [("p50", 0.5), ("p99", 0.99), ("p90", 0.9), ("p5", 0.05), ("p0.1", 0.001), ("p12.5", 0.125), ("p97.5", 0.975)],
)
def test_quantile_of(stat: str, expected: float) -> None:
    assert quantile_of(stat) == expected


@pytest.mark.parametrize(("stat", "expected"), [("p99.9", 0.999), ("p99.99", 0.9999), ("p33.3", 0.333)])
def test_quantile_of_decimal_places_are_exact(stat: str, expected: float) -> None:
    assert quantile_of(stat) == expected


@pytest.mark.parametrize("stat", ["p0", "p100", "p", "p-1", "99", "p99.", "P99", "p1e1", "mean", "p 99", "p99.9x"])
def test_quantile_of_invalid_is_none(stat: str) -> None:
    assert quantile_of(stat) is None


def test_valid_stats_by_kind() -> None:
    assert is_valid_stat("counter", "delta")
    assert is_valid_stat("counter", "rate")
    assert not is_valid_stat("counter", "max")
    assert is_valid_stat("gauge", "mean")
    assert not is_valid_stat("gauge", "p99")
    assert is_valid_stat("histogram", "p99.9")
    assert is_valid_stat("histogram", "sum")
    assert not is_valid_stat("histogram", "max")
    for kind, stats in DEFAULT_STATS.items():
        assert all(is_valid_stat(kind, s) for s in stats)
    assert allowed_stats("counter") == "delta, rate"
    assert "pNN" in allowed_stats("histogram")
