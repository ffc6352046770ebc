"""From raw series to window statistics per group: the computation both producers share.

Counters and histograms are combined across series (replicas) *before* the window statistic: the per-series increases
are summed per group (``by`` labels), then turned into delta/rate or quantiles. Gauges get their statistic per series,
then are combined across series with the configured aggregation (``sum``/``mean``/``max``/``min``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.window import Sample, StepWindow, counter_increase, gauge_statistic, histogram_statistic

Group = tuple[tuple[str, str], ...]

AGGREGATIONS: dict[str, Callable[[Sequence[float]], float]] = {
    "sum": math.fsum,
    "mean": lambda values: math.fsum(values) / len(values),
    "max": max,
    "min": min,
}


@dataclass(frozen=True, slots=True)
class RawSeries:
    """One series' samples: ``name`` is the sample name (``x_bucket`` for a histogram bucket)."""

    name: str
    labels: Mapping[str, str]
    samples: Sequence[Sample]


@dataclass(frozen=True, slots=True)
class StatPoint:
    """One value of a record: a statistic (``None`` for ratios and raw PromQL) for one label group."""

    stat: str | None
    group: Group
    value: float


def group_of(labels: Mapping[str, str], by: Sequence[str]) -> Group:
    """The ``by`` labels of a series (empty values left out, as Prometheus' ``sum by`` does)."""
    return tuple((name, labels[name]) for name in by if labels.get(name))


def compute_stats(query: MetricQuery, series: Sequence[RawSeries], window: StepWindow) -> list[StatPoint] | None:
    """Window statistics of ``query`` from raw ``series``; ``None`` when no series matches (a missing metric).

    Without a window start, statistics that need a baseline (counter, histogram, ratio) yield no points.
    """
    if query.ratio is not None:
        return _ratio(query, series, window)
    assert query.name is not None
    assert query.kind is not None
    names = set(query.series_names())
    selected = [s for s in series if s.name in names and query.matches(s.labels)]
    if not selected:
        return None
    if query.kind == "counter":
        return _counter(query, selected, window)
    if query.kind == "gauge":
        return _gauge(query, selected, window)
    return _histogram(query, selected, window)


def _sum_increases(
    series: Iterable[RawSeries], window: StepWindow, key: Callable[[RawSeries], Group]
) -> dict[Group, float]:
    totals: dict[Group, float] = {}
    for s in series:
        increase = counter_increase(s.samples, window)
        if increase is not None:
            group = key(s)
            totals[group] = totals.get(group, 0.0) + increase
    return totals


def _counter(query: MetricQuery, series: Sequence[RawSeries], window: StepWindow) -> list[StatPoint]:
    if window.seconds is None:
        return []
    deltas = _sum_increases(series, window, lambda s: group_of(s.labels, query.by))
    points = []
    for group, delta in sorted(deltas.items()):
        for stat in query.stats:
            if stat == "delta":
                points.append(StatPoint(stat, group, delta))
            elif stat == "rate":
                points.append(StatPoint(stat, group, delta / window.seconds if window.seconds > 0 else math.nan))
    return points


def _gauge(query: MetricQuery, series: Sequence[RawSeries], window: StepWindow) -> list[StatPoint]:
    combine = AGGREGATIONS[query.agg]
    points = []
    stats = query.stats if window.start is not None else tuple(s for s in query.stats if s == "last")
    for stat in stats:
        per_group: dict[Group, list[float]] = defaultdict(list)
        for s in series:
            value = gauge_statistic(stat, s.samples, window)
            if value is not None and not math.isnan(value):
                per_group[group_of(s.labels, query.by)].append(value)
        for group, values in sorted(per_group.items()):
            points.append(StatPoint(stat, group, combine(values)))
    return points


def _histogram(query: MetricQuery, series: Sequence[RawSeries], window: StepWindow) -> list[StatPoint]:
    if window.start is None:
        return []
    assert query.name is not None
    bucket_name, sum_name, count_name = query.series_names()
    buckets: dict[Group, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    for s in series:
        if s.name != bucket_name or "le" not in s.labels:
            continue
        increase = counter_increase(s.samples, window)
        if increase is None:
            continue
        try:
            upper = float(s.labels["le"])
        except ValueError:
            continue
        buckets[group_of(s.labels, query.by)][upper] += increase
    sums = _sum_increases((s for s in series if s.name == sum_name), window, lambda s: group_of(s.labels, query.by))
    counts = _sum_increases((s for s in series if s.name == count_name), window, lambda s: group_of(s.labels, query.by))
    points = []
    for group in sorted(set(buckets) | set(sums) | set(counts)):
        bucket_items = sorted(buckets.get(group, {}).items())
        for stat in query.stats:
            value = histogram_statistic(stat, bucket_items, sums.get(group), counts.get(group))
            if value is not None:
                points.append(StatPoint(stat, group, value))
    return points


def _ratio(query: MetricQuery, series: Sequence[RawSeries], window: StepWindow) -> list[StatPoint] | None:
    assert query.ratio is not None
    numerator, denominator = query.ratio
    num_series = [s for s in series if s.name == numerator and query.matches(s.labels)]
    den_series = [s for s in series if s.name == denominator and query.matches(s.labels)]
    if not num_series or not den_series:
        return None
    if window.start is None:
        return []
    num = _sum_increases(num_series, window, lambda s: group_of(s.labels, query.by))
    den = _sum_increases(den_series, window, lambda s: group_of(s.labels, query.by))
    points = []
    for group in sorted(set(num) & set(den)):
        points.append(StatPoint(None, group, num[group] / den[group] if den[group] > 0 else math.nan))
    return points
