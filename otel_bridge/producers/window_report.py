"""What a producer could not read of one window, beside its metrics, and the one place that says so.

Both wings find the same things when they read a window: how far the readings standing for its boundaries lay from
them (``lag_s``), which targets had no reading at its end and for how long (``unread``), which configured metrics
matched nothing and why (``missing``), and which metrics had more label groups than their bound (``groups dropped``,
found as the points are made: :meth:`WindowReporter.bound`). A producer describes them in a :class:`WindowReport`;
its :class:`WindowReporter` turns that into health keys (``otel_bridge/boundary_lag_s``, ``targets_unread``,
``unread_s{instance}``, ``missing_metrics``, ``groups_dropped{metric}``) and log lines (rate-limited), and remembers
which targets it named until they are read again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from otel_bridge.health import BOUNDARY_LAG, MISSING_METRICS, TARGETS_UNREAD, UNREAD, Health
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.statistics import GroupBound
from otel_bridge.ratelimit import RateLimitedLogger
from otel_bridge.window import StepWindow

__all__ = ["MissingMetric", "UnreadTarget", "WindowReport", "WindowReporter"]

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
    unread: Sequence[UnreadTarget] | None = None
    missing: list[MissingMetric] = field(default_factory=list)


class WindowReporter:
    """Turns each window's :class:`WindowReport` into health keys and log lines (thread-safe)."""

    def __init__(self, health: Health, warn: RateLimitedLogger) -> None:
        self._health = health
        self._warn = warn
        self._lock = threading.Lock()
        self._unread: set[str] = set()  # instances named unread in the last record
        self.bound = GroupBound(health, warn)
        """``bound(query, points, window)``: ``points`` within the query's ``max_groups``, what it folded said."""

    def publish(self, report: WindowReport) -> None:
        """Set the window's health keys and log what changed (see the module docstring)."""
        if report.lag_s is not None:
            lag = max(self._health.gauge(BOUNDARY_LAG), report.lag_s) if report.lag_beside else report.lag_s
            self._health.set(BOUNDARY_LAG, lag)
        if report.unread is not None:
            self._publish_unread(report, report.unread)
        self._health.set(MISSING_METRICS, float(len(report.missing)))
        for missing in report.missing:
            missing_warning(self._warn, missing.query, report.window, missing.why, missing.fix)

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
