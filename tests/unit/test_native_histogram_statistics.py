"""A native histogram's buckets give the statistics of the classic histogram with the same observations: count, sum,
mean, quantiles and their bounds (statistics.native_increases, native_series), whichever buckets Prometheus leaves out
of its answer for being empty."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.statistics import (
    Increases,
    RawSeries,
    merge_increases,
    native_increases,
    native_series,
    stats_from_increases,
    window_increases,
)
from otel_bridge.prometheus.answers import NativeHistogram, parse_query_data
from otel_bridge.window import StepWindow

NAME = "vllm:request_queue_time_seconds"
BOUNDS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0)
STATS = ("count", "sum", "mean", "p50", "p90", "p99")
W = StepWindow(step=1, start=10.0, end=20.0)


def query(stored_as: str) -> MetricQuery:
    return MetricQuery(key_name=NAME, name=NAME, kind="histogram", stats=STATS, stored_as=stored_as)  # type: ignore[arg-type]


def native(observations: Sequence[float]) -> NativeHistogram:
    """The histogram Prometheus answers for ``observations`` with custom buckets ``BOUNDS``: empty buckets left out."""
    counts = [0.0] * (len(BOUNDS) + 1)
    for value in observations:
        counts[bisect.bisect_left(BOUNDS, value)] += 1
    lowers, uppers = (-math.inf, *BOUNDS), (*BOUNDS, math.inf)
    buckets = tuple((lo, up, c) for lo, up, c in zip(lowers, uppers, counts, strict=True) if c)
    return NativeHistogram(float(len(observations)), math.fsum(observations), buckets)


def classic(observations: Sequence[float]) -> Increases:
    out: Increases = {(f"{NAME}_sum", ()): math.fsum(observations), (f"{NAME}_count", ()): float(len(observations))}
    for bound in (*BOUNDS, math.inf):
        le = "+Inf" if bound == math.inf else str(bound)
        out[(f"{NAME}_bucket", (("le", le),))] = float(sum(1 for v in observations if v <= bound))
    return out


def values(points: Sequence[object]) -> dict[str | None, float]:
    return {p.stat: p.value for p in points}  # type: ignore[attr-defined]


observations = st.lists(st.floats(min_value=1e-4, max_value=8.0, allow_nan=False), min_size=1, max_size=40)


@given(before=observations, during=observations)
def test_a_windows_native_buckets_give_the_classic_statistics(before: list[float], during: list[float]) -> None:
    """The window's increase as end minus start of a native histogram, each boundary's answer missing its empty
    buckets, reads as the classic buckets' increase does."""
    end = native_increases(NAME, (), native([*before, *during]))
    start = {key: -value for key, value in native_increases(NAME, (), native(before)).items()}
    read = values(stats_from_increases(query("native"), merge_increases(end, start), W))
    want = values(stats_from_increases(query("classic"), classic(during), W))
    assert read.keys() == want.keys()
    for stat, value in want.items():
        assert math.isclose(read[stat], value, rel_tol=1e-12, abs_tol=1e-12), stat


def test_the_quantile_bound_holds_on_native_buckets() -> None:
    """All observations below the lowest bound: Prometheus' p99 interpolates to 0.297, the sum proves p99 <= S / 3."""
    tiny = [1e-5] * 200
    read = values(stats_from_increases(query("native"), native_increases(NAME, (), native(tiny)), W))
    assert math.isclose(read["p99"], math.fsum(tiny) / 3, rel_tol=1e-12)


def test_a_histogram_held_both_ways_adds_classic_and_native_series() -> None:
    """Classic series of some replicas and native series of others (read where no classic one has their labels)."""
    one, other = [0.1, 0.4, 2.2], [0.35, 0.6, 9.0, 0.2]
    both = merge_increases(classic(one), native_increases(NAME, (), native(other)))
    read = values(stats_from_increases(query("both"), both, W))
    want = values(stats_from_increases(query("classic"), classic([*one, *other]), W))
    assert read.keys() == want.keys()
    for stat, value in want.items():  # the sums added in another order
        assert math.isclose(read[stat], value, rel_tol=1e-12), stat


def test_a_reset_is_seen_by_the_whole_histogram_even_where_a_bucket_climbed_past_its_old_count() -> None:
    """The new process counted 3 in (0.3, 0.5] where the old one had 2: the count went down, so every part was
    reset, and the window holds what the new process counted."""
    samples = [(9.0, native([0.1, 0.4, 0.4, 0.9, 1.2])), (15.0, native([0.4, 0.45, 0.49]))]
    raw = native_series(NAME, {"instance": "a"}, samples)
    assert {s.name for s in raw} == {NAME, f"{NAME}_sum", f"{NAME}_count"}
    increases = window_increases(query("native"), raw, W)
    assert increases is not None
    read = values(stats_from_increases(query("native"), increases, W))
    assert read["count"] == 3
    assert math.isclose(read["sum"], 1.34)
    assert 0.3 <= read["p50"] <= 0.5


def test_raw_native_series_count_buckets_empty_at_some_samples_from_zero() -> None:
    samples = [(9.0, native([0.1])), (12.0, native([0.1, 3.0])), (18.0, native([0.1, 3.0, 0.6]))]
    raw: list[RawSeries] = native_series(NAME, {}, samples)
    increases = window_increases(query("native"), raw, W)
    assert increases is not None
    assert values(stats_from_increases(query("native"), increases, W))["count"] == 2
    assert {s.labels["le"] for s in raw if s.name == NAME} == {"0.3", "0.5", "0.8", "2.5", "5.0", "+Inf"}


def test_the_answer_reads_native_histograms_only_when_asked() -> None:
    data = {
        "resultType": "matrix",
        "result": [
            {
                "metric": {"__name__": NAME},
                "histograms": [
                    [1.5, {"count": "2", "sum": "0.7", "buckets": [[0, "-Inf", "0.3", "1"], [0, "0.3", "0.5", "1"]]}]
                ],
            }
        ],
    }
    result = parse_query_data(data, (), "http://127.0.0.1:9", native_histograms=True)
    (series,) = result.series
    assert series.samples == ()
    assert series.histograms == ((1.5, NativeHistogram(2.0, 0.7, ((-math.inf, 0.3, 1.0), (0.3, 0.5, 1.0)))),)
