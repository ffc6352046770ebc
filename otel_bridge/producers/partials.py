"""Mergeable partial statistics of a window: what one reader of some of the targets knows of a window, small enough to
send, merged exactly into the window's statistics.

A reader (the scrape path in one process, or one node's agent on a Ray cluster: docs/step-numbers.md) reads its
targets' series for a window and keeps, per configured metric and label group, only what the window's statistics are
made of:

- **counters, histograms, ratios**: the increase of every ``(sample name, group)`` key (a histogram's buckets,
  ``_sum`` and ``_count`` alike, a ratio's two sides), summed over the reader's series as an exact
  :data:`Expansion`, so that adding the readers' sums gives the correctly rounded sum of every series' increase, the
  number one process reading every target computes (:func:`~otel_bridge.producers.statistics.window_increases`).
  Quantiles come from the merged bucket increases with the merged ``_sum`` bounding them, as in one process;
- **gauges**: every statistic is taken per series (a series is one target's, so one reader's), then combined across
  the series of a group with the metric's ``agg``; a reader keeps, per statistic and group, the exact sum and count
  of its series' values (``sum`` and ``mean``) and their smallest and largest (``min``, ``max``). ``last`` is each
  series' own last sample, combined by ``agg`` like the others: it needs no time across readers, because no series
  is split between them;
- which of the metric's sample names matched a series (a metric none matched is missing; a ratio needs both sides),
  and how many series a ``full_scale`` left out;
- the window report's parts: the reader's lag (the merge takes the largest), its unread targets (named, with the
  seconds since their last reading) and how many targets it read; beside them its targets' failed scrapes.

What a partial holds grows with the configured metrics and their label groups (buckets included), never with the
targets or samples, except for the unread targets it names and those whose scrapes failed. ``max_groups`` bounds the
merged points, never a partial: a group's figures are complete only after the merge. :func:`merge_window` turns the
partials of every reader into the window's metrics and its
:class:`~otel_bridge.producers.window_report.WindowReport`: the same for any split of the targets over readers, and
for one reader of all of them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from opentelemetry.sdk.metrics.export import Metric

from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.statistics import (
    AGGREGATIONS,
    Group,
    ImpossibleValues,
    RawSeries,
    StatPoint,
    exact_total,
    gauge_series,
    gauge_values,
    possible_gauge_series,
    selected_series,
    series_increases,
    stats_from_increases,
    to_metric,
)
from otel_bridge.producers.window_report import MissingMetric, UnreadTarget, WindowReport
from otel_bridge.window import StepWindow

__all__ = [
    "Expansion",
    "GaugePart",
    "MetricPartial",
    "WindowPartial",
    "expansion",
    "merge_metric",
    "merge_window",
    "metric_partial",
    "window_partial",
]

Expansion = tuple[float, ...]
"""Floats whose exact (real) sum is the exact sum of the values they stand for: ``math.fsum`` of an expansion, or of
several concatenated, is the correctly rounded sum of all the values, however they were split."""

_MAX_TERMS = 64  # an expansion of finite floats needs at most ~40 terms (2,098 bits of exponent range / 53)


def expansion(values: Iterable[float]) -> Expansion:
    """An :data:`Expansion` of ``values``: their correctly rounded sum, then the correctly rounded rest, and so on
    until nothing is left (usually one or two floats). A sum that is not finite is its own expansion (as
    :func:`~otel_bridge.producers.statistics.exact_total` gives it)."""
    listed = list(values)
    terms: list[float] = []
    while len(terms) < _MAX_TERMS:
        term = exact_total([*listed, *(-t for t in terms)])
        if not math.isfinite(term):
            return (exact_total(listed),)
        if term == 0.0:
            break
        terms.append(term)
    return tuple(terms)


@dataclass(frozen=True, slots=True)
class GaugePart:
    """One gauge statistic of one label group over a reader's series: the exact sum and the number of the series'
    values, and the smallest and largest of them (what every ``agg`` needs)."""

    total: Expansion
    count: int
    low: float
    high: float

    @staticmethod
    def of(values: Sequence[float]) -> GaugePart:
        """The part of the series' ``values`` (at least one)."""
        return GaugePart(expansion(values), len(values), min(values), max(values))

    @staticmethod
    def merged(parts: Sequence[GaugePart]) -> GaugePart:
        """The part of all the series of ``parts`` (at least one)."""
        return GaugePart(
            expansion(t for p in parts for t in p.total),
            sum(p.count for p in parts),
            min(p.low for p in parts),
            max(p.high for p in parts),
        )

    def value(self, agg: str) -> float:
        """The statistic of the group, its series' values combined with ``agg`` (:data:`AGGREGATIONS`)."""
        if agg == "max":
            return self.high
        if agg == "min":
            return self.low
        total = exact_total(self.total)
        if agg == "sum":
            return total
        if agg == "mean":
            return total / self.count
        raise ValueError(f"unknown aggregation {agg!r}; allowed: {', '.join(AGGREGATIONS)}")


@dataclass(frozen=True, slots=True)
class MetricPartial:
    """What a reader knows of one configured metric in one window (see the module docstring).

    ``present``: the metric's sample names that matched a series; ``increases``: ``(sample name, group)`` -> the
    exact sum of the series' increases (counters, histograms, ratios); ``gauges``: ``(statistic, group)`` -> its
    :class:`GaugePart`; ``impossible``: series a gauge's ``full_scale`` left out."""

    present: frozenset[str] = frozenset()
    increases: Mapping[tuple[str, Group], Expansion] = field(default_factory=dict)
    gauges: Mapping[tuple[str, Group], GaugePart] = field(default_factory=dict)
    impossible: int = 0


def metric_partial(query: MetricQuery, series: Sequence[RawSeries], window: StepWindow) -> MetricPartial:
    """The partial of ``query`` over a reader's ``series`` of ``window`` (a counter's, histogram's or ratio's
    counting samples; a gauge's samples inside the window), as one process selects and computes them
    (:func:`~otel_bridge.producers.statistics.compute_stats`)."""
    if query.kind == "gauge" and query.ratio is None:
        return _gauge_partial(query, series, window)
    selected = selected_series(query, series)
    present = frozenset(s.name for s in selected)
    if window.start is None or not selected:
        return MetricPartial(present)
    increases = {key: expansion(values) for key, values in series_increases(query, selected, window).items()}
    return MetricPartial(present, increases)


def _gauge_partial(query: MetricQuery, series: Sequence[RawSeries], window: StepWindow) -> MetricPartial:
    selected = gauge_series(query, series)
    if not selected:
        return MetricPartial()
    present = frozenset(s.name for s in selected)
    selected, left_out = possible_gauge_series(query, selected, window)
    values = gauge_values(query, selected, window)
    return MetricPartial(present, gauges={key: GaugePart.of(v) for key, v in values.items()}, impossible=left_out)


def merge_metric(
    query: MetricQuery,
    parts: Sequence[MetricPartial],
    window: StepWindow,
    impossible: ImpossibleValues | None = None,
) -> list[StatPoint] | None:
    """The window statistics of ``query`` from the readers' ``parts``: exactly what
    :func:`~otel_bridge.producers.statistics.compute_stats` gives over all their series (``None``: no series matched,
    a missing metric; ``impossible`` is told of the series a ``full_scale`` left out)."""
    present = frozenset().union(*(p.present for p in parts))
    if (query.ratio is not None and not all(name in present for name in query.ratio)) or not present:
        return None
    if query.kind == "gauge" and query.ratio is None:
        left_out = sum(p.impossible for p in parts)
        if impossible is not None and left_out:
            impossible(query, left_out, window)
        gauges: dict[tuple[str, Group], list[GaugePart]] = defaultdict(list)
        for p in parts:
            for key, part in p.gauges.items():
                gauges[key].append(part)
        stats = query.stats if window.start is not None else tuple(s for s in query.stats if s == "last")
        return [
            StatPoint(stat, group, GaugePart.merged(gauges[(stat, group)]).value(query.agg))
            for stat in stats
            for group in sorted(group for s, group in gauges if s == stat)
        ]
    terms: dict[tuple[str, Group], list[float]] = defaultdict(list)
    for p in parts:
        for key, sums in p.increases.items():
            terms[key].extend(sums)
    return stats_from_increases(query, {key: exact_total(t) for key, t in terms.items()}, window)


@dataclass(frozen=True, slots=True)
class WindowPartial:
    """What one reader knows of one window: a :class:`MetricPartial` per configured metric (in the order of the
    queries every reader was given), how far its boundary readings lay from the boundaries (``lag_s``), its targets
    unread at the window's end (``host:port`` -> seconds since their last reading), how many targets it read, and
    the failed scrapes of its targets since its previous partial (``host:port`` -> how many; only those that
    failed), for the reader's health keys; ``sample_gap_s``, for a reader that samples its targets, the longest time a
    target went without a reading in the window."""

    window: StepWindow
    metrics: tuple[MetricPartial, ...]
    lag_s: float = 0.0
    unread: Mapping[str, float] = field(default_factory=dict)
    targets: int = 0
    reader: str = "the bridge"
    scrape_errors: Mapping[str, float] = field(default_factory=dict)
    sample_gap_s: float | None = None


def window_partial(
    queries: Sequence[MetricQuery],
    counting: Mapping[str, Sequence[RawSeries]],
    observed: Mapping[str, Sequence[RawSeries]],
    window: StepWindow,
    *,
    lag_s: float,
    unread: Mapping[str, float],
    targets: int,
    reader: str = "the bridge",
    sample_gap_s: float | None = None,
) -> WindowPartial:
    """A reader's :class:`WindowPartial` from its series by sample name: ``counting`` for counters, histograms and
    ratios (each boundary's reading at the boundary), ``observed`` for gauges (the readings inside the window)."""
    metrics = []
    for query in queries:
        by_name = observed if query.kind == "gauge" and query.ratio is None else counting
        series = [s for name in query.series_names() for s in by_name.get(name, ())]
        metrics.append(metric_partial(query, series, window))
    return WindowPartial(window, tuple(metrics), lag_s, dict(unread), targets, reader, sample_gap_s=sample_gap_s)


def merge_window(
    queries: Sequence[MetricQuery],
    partials: Sequence[WindowPartial],
    window: StepWindow,
    impossible: ImpossibleValues | None = None,
    *,
    reader: str = "the bridge",
) -> tuple[list[Metric], WindowReport]:
    """The window's metrics and report from every reader's partial: each metric merged (:func:`merge_metric`) and
    bounded by its ``max_groups`` (:meth:`WindowReport.within_bounds`), the largest lag, every unread target, the
    metrics no reader matched named missing. Without partials nothing was read: every metric is missing."""
    for partial in partials:
        if len(partial.metrics) != len(queries):
            raise ValueError(
                f"{partial.reader} sent {len(partial.metrics)} metric partials for {len(queries)} configured metrics: "
                "every reader must be given the same metrics"
            )
    targets = sum(p.targets for p in partials)
    unread = {instance: seconds for p in partials for instance, seconds in p.unread.items()}
    report = WindowReport(window, reader=reader, lag_s=max((p.lag_s for p in partials), default=0.0))
    report.sample_gap_s = max((p.sample_gap_s for p in partials if p.sample_gap_s is not None), default=None)
    report.unread = [UnreadTarget(i, seconds) for i, seconds in sorted(unread.items())]
    metrics = []
    for index, query in enumerate(queries):
        points = merge_metric(query, [p.metrics[index] for p in partials], window, impossible)
        if points is None:
            report.missing.append(MissingMetric(query, f"no target among {targets} exposes it"))
        else:  # matched, even without a value in this window (no observations): not missing
            bounded = report.within_bounds(query, points) if points else points
            metrics.append(to_metric(query, bounded, window))
    return metrics, report
