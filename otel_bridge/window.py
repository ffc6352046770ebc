"""Step windows and the names of the statistics computed over them.

A :class:`StepWindow` is the wall-clock interval ``(start, end]`` of one training step. Every infrastructure metric is
reported as a *window statistic*: what the metric did during that interval, not its value at some instant. The
statistics themselves are computed in :mod:`otel_bridge.producers.statistics`; this module names them, so that the
configuration can check them.

Statistics by metric kind (defaults in bold):

- counter: **delta** (increase during the window, reset-aware), **rate** (delta / window seconds)
- gauge: **last**, min, **max**, mean (over the samples taken inside the window), idle_seconds (window seconds x
  (1 - mean / ``full_scale``) per series: a device's idle time, e.g. idle GPU-seconds from a utilization gauge)
- histogram: **mean**, **p50**, **p99** (any ``pNN`` / ``pNN.N``), **count** (observations during the window), from
  per-bucket increases; a quantile is Prometheus' estimate bounded by what the buckets and ``_sum`` prove
  (:func:`otel_bridge.producers.statistics.quantile_bounds`)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Final, Literal

MetricKind = Literal["counter", "gauge", "histogram"]

COUNTER_STATS: Final = ("delta", "rate")
GAUGE_STATS: Final = ("last", "min", "max", "mean", "idle_seconds")
IDLE_STAT: Final = "idle_seconds"
"""The gauge statistic that needs the metric's ``full_scale`` (the value of a fully busy device)."""
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

    ``phase`` names the phase of step ``step`` this window is (its record key: ``gen``, ``gen_2``...), ``None`` for the
    step's own window: a phase's statistics go under the phase's keys of the step's record, and what its boundaries'
    readings say of themselves (how late they were) goes into the step's health keys.
    """

    step: int
    start: float | None
    end: float
    final: bool = False
    interrupted: bool = False
    phase: str | None = None

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
