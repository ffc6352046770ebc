"""Mergeable partial statistics of a window (otel_bridge.producers.partials): merging the partials of any split of the
targets over readers (nodes) gives exactly the statistics of one process reading every target, the same RawSeries
split differently, restarts (counters that fall, process start times that change), targets with no series (unread)
and gauges left out by their full_scale included."""

from __future__ import annotations

import math
import pickle
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_bridge.health import Health
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.partials import (
    GaugePart,
    WindowPartial,
    expansion,
    merge_metric,
    merge_window,
    metric_partial,
    window_partial,
)
from otel_bridge.producers.statistics import ImpossibleValues, RawSeries, StatPoint, compute_stats
from otel_bridge.ratelimit import RateLimitedLogger
from otel_bridge.window import StepWindow

W = StepWindow(step=3, start=10.0, end=20.0)
FIRST = StepWindow(step=0, start=None, end=20.0)
TIMES = (9.0, 10.0, 12.5, 15.0, 17.5, 20.0)
BOUNDS = ("0.1", "1", "+Inf")

COUNTER = MetricQuery(key_name="c", name="c_total", kind="counter", stats=("delta", "rate"), by=("model",))
BY_INSTANCE = MetricQuery(
    key_name="ci", name="c_total", kind="counter", stats=("delta", "rate"), by=("instance",), max_groups=2
)
HISTOGRAM = MetricQuery(key_name="h", name="h", kind="histogram", stats=("mean", "p50", "p99", "count", "sum"))
RATIO = MetricQuery(key_name="r", ratio=("hits_total", "queries_total"))
GAUGES = [
    MetricQuery(
        key_name=f"g_{agg}", name="g", kind="gauge", stats=("last", "min", "max", "mean"), agg=agg, by=("model",)
    )
    for agg in ("sum", "mean", "max", "min")
]
BUSY = MetricQuery(
    key_name="busy", name="g", kind="gauge", stats=("idle_seconds", "mean"), agg="sum", full_scale=1.0, max_groups=1
)
QUERIES = [COUNTER, BY_INSTANCE, HISTOGRAM, RATIO, *GAUGES, BUSY]

values = st.sampled_from([0.0, 0.1, 0.2, 0.3, 0.7, 1.0, 1.1, 3.0, 1e-9, 1e9, 123.456])


TIME_SETS = st.sets(st.sampled_from(TIMES), min_size=1)
STARTS = st.sampled_from([1.0, 11.0, 16.0])


@st.composite
def samples(draw: st.DrawFn) -> tuple[list[tuple[float, float]], list[float | None] | None]:
    """A series' samples: any values (falling ones are restarts), at some of TIMES, with process start times that may
    change (a restart told by its start time)."""
    times = sorted(draw(TIME_SETS))
    series = [(t, draw(values)) for t in times]
    starts: list[float | None] | None = [draw(STARTS) for _ in times] if draw(st.booleans()) else None
    return series, starts


@st.composite
def target(draw: st.DrawFn, index: int) -> list[RawSeries]:
    """One target's series (none at all: a target unread since before the window)."""
    instance = f"127.0.0.1:{8000 + index}"
    found: list[RawSeries] = []
    names = [("c_total", {"model": m}) for m in ("a", "b")] + [
        ("hits_total", {}),
        ("queries_total", {}),
        ("h_sum", {}),
        ("h_count", {}),
        *(("h_bucket", {"le": le}) for le in BOUNDS),
        *(("g", {"model": m}) for m in ("a", "b")),
    ]
    for name, labels in names:
        if draw(st.booleans()):
            sampled, starts = draw(samples())
            found.append(RawSeries(name, {**labels, "instance": instance}, sampled, starts))
    return found


@st.composite
def split_targets(draw: st.DrawFn) -> tuple[list[list[RawSeries]], list[int]]:
    """Targets and the reader (node) each is assigned to."""
    count = draw(st.integers(1, 6))
    targets = [draw(target(i)) for i in range(count)]
    readers = draw(st.lists(st.integers(0, 3), min_size=count, max_size=count))
    return targets, readers


def readers_of(targets: Sequence[list[RawSeries]], readers: Sequence[int]) -> list[list[RawSeries]]:
    split: dict[int, list[RawSeries]] = {}
    for series, reader in zip(targets, readers, strict=True):
        split.setdefault(reader, []).extend(series)
    return list(split.values())


class Counted(ImpossibleValues):
    def __init__(self) -> None:
        super().__init__(Health(), RateLimitedLogger(__import__("logging").getLogger(__name__), 60.0))
        self.told: list[tuple[str, int]] = []

    def __call__(self, query: MetricQuery, series: int, window: StepWindow) -> None:
        self.told.append((query.key_name, series))


def same(a: list[StatPoint] | None, b: list[StatPoint] | None) -> bool:
    """Equal points, NaN equal to NaN (idle seconds over NaN samples)."""
    if a is None or b is None:
        return a is b
    return len(a) == len(b) and all(
        (x.stat, x.group) == (y.stat, y.group) and (x.value == y.value or (math.isnan(x.value) and math.isnan(y.value)))
        for x, y in zip(a, b, strict=True)
    )


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(split_targets(), st.sampled_from([W, FIRST]))
def test_merged_partials_of_any_split_are_one_process_statistics(
    split: tuple[list[list[RawSeries]], list[int]], window: StepWindow
) -> None:
    targets, readers = split
    every = [s for series in targets for s in series]
    for query in QUERIES:
        one, merged = Counted(), Counted()
        expected = compute_stats(query, every, window, one)
        parts = [metric_partial(query, series, window) for series in readers_of(targets, readers)]
        assert same(merge_metric(query, parts, window, merged), expected), query.key_name
        assert merged.told == one.told


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(split_targets())
def test_merged_window_is_one_readers_window(split: tuple[list[list[RawSeries]], list[int]]) -> None:
    """The metrics (bounded by max_groups after the merge) and the report (largest lag, every unread target, missing
    metrics, label groups) of the split readers are those of one reader of every target."""
    targets, readers = split

    def partial(series: list[RawSeries], lag: float, unread: dict[str, float], count: int) -> WindowPartial:
        counting = {s.name: [x for x in series if x.name == s.name] for s in series}
        return window_partial(QUERIES, counting, counting, W, lag_s=lag, unread=unread, targets=count)

    split_parts = []
    for reader, series in enumerate(readers_of(targets, readers)):
        unread = {f"10.0.0.{reader}:1": 2.0 + reader}
        split_parts.append(partial(series, 0.01 * reader, unread, len(series)))
    whole = partial(
        [s for series in targets for s in series],
        max(p.lag_s for p in split_parts),
        {i: s for p in split_parts for i, s in p.unread.items()},
        sum(p.targets for p in split_parts),
    )
    sent = pickle.loads(pickle.dumps(split_parts))  # they cross the network
    metrics, report = merge_window(QUERIES, sent, W)
    one_metrics, one_report = merge_window(QUERIES, [whole], W)
    assert points_of(metrics) == points_of(one_metrics)
    assert report.lag_s == one_report.lag_s
    assert report.unread == one_report.unread
    assert [(m.query.key_name, m.why) for m in report.missing] == [
        (m.query.key_name, m.why) for m in one_report.missing
    ]
    assert report.groups == one_report.groups


def points_of(metrics: Sequence[Any]) -> dict[str, list[tuple[tuple[tuple[str, Any], ...], float | str]]]:
    return {
        m.name: [
            (tuple(sorted(p.attributes.items())), "nan" if math.isnan(p.value) else p.value) for p in m.data.data_points
        ]
        for m in metrics
    }


def test_one_process_sums_do_not_depend_on_the_order_of_the_series() -> None:
    """The sum of a label group's increases is the correctly rounded sum of the series' increases: (0.1 + 0.2) + 0.3
    and 0.3 + (0.2 + 0.1) differ in the last bit as floats, and a split over nodes adds in another order."""
    query = MetricQuery(key_name="x", name="x_total", kind="counter", stats=("delta",))
    raw = [
        RawSeries("x_total", {"instance": f"h:{i}"}, [(10.0, 0.0), (20.0, value)])
        for i, value in enumerate((0.1, 0.2, 0.3))
    ]
    forward = compute_stats(query, raw, W)
    backward = compute_stats(query, raw[::-1], W)
    assert forward == backward
    assert forward is not None
    assert forward[0].value == 0.6


def test_an_expansion_holds_the_exact_sum() -> None:
    parts = [expansion([1e16, 1.0]), expansion([1.0, -1e16]), expansion([0.1, 0.2])]
    assert math.fsum(t for p in parts for t in p) == math.fsum([1e16, 1.0, 1.0, -1e16, 0.1, 0.2])
    assert expansion([]) == ()
    assert expansion([math.inf, 1.0]) == (math.inf,)
    assert math.isnan(expansion([math.inf, -math.inf])[0])


def test_gauge_parts_combine_by_agg() -> None:
    part = GaugePart.merged([GaugePart.of([0.1, 0.2]), GaugePart.of([0.3])])
    assert (part.value("sum"), part.value("mean"), part.value("max"), part.value("min")) == (0.6, 0.6 / 3, 0.3, 0.1)


def test_a_partial_grows_with_groups_not_with_targets() -> None:
    """A thousand targets' partial holds the same keys as one target's: per metric and label group (and bucket)."""

    def series(count: int) -> list[RawSeries]:
        return [
            RawSeries(name, {"model": "a", "instance": f"h:{i}", **extra}, [(10.0, 1.0), (20.0, 2.5)])
            for i in range(count)
            for name, extra in [("c_total", {}), ("h_sum", {}), ("h_count", {}), ("g", {})]
            + [("h_bucket", {"le": le}) for le in BOUNDS]
        ]

    def size(count: int) -> int:
        every = series(count)
        counting = {name: [s for s in every if s.name == name] for name in {s.name for s in every}}
        queries = [q for q in QUERIES if "instance" not in q.by]  # a group per target grows with targets, as it must
        return len(pickle.dumps(window_partial(queries, counting, counting, W, lag_s=0.0, unread={}, targets=count)))

    assert size(1000) <= size(1) + 64  # a few bytes for bigger counts and sums, none per target
