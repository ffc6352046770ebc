"""Step windows and the statistics computed over them.

A :class:`StepWindow` is the wall-clock interval ``(start, end]`` of one training step. Every infrastructure metric is
reported as a *window statistic*: what the metric did during that interval, not its value at some instant.

Samples are ``(unix_seconds, value)`` pairs in time order. The same functions serve both producers: the PromQL path
feeds them raw samples from Prometheus' range selectors, the scrape path its own boundary and in-step scrapes, so
 the two paths compute identical numbers from identical samples.

Statistics by metric kind (defaults in bold):

- counter: **delta** (increase during the window, reset-aware), **rate** (delta / window seconds)
- gauge: **last**, min, **max**, mean (over the samples taken inside the window)
- histogram: **mean**, **p50**, **p99** (any ``pNN`` / ``pNN.N``), **count** (observations during the window), from
  per-bucket increases; a quantile is Prometheus' estimate bounded by what the buckets and ``_sum`` prove
  (:func:`quantile_bounds`)
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Final, Literal

Sample = tuple[float, float]
MetricKind = Literal["counter", "gauge", "histogram"]

COUNTER_STATS: Final = ("delta", "rate")
GAUGE_STATS: Final = ("last", "min", "max", "mean")
HISTOGRAM_FIXED_STATS: Final = ("mean", "count", "sum")
DEFAULT_STATS: Final[dict[MetricKind, tuple[str, ...]]] = {
    "counter": ("delta", "rate"),
    "gauge": ("last", "max"),
    "histogram": ("mean", "p50", "p99", "count"),
}
_QUANTILE_STAT = re.compile(r"^p(\d{1,2}(?:\.\d+)?)$")


@dataclass(frozen=True, slots=True)
class StepWindow:
    """The interval ``(start, end]`` (unix seconds) of training step ``step``.

    ``start`` is ``None`` when the step has no previous boundary (the first ``log()`` after start-up): statistics that
    need a baseline (counter deltas, histogram statistics) are then not reported for that step.

    ``final`` marks the run's last window (set by ``close()``): no later window will count what happened between
    ``end`` and the next sample a source takes, so a source that samples on its own schedule (Prometheus) closes this
    window with its first sample after ``end`` instead of its last one before.

    ``interrupted`` marks a step that did not end normally: an exception (or ``SystemExit`` from SIGTERM) left its
    ``with bridge.step(n)`` block, or ``close()``/the ``atexit`` hook ended a step ``begin_step`` had left open.
    """

    step: int
    start: float | None
    end: float
    final: bool = False
    interrupted: bool = False

    def __post_init__(self) -> None:
        if self.start is not None and self.start > self.end:
            raise ValueError(f"StepWindow start {self.start} is after end {self.end}")

    @property
    def seconds(self) -> float | None:
        """Length of the window in seconds, or ``None`` without a start."""
        return None if self.start is None else self.end - self.start

    @property
    def has_baseline(self) -> bool:
        """Whether the window has a start (a previous boundary)."""
        return self.start is not None


def quantile_of(stat: str) -> float | None:
    """``"p99"`` -> 0.99, ``"p99.9"`` -> 0.999; ``None`` when ``stat`` is not a quantile statistic."""
    match = _QUANTILE_STAT.match(stat)
    if match is None:
        return None
    q = float(Decimal(match.group(1)) / 100)
    return q if 0.0 < q < 1.0 else None


def allowed_stats(kind: MetricKind) -> str:
    """Human-readable list of the statistics a metric kind accepts (for error messages)."""
    if kind == "counter":
        return ", ".join(COUNTER_STATS)
    if kind == "gauge":
        return ", ".join(GAUGE_STATS)
    return ", ".join((*HISTOGRAM_FIXED_STATS, "pNN (e.g. p50, p90, p99, p99.9)"))


def is_valid_stat(kind: MetricKind, stat: str) -> bool:
    """Whether ``stat`` is a statistic of metric kind ``kind``."""
    if kind == "counter":
        return stat in COUNTER_STATS
    if kind == "gauge":
        return stat in GAUGE_STATS
    return stat in HISTOGRAM_FIXED_STATS or quantile_of(stat) is not None


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


def gauge_statistic(stat: str, samples: Sequence[Sample], window: StepWindow) -> float | None:
    """``last``/``min``/``max``/``mean`` of the gauge samples inside the window; ``None`` when there are none.

    NaN is handled as Prometheus' ``*_over_time`` functions do, so both paths agree: ``last`` is the last sample even
    if NaN; ``min``/``max`` ignore NaN samples unless all are NaN; ``mean`` is NaN when any sample is.
    """
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

    ``count`` is the number of observations made during the window, ``sum`` their total, ``mean`` their average
    (NaN when there were none), ``pNN`` the quantile (NaN when there were none): Prometheus' ``histogram_quantile``
    estimate, moved into the interval :func:`quantile_bounds` proves from the buckets and ``_sum`` when it lies
    outside (then it is that interval's nearest end, e.g. the largest value the quantile can have). The bound is not
    applied when ``_count`` and the ``+Inf`` bucket disagree (they do not count the same observations).
    """
    if stat == "count":
        return count_delta
    if stat == "sum":
        return sum_delta
    if stat == "mean":
        if sum_delta is None or count_delta is None:
            return None
        return sum_delta / count_delta if count_delta > 0 else math.nan
    q = quantile_of(stat)
    if q is None:
        raise ValueError(f"unknown histogram statistic {stat!r}; allowed: {allowed_stats('histogram')}")
    buckets = list(bucket_deltas)
    estimate = histogram_quantile(q, buckets)
    if math.isnan(estimate):
        return estimate
    observations = math.fsum(count for upper, count in buckets if upper == math.inf)
    if count_delta is not None and observations != count_delta:
        return estimate
    bounds = quantile_bounds(q, buckets, sum_delta)
    if bounds is None:
        return estimate
    return min(max(estimate, bounds[0]), bounds[1])
