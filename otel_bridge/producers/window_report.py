"""What a producer could not read of one window, beside its metrics, and the one place that says so.

Both wings find the same things when they read a window: how far the readings standing for its boundaries lay from
them (``lag_s``), which targets had no reading at its end and for how long (``unread``), which configured metrics
matched nothing and why (``missing``), and which metrics had more label groups than their bound (``groups``, found
as the points are made: :meth:`WindowReport.within_bounds`). A producer describes them in a :class:`WindowReport`;
its :class:`WindowReporter` turns that into health keys (``otel_bridge/boundary_lag_s``, ``targets_unread``,
``unread_s{instance}``, ``missing_metrics``, ``groups_dropped{metric}``) and log lines (rate-limited), and remembers
which targets it named until they are read again; a sampling reader also says how long a target went without a
reading (``sample_gap_s``, key ``otel_bridge/sample_gap_s``). A phase's window raises the lag and the sample gap of its
step and reports nothing else: its step's window has read the same targets and metrics over the whole step.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from otel_bridge.health import (
    BOUNDARY_LAG,
    GROUPS_DROPPED,
    MISSING_METRICS,
    SAMPLE_GAP,
    TARGETS_UNREAD,
    UNREAD,
    Health,
)
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.statistics import OTHER_VALUE, StatPoint, bound_groups
from otel_bridge.ratelimit import RateLimitedLogger
from otel_bridge.window import StepWindow

__all__ = ["GroupCount", "MissingMetric", "UnreadTarget", "WindowReport", "WindowReporter"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class UnreadTarget:
    """A target with no reading at a window's end, ``seconds`` after its last one.

    ``warn_key``: when set, the first window it is unread in logs a WARNING under this rate-limit key (shared with
    the producer's own warning about its failed scrapes, so one of the two is said); ``None`` when the producer's
    warning about the failed scrape already said it. ``job``: named in that warning when known."""

    instance: str
    seconds: float
    job: str | None = None
    warn_key: str | None = None


@dataclass(frozen=True, slots=True)
class MissingMetric:
    """A configured metric that matched no series in a window: ``why``, and what to do (``fix``)."""

    query: MetricQuery
    why: str
    fix: str = "check its name and labels"


@dataclass(frozen=True, slots=True)
class GroupCount:
    """A metric's label groups in a window (``groups``), and how many of them its ``max_groups`` folded into
    ``_other`` or left out (``dropped``; 0 when within its bound)."""

    query: MetricQuery
    groups: int
    dropped: int


@dataclass
class WindowReport:
    """What a producer could not read of ``window`` (see the module docstring).

    ``lag_s``: ``None`` leaves ``otel_bridge/boundary_lag_s`` as it is; with ``lag_beside`` another reader of the same
    window (the boundary scrapes) set its own lag first and the larger stands. ``unread``: ``None`` when this report
    does not know (another reader names the unread targets)."""

    window: StepWindow
    reader: str = "the bridge"
    lag_s: float | None = None
    lag_beside: bool = False
    sample_gap_s: float | None = None
    """For a reader that samples its targets (``scrape.sample_interval_s``): the longest time a target went without a
    reading in the window, ``otel_bridge/sample_gap_s``; ``None`` leaves that key as it is."""
    unread: Sequence[UnreadTarget] | None = None
    missing: list[MissingMetric] = field(default_factory=list)
    groups: list[GroupCount] = field(default_factory=list)

    def within_bounds(self, query: MetricQuery, points: Sequence[StatPoint]) -> list[StatPoint]:
        """``points`` within ``query.max_groups`` (:func:`~otel_bridge.producers.statistics.bound_groups`), their
        groups counted in this report."""
        bounded = bound_groups(query, points)
        self.groups.append(GroupCount(query, bounded.groups, bounded.dropped))
        return bounded.points


class WindowReporter:
    """Turns each window's :class:`WindowReport` into health keys and log lines (thread-safe)."""

    def __init__(self, health: Health, warn: RateLimitedLogger) -> None:
        self._health = health
        self._warn = warn
        self._lock = threading.Lock()
        self._unread: set[str] = set()  # instances named unread in the last record
        self._over: set[str] = set()  # metrics over their max_groups in the last window they were read

    def publish(self, report: WindowReport) -> None:
        """Set the window's health keys and log what changed (see the module docstring). A phase's window (read after
        its step's) only raises ``otel_bridge/boundary_lag_s`` and ``otel_bridge/sample_gap_s``: the step's record
        covers its phases too, and says what the step's window found of the rest."""
        phase = report.window.phase is not None
        if report.lag_s is not None:
            beside = report.lag_beside or phase
            lag = max(self._health.gauge(BOUNDARY_LAG), report.lag_s) if beside else report.lag_s
            self._health.set(BOUNDARY_LAG, lag)
        if report.sample_gap_s is not None:
            gap = report.sample_gap_s
            self._health.set(SAMPLE_GAP, max(self._health.gauge(SAMPLE_GAP), gap) if phase else gap)
        if phase:
            return
        if report.unread is not None:
            self._publish_unread(report, report.unread)
        self._health.set(MISSING_METRICS, float(len(report.missing)))
        for missing in report.missing:
            missing_warning(self._warn, missing.query, report.window, missing.why, missing.fix)
        self._publish_groups(report)

    def _publish_groups(self, report: WindowReport) -> None:
        """``otel_bridge/groups_dropped{metric}`` while a metric is over its bound, and one WARNING per metric
        (rate-limited) naming the count, the bound and the key to raise."""
        for count in report.groups:
            query = count.query
            labels = {"metric": query.key_name}
            with self._lock:
                if count.dropped:
                    self._over.add(query.key_name)
                    self._health.set(GROUPS_DROPPED, float(count.dropped), labels=labels)
                elif query.key_name in self._over:
                    self._over.discard(query.key_name)
                    self._health.forget(GROUPS_DROPPED, labels)
            if count.dropped:
                self._warn.warning(
                    f"groups:{query.key_name}",
                    "step %d: metric %s (%s) has %d label groups of %s, over its bound of %d: the %d groups after "
                    "the first %d in label order are summed into one %r group where that is exact (delta, rate, "
                    "count, sum, gauges with agg sum/max/min) and left out otherwise, counted in %s; raise "
                    "%s.max_groups (or the top-level max_groups) to keep them apart, or group by fewer labels",
                    report.window.step,
                    query.key_name,
                    query.entry,
                    count.groups,
                    list(query.by),
                    query.max_groups,
                    count.dropped,
                    query.max_groups - 1,
                    OTHER_VALUE,
                    GROUPS_DROPPED,
                    query.entry,
                )

    def _publish_unread(self, report: WindowReport, unread: Sequence[UnreadTarget]) -> None:
        window = report.window
        named = {target.instance: target for target in unread}
        with self._lock:
            new = [target for instance, target in sorted(named.items()) if instance not in self._unread]
            back = sorted(self._unread - set(named))
            self._health.set(TARGETS_UNREAD, float(len(named)))
            for instance, target in sorted(named.items()):
                self._health.set(UNREAD, target.seconds, labels={"instance": instance})
            for instance in back:
                self._health.forget(UNREAD, {"instance": instance})
            self._unread = set(named)
        for target in new:
            if target.warn_key is not None:
                self._warn.warning(
                    target.warn_key,
                    "step %d: %s has no reading of %s%s at the step's end, its last successful scrape %.3gs before: "
                    "its counts since then are in the step where it is read again (lost if it comes back as a new "
                    "process); every step until then names it in otel_bridge/unread_s",
                    window.step,
                    report.reader,
                    target.instance,
                    f" (job {target.job})" if target.job else "",
                    target.seconds,
                )
        for instance in back:
            _log.info("step %d: %s is read again", window.step, instance)

    def forget(self, instance: str) -> None:
        """``instance`` left (it is no longer a target): its ``unread_s`` key goes, and it is not said to be read
        again."""
        with self._lock:
            self._health.forget(UNREAD, {"instance": instance})
            self._unread.discard(instance)


def missing_warning(
    warn: RateLimitedLogger,
    query: MetricQuery,
    window: StepWindow,
    why: str,
    fix: str = "check its name and labels",
) -> None:
    """Log, rate-limited per metric, that a configured metric matched no series in this step, why, and what to do."""
    what = query.name or query.promql or (f"ratio {query.ratio[0]} / {query.ratio[1]}" if query.ratio else "?")
    matchers = f" with labels {dict(query.matchers)}" if query.matchers else ""
    warn.warning(
        f"missing:{query.key_name}",
        "step %d: configured metric %s%s (%s) matched no series: %s; %s",
        window.step,
        what,
        matchers,
        query.entry,
        why,
        fix,
    )
