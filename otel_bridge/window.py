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
  per-bucket increases
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
    """

    step: int
    start: float | None
    end: float
    final: bool = False

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
    if window.start is None:
        return None
    found: Sample | None = None
    for sample in samples:
        if sample[0] <= window.start:
            if not math.isnan(sample[1]):
                found = sample
        else:
            break
    return found


def counter_increase(samples: Sequence[Sample], window: StepWindow) -> float | None:
    """Increase of a counter during the window, exact and reset-aware.

    Sums the increments between consecutive samples from the baseline (last sample at or before ``start``) to the last
    sample inside the window. A value lower than its predecessor is a counter reset (the process restarted and counted
    from zero), so the increment is the new value itself: a restart never yields a negative or inflated delta. A series
    without a baseline sample (it appeared during the window) contributes what it counted after its first sample.
    ``None`` when the window has no start or the series has no sample in or before the window. NaN samples are skipped;
    a negative sample is read as zero (a reset), never as a negative increase.
    """
    if window.start is None:
        return None
    base = baseline(samples, window)
    # A counter is never negative: a sample below zero (a broken exporter) counts as a reset to zero.
    window_samples = ([base] if base is not None else []) + in_window(samples, window)
    points = [max(v, 0.0) for _, v in window_samples if not math.isnan(v)]
    if not points:
        return None
    total = 0.0
    for previous, current in itertools.pairwise(points):
        total += current - previous if current >= previous else current
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


def histogram_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float:
    """Prometheus' ``histogram_quantile`` over ``(upper_bound, cumulative_count)`` buckets.

    Follows Prometheus' algorithm exactly (linear interpolation inside the bucket, the lowest bucket starting at 0, the
    ``+Inf`` bucket answered with the highest finite bound, non-monotonic counts repaired), so the scrape path and the
    PromQL path agree with ``histogram_quantile`` evaluated by Prometheus. Returns NaN when there are no observations,
    no ``+Inf`` bucket or fewer than two buckets.
    """
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    merged: dict[float, float] = {}
    for upper, count in buckets:
        merged[upper] = merged.get(upper, 0.0) + count
    ordered = sorted(merged.items())
    if len(ordered) < 2 or not math.isinf(ordered[-1][0]) or ordered[-1][0] < 0:
        return math.nan
    monotonic: list[tuple[float, float]] = []
    running_max = -math.inf
    for upper, count in ordered:
        running_max = max(running_max, count)
        monotonic.append((upper, running_max))
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


def histogram_statistic(
    stat: str,
    bucket_deltas: Iterable[tuple[float, float]],
    sum_delta: float | None,
    count_delta: float | None,
) -> float | None:
    """A histogram statistic from the increases of its buckets, ``_sum`` and ``_count`` during the window.

    ``count`` is the number of observations made during the window, ``sum`` their total, ``mean`` their average
    (NaN when there were none), ``pNN`` the quantile (NaN when there were none).
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
    return histogram_quantile(q, bucket_deltas)
