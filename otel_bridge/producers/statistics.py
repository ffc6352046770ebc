"""Window statistics: all the math from samples to one step's statistic points, for both producers.

Samples are ``(unix_seconds, value)`` pairs in time order. The same functions serve both producers: the PromQL path
feeds them raw samples from Prometheus' range selectors (and the increases Prometheus summed), the scrape path its
own boundary and in-step readings, so the two paths compute identical numbers from identical samples. The statistics
a metric kind takes are named in :mod:`otel_bridge.window`.

- **One series over a window**: a counter's increase (exact, reset-aware: :func:`counter_increase`), a gauge's
  last/min/max/mean of the samples inside it (:func:`gauge_statistic`) and the idle time it implies
  (:func:`idle_seconds`: GPU-seconds not busy), a histogram's statistics from its per-bucket
  increases (:func:`histogram_statistic`: Prometheus' ``histogram_quantile`` estimate bounded by what the buckets and
  ``_sum`` prove, :func:`quantile_bounds`).
- **Across series** (replicas): counters and histograms are combined *before* the window statistic: the per-series
  increases are summed per group (``by`` labels), then turned into delta/rate or quantiles. Gauges get their
  statistic per series, then are combined across series with the configured aggregation (``sum``/``mean``/``max``/
  ``min``) (:func:`compute_stats`).
- **Into a record**: a query's points become one OpenTelemetry ``Metric`` (:func:`to_metric`, which applies the
  metric's ``scale``, e.g. millijoules to joules); a configured metric that matched nothing is reported by name
  (:mod:`otel_bridge.producers.window_report`).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from opentelemetry.sdk.metrics.export import Gauge, Metric

from otel_bridge.health import IMPOSSIBLE_VALUES, Health
from otel_bridge.producers.metric_set import ROLE_LABEL, MetricQuery
from otel_bridge.prometheus.answers import NativeHistogram
from otel_bridge.ratelimit import RateLimitedLogger
from otel_bridge.schema import STAT_ATTRIBUTE, gauge_metric
from otel_bridge.window import GAUGE_STATS, IDLE_STAT, StepWindow, allowed_stats, quantile_of

Sample = tuple[float, float]
"""One sample: ``(unix seconds, value)``."""


def in_window(samples: Sequence[Sample], window: StepWindow) -> list[Sample]:
    """The samples with ``start < t <= end`` (all samples up to ``end`` when the window has no start)."""
    if window.start is None:
        return [s for s in samples if s[0] <= window.end]
    start = window.start
    return [s for s in samples if start < s[0] <= window.end]


def baseline(samples: Sequence[Sample], window: StepWindow) -> Sample | None:
    """The last sample at or before the window's start, or ``None``."""
    index = _baseline_index(samples, window)
    return None if index is None else samples[index]


def _baseline_index(samples: Sequence[Sample], window: StepWindow) -> int | None:
    if window.start is None:
        return None
    found: int | None = None
    for index, sample in enumerate(samples):
        if sample[0] <= window.start:
            if not math.isnan(sample[1]):
                found = index
        else:
            break
    return found


def counter_increase(
    samples: Sequence[Sample], window: StepWindow, starts: Sequence[float | None] | None = None
) -> float | None:
    """Increase of a counter during the window, exact and reset-aware.

    Sums the increments between consecutive samples from the baseline (last sample at or before ``start``) to the last
    sample inside the window. A new process counted from zero: its first value is its increment. A new process is told
    by its start time where ``starts`` gives one per sample (the target's ``process_start_time_seconds``: it changed),
    and always by a value lower than its predecessor. A series without a baseline sample contributes what it counted
    after its first sample, or everything it counted when its process started inside the window. ``None`` when the
    window has no start or the series has no sample in or before the window. NaN samples are skipped; a negative
    sample is read as zero (a reset), never as a negative increase.
    """
    if window.start is None:
        return None
    base = _baseline_index(samples, window)
    chosen = [i for i, (t, _) in enumerate(samples) if window.start < t <= window.end]
    if base is not None:
        chosen.insert(0, base)
    # A counter is never negative: a sample below zero (a broken exporter) counts as a reset to zero.
    points = [(max(samples[i][1], 0.0), starts[i] if starts else None) for i in chosen if not math.isnan(samples[i][1])]
    if not points:
        return None
    total = 0.0
    first_start = points[0][1]
    if base is None and first_start is not None and first_start > window.start:
        total = points[0][0]  # its process began inside the window: everything it counted is the window's
    for (previous, previous_start), (current, current_start) in itertools.pairwise(points):
        restarted = previous_start is not None and current_start is not None and current_start != previous_start
        total += current if restarted or current < previous else current - previous
    return total


def idle_seconds(samples: Sequence[Sample], window: StepWindow, full_scale: float) -> float | None:
    """The seconds of the window a device was idle: ``seconds - sum(busy_i / full_scale x d_i)``.

    ``busy_i`` is each sample inside the window held to ``[0, full_scale]``, ``full_scale`` the gauge's value at and
    above which the device is fully busy (:attr:`MetricQuery.idle_scale`): 100 for ``DCGM_FI_DEV_GPU_UTIL``, 1 for a
    ``DCGM_FI_PROF_*`` ratio (whose values outside that range :func:`compute_stats` leaves out before), and ``busy_at``
    1 for a count such as ``vllm:num_requests_running``, whose samples are then 1 (running at least one request) or 0
    (none). Each sample stands for the time since the previous one (the first for the time since the window's start,
    the last also for the time up to its end): ``d_i``. Evenly spaced samples (a scrape interval) weigh the same, and
    the figure is ``seconds x (1 - mean(busy) / full_scale)``; samples bunched together (the scrape path's readings at
    every phase boundary) do not outweigh the rest. Summed over GPUs this is the window's idle GPU-seconds, summed
    over rollout servers their idle server-seconds (docs/step-numbers.md: what a gauge sampled at an interval can and
    cannot see). ``None`` without samples or without a window start; NaN when a sample is NaN.
    """
    if window.seconds is None or window.start is None:
        return None
    inside = in_window(samples, window)
    if not inside:
        return None
    if any(math.isnan(v) for _, v in inside):
        return math.nan
    since = [window.start, *(t for t, _ in inside[:-1])]
    until = [*(t for t, _ in inside[:-1]), window.end]
    busy = math.fsum(
        min(max(v, 0.0), full_scale) / full_scale * (b - a) for (_, v), a, b in zip(inside, since, until, strict=True)
    )
    return window.seconds - busy


def out_of_range(samples: Sequence[Sample], window: StepWindow, full_scale: float) -> bool:
    """Whether a sample inside the window lies outside ``[0, full_scale]``: a utilization of 150 % or -50 % is no
    device's (a broken exporter), and no statistic of the series in this window is trusted. NaN is not out of range
    (the statistics handle it as Prometheus does)."""
    return any(not 0.0 <= v <= full_scale for _, v in in_window(samples, window) if not math.isnan(v))


def gauge_statistic(
    stat: str, samples: Sequence[Sample], window: StepWindow, full_scale: float | None = None
) -> float | None:
    """``last``/``min``/``max``/``mean``/``idle_seconds`` of the gauge samples inside the window; ``None`` without any.

    NaN is handled as Prometheus' ``*_over_time`` functions do, so both paths agree: ``last`` is the last sample even
    if NaN; ``min``/``max`` ignore NaN samples unless all are NaN; ``mean`` is NaN when any sample is.
    ``idle_seconds`` needs ``full_scale`` (:func:`idle_seconds`).
    """
    if stat == IDLE_STAT:
        if full_scale is None:
            raise ValueError(f"gauge statistic {IDLE_STAT} needs full_scale (the value of a fully busy device)")
        return idle_seconds(samples, window, full_scale)
    values = [v for _, v in in_window(samples, window)]
    if not values:
        return None
    if stat == "last":
        return values[-1]
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return math.nan
    if stat == "min":
        return min(finite)
    if stat == "max":
        return max(finite)
    if stat == "mean":
        return math.nan if len(finite) < len(values) else math.fsum(finite) / len(finite)
    raise ValueError(f"unknown gauge statistic {stat!r}; allowed: {', '.join(GAUGE_STATS)}")


def _cumulative_buckets(buckets: Iterable[tuple[float, float]]) -> tuple[list[tuple[float, float]], bool] | None:
    """``(upper_bound, cumulative_count)`` pairs merged by bound, sorted and made monotonic as Prometheus does.

    The flag says whether a count had to be raised to its predecessor's (a histogram that is not cumulative).
    ``None`` without a ``+Inf`` bucket or with fewer than two buckets.
    """
    merged: dict[float, float] = {}
    for upper, count in buckets:
        merged[upper] = merged.get(upper, 0.0) + count
    ordered = sorted(merged.items())
    if len(ordered) < 2 or not math.isinf(ordered[-1][0]) or ordered[-1][0] < 0:
        return None
    monotonic: list[tuple[float, float]] = []
    running_max = -math.inf
    for upper, count in ordered:
        running_max = max(running_max, count)
        monotonic.append((upper, running_max))
    repaired = any(count != fixed for (_, count), (_, fixed) in zip(ordered, monotonic, strict=True))
    return monotonic, repaired


def histogram_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float:
    """Prometheus' ``histogram_quantile`` over ``(upper_bound, cumulative_count)`` buckets.

    Follows Prometheus' algorithm exactly (linear interpolation inside the bucket, the lowest bucket starting at 0, the
    ``+Inf`` bucket answered with the highest finite bound, non-monotonic counts repaired), so the scrape path and the
    PromQL path agree with ``histogram_quantile`` evaluated by Prometheus. Returns NaN when there are no observations,
    no ``+Inf`` bucket or fewer than two buckets. :func:`histogram_statistic` bounds this estimate with
    :func:`quantile_bounds`.
    """
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    prepared = _cumulative_buckets(buckets)
    if prepared is None:
        return math.nan
    monotonic = prepared[0]
    observations = monotonic[-1][1]
    if observations == 0 or math.isnan(observations):
        return math.nan
    rank = q * observations
    index = next((i for i, (_, count) in enumerate(monotonic[:-1]) if count >= rank), len(monotonic) - 1)
    if index == len(monotonic) - 1:
        return monotonic[-2][0]
    if index == 0 and monotonic[0][0] <= 0:
        return monotonic[0][0]
    bucket_start = 0.0
    bucket_end, count = monotonic[index]
    if index > 0:
        bucket_start = monotonic[index - 1][0]
        count -= monotonic[index - 1][1]
        rank -= monotonic[index - 1][1]
    if count == 0:
        return math.nan
    return bucket_start + (bucket_end - bucket_start) * (rank / count)


# Relative slack for float rounding in ``_sum`` (the exporter adds observations one by one in binary floating point).
_SUM_SLACK: Final = 1e-9


def quantile_bounds(
    q: float, buckets: Iterable[tuple[float, float]], total: float | None
) -> tuple[float, float] | None:
    """The interval ``[lower, upper]`` the q-quantile must lie in, proven by the ``buckets`` and ``_sum`` (``total``).

    **Setting.** The histogram counts ``n`` observations ``x(1) <= ... <= x(n)`` (``n`` = the ``+Inf`` bucket's count)
    whose sum is ``S`` (``total``). Bucket ``j`` holds the observations in ``(b[j-1], b[j]]``, with ``b[-1] = 0``:
    observations are taken as non-negative, the assumption Prometheus' interpolation makes for the lowest bucket
    (latencies, token counts). The q-quantile is the order statistic ``x(k)``, ``k = max(1, ceil(q*n))`` with ``q*n``
    computed as Prometheus computes its rank, so ``x(k)`` lies in the bucket ``histogram_quantile`` interpolates in:
    the first bucket ``j`` whose cumulative count ``C(j) >= k``. Its ranks are ``C(j-1)+1 .. C(j)``; the cumulative
    counts place every other rank ``i`` in its bucket too, so ``lo(i) <= x(i) <= hi(i)`` with ``lo(i)``, ``hi(i)``
    the bounds of that bucket (``hi(i) = inf`` in the ``+Inf`` bucket).

    **Upper bound.** The ``a = C(j) - k + 1`` observations ranked ``k .. C(j)`` are each ``>= x(k)``; every other
    observation ``i`` is ``>= lo(i)``. Adding the ``n`` inequalities: ``S >= a * x(k) + sum_{other i} lo(i)``, so::

        x(k) <= (S - sum_{i outside k..C(j)} lo(i)) / (C(j) - k + 1).

    **Lower bound.** The ``c = k - C(j-1)`` observations ranked ``C(j-1)+1 .. k`` are each ``<= x(k)``; every other
    observation ``i`` is ``<= hi(i)``. So ``S <= c * x(k) + sum_{other i} hi(i)``::

        x(k) >= (S - sum_{i outside C(j-1)+1..k} hi(i)) / (k - C(j-1)),

    which says nothing when one of those other observations is in the ``+Inf`` bucket. (Bounding the observations
    of other buckets by ``x(k)`` as well gains nothing: they lie wholly above or below ``x(k)``'s bucket, and the
    interval is intersected with that bucket, ``lo(k) <= x(k) <= hi(k)``.)

    **Example** (vLLM's ``request_queue_time_seconds``, lowest bucket ``le=0.3``): 200 requests all under 0.3 s with
    ``S = 0.002`` s (mean 1e-5 s). Prometheus' p99 is ``0.3 * 0.99 = 0.297`` s. Here ``k = 198``, the 3 observations
    ranked 198..200 are each ``>= p99`` and the others ``>= 0``, so ``p99 <= 0.002 / 3 = 6.7e-4`` s; the p50
    (``k = 100``) is at most ``0.002 / 101 = 2.0e-5`` s.

    ``None`` when nothing is proven this way: ``q`` not in ``(0, 1)``, no observations, fewer than two buckets or no
    ``+Inf`` bucket, counts that are not whole numbers or not cumulative, a lowest bound ``<= 0`` (the histogram
    expects observations that are not positive), no finite ``S``, or an ``S`` outside ``[sum lo(i), sum hi(i)]``
    (``_sum`` and the buckets then describe different observations, and neither is trusted over the other).
    """
    if total is None or not math.isfinite(total) or not 0.0 < q < 1.0:
        return None
    prepared = _cumulative_buckets(buckets)
    if prepared is None or prepared[1]:
        return None
    cumulative = [count for _, count in prepared[0]]
    highs = [upper for upper, _ in prepared[0]]
    lows = [0.0, *highs[:-1]]
    counts = [cumulative[0], *(b - a for a, b in itertools.pairwise(cumulative))]
    n = cumulative[-1]
    if highs[0] <= 0 or n <= 0 or any(c != math.floor(c) for c in counts):
        return None
    all_lows = math.fsum(c * lo for c, lo in zip(counts, lows, strict=True))
    all_highs = math.fsum(c * hi for c, hi in zip(counts, highs, strict=True) if c)
    if total < all_lows * (1 - _SUM_SLACK) or total > all_highs * (1 + _SUM_SLACK):
        return None
    k = max(1.0, float(math.ceil(q * n)))
    j = next(index for index, count in enumerate(cumulative) if count >= k)
    before = cumulative[j - 1] if j else 0.0
    at_or_above = cumulative[j] - k + 1  # ranks k .. C(j)
    at_or_below = k - before  # ranks C(j-1)+1 .. k
    upper = min(highs[j], (total - (all_lows - at_or_above * lows[j])) / at_or_above)
    above = cumulative[j] - k  # ranks k+1 .. C(j)
    others_high = math.fsum(
        [
            *(c * hi for i, (c, hi) in enumerate(zip(counts, highs, strict=True)) if c and i != j),
            above * highs[j] if above else 0.0,
        ]
    )
    lower = lows[j] if math.isinf(others_high) else max(lows[j], (total - others_high) / at_or_below)
    return min(lower, upper), upper  # min: float rounding only, the sum check proves lower <= upper


def histogram_statistic(
    stat: str,
    bucket_deltas: Iterable[tuple[float, float]],
    sum_delta: float | None,
    count_delta: float | None,
) -> float | None:
    """A histogram statistic from the increases of its buckets, ``_sum`` and ``_count`` during the window.

    ``count`` is the number of observations made during the window, ``sum`` their total, ``mean`` their average,
    ``pNN`` the quantile: Prometheus' ``histogram_quantile``
    estimate, moved into the interval :func:`quantile_bounds` proves from the buckets and ``_sum`` when it lies
    outside (then it is that interval's nearest end, e.g. the largest value the quantile can have). The bound is not
    applied when ``_count`` and the ``+Inf`` bucket disagree (they do not count the same observations). ``mean`` and
    ``pNN`` of a window without observations are ``None`` (no value, where Prometheus says NaN): an empty window is
    not a non-finite value, so it is not counted in ``otel_bridge/nonfinite_values``; NaN samples still give NaN.
    """
    if stat == "count":
        return count_delta
    if stat == "sum":
        return sum_delta
    if stat == "mean":
        if sum_delta is None or count_delta is None or count_delta == 0:
            return None
        return sum_delta / count_delta
    q = quantile_of(stat)
    if q is None:
        raise ValueError(f"unknown histogram statistic {stat!r}; allowed: {allowed_stats('histogram')}")
    buckets = list(bucket_deltas)
    observations = math.fsum(count for upper, count in buckets if upper == math.inf)
    if observations == 0 or count_delta == 0:
        return None
    estimate = histogram_quantile(q, buckets)
    if math.isnan(estimate):
        return estimate
    if count_delta is not None and observations != count_delta:
        return estimate
    bounds = quantile_bounds(q, buckets, sum_delta)
    if bounds is None:
        return estimate
    return min(max(estimate, bounds[0]), bounds[1])


Group = tuple[tuple[str, str], ...]
Increases = dict[tuple[str, Group], float]


def exact_total(values: Iterable[float]) -> float:
    """The correctly rounded sum of ``values`` (``math.fsum``), whatever their order: NaN where infinities of both
    signs meet (``inf - inf``), as float addition gives, and its infinity where the sum overflows."""
    listed = list(values)
    try:
        return math.fsum(listed)
    except ValueError:  # inf + -inf
        return math.nan
    except OverflowError:  # finite values whose sum is beyond the largest float: the infinity float addition gives
        return sum(listed)


AGGREGATIONS: dict[str, Callable[[Sequence[float]], float]] = {
    "sum": exact_total,
    "mean": lambda values: exact_total(values) / len(values),
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
    native: bool = False
    """A part of a native histogram's samples (:func:`native_series`)."""


@dataclass(frozen=True, slots=True)
class StatPoint:
    """One value of a record: a statistic (``None`` for ratios and raw PromQL) for one label group."""

    stat: str | None
    group: Group
    value: float


def group_of(labels: Mapping[str, str], by: Sequence[str]) -> Group:
    """The ``by`` labels of a series (empty values left out, as Prometheus' ``sum by`` does)."""
    return tuple((name, labels[name]) for name in by if labels.get(name))


def with_roles(query: MetricQuery, series: Sequence[RawSeries]) -> list[RawSeries]:
    """``series`` labelled with their roles when ``query`` groups by role: one copy per role a series serves (the
    :data:`~otel_bridge.producers.metric_set.ROLE_LABEL` label set), none for a series in no role."""
    if not query.roles:
        return list(series)
    return [replace(s, labels={**s.labels, ROLE_LABEL: role}) for s in series for role in query.roles_of(s.labels)]


def compute_stats(
    query: MetricQuery,
    series: Sequence[RawSeries],
    window: StepWindow,
    impossible: ImpossibleValues | None = None,
) -> list[StatPoint] | None:
    """Window statistics of ``query`` from raw ``series``; ``None`` when no series matches (a missing metric).

    Without a window start, statistics that need a baseline (counter, histogram, ratio) yield no points. A gauge
    with a ``full_scale`` leaves out of the window's statistics each series with a sample outside ``[0,
    full_scale]`` in the window (:func:`out_of_range`), and tells ``impossible`` how many it left out.
    """
    if query.kind == "gauge" and query.ratio is None:
        selected = gauge_series(query, series)
        if not selected:
            return None
        selected, left_out = possible_gauge_series(query, selected, window)
        if impossible is not None and left_out:
            impossible(query, left_out, window)
        combine = AGGREGATIONS[query.agg]
        values = gauge_values(query, selected, window)
        return [StatPoint(stat, group, combine(v)) for (stat, group), v in values.items()]
    increases = window_increases(query, series, window)
    if increases is None:
        return None
    return stats_from_increases(query, increases, window)


def possible_increases(query: MetricQuery, increases: Increases) -> tuple[Increases, int]:
    """``increases`` without the label groups whose figures no window can have, and how many groups that left out.

    A counter's increase over a window is never negative and never NaN or infinite (nor a histogram's buckets' and
    count's, nor a ratio's sides'); a histogram's sum is only never non-finite (observations may be negative). A group
    with one such figure is left out whole (a histogram's buckets with it), never corrected: its true value is
    unknown. A store's answer that holds one is a wrong answer (:class:`~otel_bridge.producers.promql` counts it)."""
    histogram = query.kind == "histogram" and query.ratio is None
    buckets = query.bucket_names
    may_fall = query.series_names()[1] if histogram else None
    bad: set[Group] = set()
    for (name, group), value in increases.items():
        base = group[:-1] if name in buckets and group and group[-1][0] == "le" else group
        if not math.isfinite(value) or (value < 0.0 and name != may_fall):
            bad.add(base)
    if not bad:
        return increases, 0
    kept = {
        (name, group): value
        for (name, group), value in increases.items()
        if (group[:-1] if name in buckets and group and group[-1][0] == "le" else group) not in bad
    }
    return kept, len(bad)


def possible_points(points: Sequence[StatPoint]) -> tuple[list[StatPoint], int]:
    """``points`` without those no window can have, and how many label groups that left out: idle seconds that are
    negative, NaN or infinite (a device is idle between none and all of a window's seconds), and every statistic of a
    group answered more than once (a statistic aggregated by the metric's ``by`` labels has one value per group: a
    store answering several, unaggregated series under one group, holds none of them right)."""
    seen = Counter((p.stat, p.group) for p in points)
    repeated = {key for key, count in seen.items() if count > 1}
    kept = [
        p
        for p in points
        if (p.stat, p.group) not in repeated and (p.stat != IDLE_STAT or (math.isfinite(p.value) and p.value >= 0.0))
    ]
    idle_wrong = sum(1 for p in points if (p.stat, p.group) not in repeated) - len(kept)
    return kept, len(repeated) + idle_wrong


def window_increases(query: MetricQuery, series: Sequence[RawSeries], window: StepWindow) -> Increases | None:
    """The summed increases of a counter, histogram or ratio query's series during ``window``, per group.

    Keys are ``(sample name, group)``; a histogram bucket's group ends with its ``("le", bound)`` pair. ``None`` when
    no series matches (for a ratio: when either side has none). Without a window start the mapping is empty.
    """
    selected = selected_series(query, series)
    if query.ratio is not None:
        present = {s.name for s in selected}
        if not all(name in present for name in query.ratio):
            return None
    elif not selected:
        return None
    if window.start is None:
        return {}
    return {key: exact_total(values) for key, values in series_increases(query, selected, window).items()}


def series_increases(
    query: MetricQuery, selected: Sequence[RawSeries], window: StepWindow
) -> dict[tuple[str, Group], list[float]]:
    """Each of the ``selected`` series' increase during ``window`` (which has a start), listed under its ``(sample
    name, group)`` key: a histogram bucket's group ends with its ``("le", bound)`` pair, a bucket without ``le`` and a
    series without an increase are left out. A key's sum is taken exactly (``math.fsum``, correctly rounded), so it
    does not depend on the order of the series, nor on how they are split over readers
    (:func:`exact_total`; :mod:`otel_bridge.producers.partials`)."""
    listed: dict[tuple[str, Group], list[float]] = defaultdict(list)
    for s in selected:
        group = group_of(s.labels, query.by)
        if s.name in query.bucket_names:
            le = s.labels.get("le")
            if le is None:
                continue
            group = (*group, ("le", le))
        increase = counter_increase(s.samples, window, s.starts)
        if increase is not None:
            listed[(s.name, group)].append(increase)
    return listed


def selected_series(query: MetricQuery, series: Sequence[RawSeries]) -> list[RawSeries]:
    """The series of a counter, histogram or ratio query among ``series`` (labelled with their roles), a histogram's
    native series among them where the store holds it natively (:meth:`MetricQuery.read_names`)."""
    names = query.read_names()
    return [s for s in with_roles(query, series) if s.name in names and query.matches(s.labels)]


def gauge_series(query: MetricQuery, series: Sequence[RawSeries]) -> list[RawSeries]:
    """The series of a gauge query among ``series`` (labelled with their roles)."""
    return [s for s in with_roles(query, series) if s.name == query.name and query.matches(s.labels)]


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
            elif stat == "rate" and window.seconds > 0:  # a window of no length has no rate
                points.append(StatPoint(stat, group, delta / window.seconds))
    return points


def possible_gauge_series(
    query: MetricQuery, selected: Sequence[RawSeries], window: StepWindow
) -> tuple[list[RawSeries], int]:
    """The gauge's ``selected`` series but those its ``full_scale`` leaves out of ``window`` (:func:`out_of_range`),
    and how many it left out."""
    if query.full_scale is None:
        return list(selected), 0
    full_scale = query.full_scale
    possible = [s for s in selected if not out_of_range(s.samples, window, full_scale)]
    return possible, len(selected) - len(possible)


def gauge_values(
    query: MetricQuery, series: Sequence[RawSeries], window: StepWindow
) -> dict[tuple[str, Group], list[float]]:
    """Each gauge statistic of each series over ``window`` (``last`` only without a start), listed under its
    ``(statistic, group)`` key in statistic order, then group order: what the metric's ``agg`` combines into the
    group's value. A series without a value (no sample inside the window) or with a NaN one adds nothing."""
    stats = query.stats if window.start is not None else tuple(s for s in query.stats if s == "last")
    values: dict[tuple[str, Group], list[float]] = {}
    for stat in stats:
        per_group: dict[Group, list[float]] = defaultdict(list)
        for s in series:
            value = gauge_statistic(stat, s.samples, window, query.idle_scale)
            if value is not None and not math.isnan(value):
                per_group[group_of(s.labels, query.by)].append(value)
        values.update(((stat, group), v) for group, v in sorted(per_group.items()))
    return values


def _histogram(query: MetricQuery, increases: Increases) -> list[StatPoint]:
    bucket_name, sum_name, count_name = query.series_names()
    buckets: dict[Group, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    native: dict[Group, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    sums: dict[Group, float] = {}
    counts: dict[Group, float] = {}
    for (name, group), value in increases.items():
        if name in query.bucket_names:
            try:
                upper = float(group[-1][1])
            except ValueError:
                continue
            (buckets if name == bucket_name else native)[group[:-1]][upper] += value
        elif name == sum_name:
            sums[group] = value
        elif name == count_name:
            counts[group] = value
    points = []
    for group in sorted(set(buckets) | set(native) | set(sums) | set(counts)):
        bucket_items = _with_native(buckets.get(group, {}), native.get(group, {}))
        for stat in query.stats:
            statistic = histogram_statistic(stat, bucket_items, sums.get(group), counts.get(group))
            if statistic is not None:
                points.append(StatPoint(stat, group, statistic))
    return points


def _with_native(cumulative: Mapping[float, float], own: Mapping[float, float]) -> list[tuple[float, float]]:
    """``(upper bound, cumulative count)`` pairs of a classic histogram's ``cumulative`` bucket increases plus a native
    one's buckets (``own``: each bucket's own count by its upper bound, 0 at bounds known only as a lower one,
    :func:`native_increases`), at every bound either knows. A bound one of them lacks takes its count below that
    bound (the same layout on both, as Prometheus' conversion keeps it, lacks none)."""
    if not own:
        return sorted(cumulative.items())
    classic = sorted(cumulative.items())
    merged = []
    for bound in sorted({*cumulative, *own, math.inf}):
        below = [count for upper, count in classic if upper <= bound]
        native = math.fsum(count for upper, count in own.items() if upper <= bound)
        merged.append((bound, (below[-1] if below else 0.0) + native))
    return merged


def native_bound(value: float) -> str:
    """A native histogram's bucket bound as an ``le`` value: ``"0.3"``, ``"+Inf"``."""
    return "+Inf" if value == math.inf else repr(value)


def native_increases(name: str, group: Group, histogram: NativeHistogram) -> Increases:
    """One native ``histogram`` of series ``name`` in label ``group`` as increases of its parts: ``name_count``,
    ``name_sum``, and each bucket's own count under ``(name, group + le)`` (not cumulative: a bucket Prometheus left
    out, being empty, adds nothing), with 0 at each bucket's lower bound and at ``+Inf``, so every bound any bucket
    has is known when the buckets are made cumulative (:func:`stats_from_increases`)."""
    out: Increases = {(f"{name}_sum", group): histogram.sum, (f"{name}_count", group): histogram.count}
    for lower, upper, count in histogram.buckets:
        key = (name, (*group, ("le", native_bound(upper))))
        out[key] = out.get(key, 0.0) + count
        if lower != -math.inf:
            out.setdefault((name, (*group, ("le", native_bound(lower)))), 0.0)
    out.setdefault((name, (*group, ("le", native_bound(math.inf)))), 0.0)
    return out


def native_series(
    name: str, labels: Mapping[str, str], histograms: Sequence[tuple[float, NativeHistogram]]
) -> list[RawSeries]:
    """One native histogram series' samples as the raw series :func:`window_increases` reads: ``name_count``,
    ``name_sum``, and per bound any of its buckets has (``+Inf`` included) a series ``name{le=...}`` holding that
    bucket's own count (0 where it was left out, being empty), as :func:`native_increases` keys them. A histogram
    whose count or any bucket went down is a new process (a counter reset, as Prometheus detects one): every part
    carries its reset count in :attr:`RawSeries.starts`, so a bucket that climbed past its old count is still read
    as reset."""
    bounds = sorted(
        {b for _, h in histograms for lower, upper, _ in h.buckets for b in (lower, upper) if b != -math.inf}
        | {math.inf}
    )
    own = [{upper: count for _, upper, count in h.buckets} for _, h in histograms]
    starts: list[float | None] = []
    resets = 0
    for index, (_, histogram) in enumerate(histograms):
        if index and (
            histogram.count < histograms[index - 1][1].count
            or any(own[index].get(b, 0.0) < own[index - 1].get(b, 0.0) for b in bounds)
        ):
            resets += 1
        starts.append(float(resets))  # a reset count, never after a window's start (no process start time)
    times = [t for t, _ in histograms]
    out = [
        RawSeries(f"{name}_count", labels, [(t, h.count) for t, h in histograms], starts, native=True),
        RawSeries(f"{name}_sum", labels, [(t, h.sum) for t, h in histograms], starts, native=True),
    ]
    for bound in bounds:
        values = [(t, counts.get(bound, 0.0)) for t, counts in zip(times, own, strict=True)]
        out.append(RawSeries(name, {**labels, "le": native_bound(bound)}, values, starts, native=True))
    return out


def _ratio(query: MetricQuery, increases: Increases) -> list[StatPoint]:
    assert query.ratio is not None
    numerator, denominator = query.ratio
    num = {group: value for (name, group), value in increases.items() if name == numerator}
    den = {group: value for (name, group), value in increases.items() if name == denominator}
    points = []
    for group in sorted(set(num) & set(den)):
        if den[group] > 0:  # no denominator events in the window: no ratio (not NaN)
            points.append(StatPoint(None, group, num[group] / den[group]))
    return points


OTHER_VALUE: Final = "_other"
"""The value every ``by`` label takes in the group that holds a metric's groups beyond its ``max_groups``."""


def foldable(query: MetricQuery, stat: str | None) -> Callable[[Sequence[float]], float] | None:
    """How the values of ``stat`` in several groups combine into the one value those groups' series would give
    together (exactly), or ``None`` when they cannot: a counter's delta and rate and a histogram's count and sum add
    up; a gauge's statistics combine with its ``agg`` (``sum``, ``max`` or ``min``; not ``mean``, whose groups hold
    different numbers of series); quantiles, means, ratios and raw PromQL do not combine."""
    if stat is None or query.ratio is not None or query.promql is not None:
        return None
    if query.kind == "counter" and stat in ("delta", "rate"):
        return math.fsum
    if query.kind == "histogram" and stat in ("count", "sum"):
        return math.fsum
    if query.kind == "gauge" and query.agg != "mean":
        return AGGREGATIONS[query.agg]
    return None


@dataclass(frozen=True, slots=True)
class BoundedPoints:
    """A metric's points within its ``max_groups``, and how many of its label groups were folded or left out."""

    points: list[StatPoint]
    groups: int
    dropped: int


def bound_groups(query: MetricQuery, points: Sequence[StatPoint]) -> BoundedPoints:
    """At most ``query.max_groups`` label groups of ``points``: the first ``max_groups - 1`` in label order are kept,
    and the rest become one group whose ``by`` labels are all :data:`OTHER_VALUE`, holding each statistic that
    :func:`foldable` combines exactly (so the metric's total over its groups is unchanged); the others are left out.

    Label order, not size, picks the groups kept: it needs no state, is the same on both paths and in every window,
    and a group changes sides only when a label value sorting before it appears or goes, where ranking by value
    would move groups in and out of ``_other`` from one step to the next and break a tracker's plots.
    """
    other: Group = tuple((label, OTHER_VALUE) for label in query.by)
    groups = sorted({p.group for p in points})
    if len(groups) <= query.max_groups:
        return BoundedPoints(list(points), len(groups), 0)
    kept = set([g for g in groups if g != other][: query.max_groups - 1])  # a real `_other` value is folded too
    bounded = [p for p in points if p.group in kept]
    folded: dict[str | None, list[float]] = defaultdict(list)
    for p in points:
        if p.group not in kept:
            folded[p.stat].append(p.value)
    for stat, values in folded.items():
        combine = foldable(query, stat)
        if combine is not None:
            bounded.append(StatPoint(stat, other, combine(values)))
    return BoundedPoints(bounded, len(groups), len(groups) - len(kept))


class ImpossibleValues:
    """Counts and names the series a gauge with a ``full_scale`` left out of a window for values outside ``[0,
    full_scale]`` (:func:`compute_stats`, and the PromQL path's count of them): the health counter
    ``otel_bridge/impossible_values{metric}`` (series x windows) and one WARNING per metric (rate-limited) naming the
    range and what to check."""

    def __init__(self, health: Health, warn: RateLimitedLogger) -> None:
        self._health = health
        self._warn = warn

    def __call__(self, query: MetricQuery, series: int, window: StepWindow) -> None:
        """``series`` of ``query`` were left out of ``window``'s statistics."""
        self._health.count(IMPOSSIBLE_VALUES, float(series), labels={"metric": query.key_name})
        self._warn.warning(
            f"impossible:{query.key_name}",
            "step %d: %d series of metric %s (%s) had values outside [0, %g] (0 to its full_scale) in the "
            "step: no device reads that, so they are left out of its statistics in this step, counted in %s; check "
            "the exporter, or the metric's full_scale",
            window.step,
            series,
            query.key_name,
            query.entry,
            query.full_scale,
            IMPOSSIBLE_VALUES,
        )


def to_metric(query: MetricQuery, points: Sequence[StatPoint], window: StepWindow) -> Metric:
    """One Metric named after the query's key, a data point per (statistic, label group), times the query's scale;
    its description is the query's kind (:data:`~otel_bridge.schema.KINDS`; empty for ratios and raw PromQL)."""
    kind = query.kind if query.ratio is None and query.promql is None and query.kind is not None else ""
    return gauge_metric(
        query.key_name,
        [({**dict(p.group), **({STAT_ATTRIBUTE: p.stat} if p.stat else {})}, p.value * query.scale) for p in points],
        window,
        kind,
    )


WindowValues = Sequence[tuple[float, float]]
"""One statistic of one label group in several windows: ``(window seconds, value)`` in time order."""


def _weighted(values: WindowValues) -> float | None:
    seconds = math.fsum(s for s, _ in values)
    return math.fsum(s * v for s, v in values) / seconds if seconds > 0 else None


_ADDED: Final = {("counter", "delta"), ("gauge", IDLE_STAT), ("histogram", "count"), ("histogram", "sum")}
_BY_SECONDS: Final = {("counter", "rate"), ("gauge", "mean")}


def combine_windows(kind: str, stat: str | None, values: WindowValues) -> float | None:
    """The statistic ``stat`` of a metric of ``kind`` over the union of several disjoint windows, from its value in
    each window (those where it has one), or ``None`` when that is not known from them.

    A counter's delta, a gauge's idle seconds and a histogram's count and sum add up; a gauge's max and min are the
    largest and smallest, its last the last window's; a counter's rate and a gauge's mean are averaged weighted by the
    windows' seconds (the rate exactly, the mean as the time average the samples stand for). A histogram's mean needs
    its count (:func:`combine_histogram_means`); quantiles, ratios and raw PromQL do not combine from their values.
    """
    if not values or stat is None:
        return None
    if (kind, stat) in _ADDED:
        return math.fsum(v for _, v in values)
    if (kind, stat) in _BY_SECONDS:
        return _weighted(values)
    if kind == "gauge" and stat in ("max", "min"):
        return AGGREGATIONS[stat]([v for _, v in values])
    if kind == "gauge" and stat == "last":
        return values[-1][1]
    return None


def combine_histogram_means(means: Sequence[float], counts: Sequence[float]) -> float | None:
    """A histogram's mean over several windows from each window's mean and count (its observations); ``None``
    without observations."""
    total = math.fsum(counts)
    return math.fsum(m * c for m, c in zip(means, counts, strict=True)) / total if total > 0 else None


def combine_window_metrics(occurrences: Sequence[tuple[float, Sequence[Metric]]], window: StepWindow) -> list[Metric]:
    """The metrics of several disjoint windows (``(seconds, metrics)`` of each, in time order: the occurrences of a
    phase repeated within a step) as the metrics of their union, stamped with ``window``: each point combined with
    :func:`combine_windows` by the kind its metric's description names (:data:`~otel_bridge.schema.KINDS`), a
    histogram's mean from its means and counts. Points that do not combine (quantiles, ratios, raw PromQL, a histogram
    mean without its count) are left out."""
    found: dict[str, tuple[str, dict[tuple[tuple[str, Any], ...], dict[int, tuple[float, float]]]]] = {}
    for index, (seconds, metrics) in enumerate(occurrences):
        for metric in metrics:
            if not isinstance(metric.data, Gauge):
                continue
            points = found.setdefault(metric.name, (metric.description or "", {}))[1]
            for point in metric.data.data_points:
                attributes = tuple(sorted((point.attributes or {}).items()))
                points.setdefault(attributes, {})[index] = (seconds, float(point.value))
    combined: list[Metric] = []
    for name, (kind, points) in found.items():
        values: list[tuple[Mapping[str, Any], float]] = []
        for attributes, by_window in points.items():
            labels = dict(attributes)
            stat = labels.get(STAT_ATTRIBUTE)
            stat = stat if isinstance(stat, str) else None
            if kind == "histogram" and stat == "mean":
                counts = points.get(tuple(sorted({**labels, STAT_ATTRIBUTE: "count"}.items())), {})
                if not all(i in counts for i in by_window):
                    continue
                value = combine_histogram_means(
                    [by_window[i][1] for i in sorted(by_window)], [counts[i][1] for i in sorted(by_window)]
                )
            else:
                value = combine_windows(kind, stat, [by_window[i] for i in sorted(by_window)])
            if value is not None:
                values.append((labels, value))
        if values:
            combined.append(gauge_metric(name, values, window, kind))
    return combined
