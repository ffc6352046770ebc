"""From raw series to window statistics per group: the computation both producers share.

Counters and histograms are combined across series (replicas) *before* the window statistic: the per-series increases
are summed per group (``by`` labels), then turned into delta/rate or quantiles. Gauges get their statistic per series,
then are combined across series with the configured aggregation (``sum``/``mean``/``max``/``min``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.window import Sample, StepWindow, counter_increase, gauge_statistic, histogram_statistic

Group = tuple[tuple[str, str], ...]
Increases = dict[tuple[str, Group], float]

AGGREGATIONS: dict[str, Callable[[Sequence[float]], float]] = {
    "sum": math.fsum,
    "mean": lambda values: math.fsum(values) / len(values),
    "max": max,
    "min": min,
}


@dataclass(frozen=True, slots=True)
class RawSeries:
    """One series' samples: ``name`` is the sample name (``x_bucket`` for a histogram bucket); ``starts``, when known,
    the start time of the process that exposed each sample (a change is a counter reset)."""

    name: str
    labels: Mapping[str, str]
    samples: Sequence[Sample]
    starts: Sequence[float | None] | None = None


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
    if query.kind == "gauge" and query.ratio is None:
        assert query.name is not None
        selected = [s for s in series if s.name == query.name and query.matches(s.labels)]
        return _gauge(query, selected, window) if selected else None
    increases = window_increases(query, series, window)
    if increases is None:
        return None
    return stats_from_increases(query, increases, window)


def window_increases(query: MetricQuery, series: Sequence[RawSeries], window: StepWindow) -> Increases | None:
    """The summed increases of a counter, histogram or ratio query's series during ``window``, per group.

    Keys are ``(sample name, group)``; a histogram bucket's group ends with its ``("le", bound)`` pair. ``None`` when
    no series matches (for a ratio: when either side has none). Without a window start the mapping is empty.
    """
    names = query.series_names()
    selected = [s for s in series if s.name in names and query.matches(s.labels)]
    if query.ratio is not None:
        present = {s.name for s in selected}
        if not all(name in present for name in query.ratio):
            return None
    elif not selected:
        return None
    increases: Increases = {}
    if window.start is None:
        return increases
    bucket_name = names[0] if query.kind == "histogram" and query.ratio is None else None
    for s in selected:
        group = group_of(s.labels, query.by)
        if s.name == bucket_name:
            le = s.labels.get("le")
            if le is None:
                continue
            group = (*group, ("le", le))
        increase = counter_increase(s.samples, window, s.starts)
        if increase is not None:
            key = (s.name, group)
            increases[key] = increases.get(key, 0.0) + increase
    return increases


def merge_increases(*parts: Increases) -> Increases:
    """Add several :data:`Increases` mappings (e.g. Prometheus' aggregated answer and raw series) key by key."""
    merged: Increases = {}
    for part in parts:
        for key, value in part.items():
            merged[key] = merged.get(key, 0.0) + value
    return merged


def stats_from_increases(query: MetricQuery, increases: Increases, window: StepWindow) -> list[StatPoint]:
    """A counter's delta/rate, a histogram's statistics or a ratio, per group, from its window increases."""
    if window.seconds is None:
        return []
    if query.ratio is not None:
        return _ratio(query, increases)
    if query.kind == "histogram":
        return _histogram(query, increases)
    points = []
    for (_, group), delta in sorted(increases.items()):
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


def _histogram(query: MetricQuery, increases: Increases) -> list[StatPoint]:
    bucket_name, sum_name, count_name = query.series_names()
    buckets: dict[Group, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    sums: dict[Group, float] = {}
    counts: dict[Group, float] = {}
    for (name, group), value in increases.items():
        if name == bucket_name:
            try:
                upper = float(group[-1][1])
            except ValueError:
                continue
            buckets[group[:-1]][upper] += value
        elif name == sum_name:
            sums[group] = value
        elif name == count_name:
            counts[group] = value
    points = []
    for group in sorted(set(buckets) | set(sums) | set(counts)):
        bucket_items = sorted(buckets.get(group, {}).items())
        for stat in query.stats:
            statistic = histogram_statistic(stat, bucket_items, sums.get(group), counts.get(group))
            if statistic is not None:
                points.append(StatPoint(stat, group, statistic))
    return points


def _ratio(query: MetricQuery, increases: Increases) -> list[StatPoint]:
    assert query.ratio is not None
    numerator, denominator = query.ratio
    num = {group: value for (name, group), value in increases.items() if name == numerator}
    den = {group: value for (name, group), value in increases.items() if name == denominator}
    points = []
    for group in sorted(set(num) & set(den)):
        points.append(StatPoint(None, group, num[group] / den[group] if den[group] > 0 else math.nan))
    return points
