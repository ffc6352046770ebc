"""The bridge's own health metrics (``otel_bridge/*``): OpenTelemetry instruments, and keys of every step record.

Counters are cumulative since start-up (``otel_bridge/query_errors``); gauges describe the step just recorded
(``otel_bridge/missing_metrics``: configured metrics that matched no series in this step;
``otel_bridge/boundary_lag_s``: the largest distance between a boundary of the step (its phases' included) and the
sample that stood for it;
``otel_bridge/targets_down``: Prometheus targets with a failed scrape during the step;
``otel_bridge/targets_unread``: configured targets without a reading at the step's end, each named by
``otel_bridge/unread_s{instance}``, the seconds since its last reading).

Once :meth:`Health.bind` gives it a meter (the bridge's, scope ``otel_bridge.health``), each name is an asynchronous
instrument of that meter: counters an ``ObservableCounter``, gauges an ``ObservableGauge``, labels as attributes. Every
reader of the MeterProvider then sees them: the ``/metrics`` endpoint (``otel.prometheus``), OTLP (``otel.otlp``), a
reader of the user's own provider. Asynchronous instruments observe the values the bridge keeps anyway, so
:meth:`Health.counter` can read them back and :meth:`Health.forget` can retire a series (a target that left), which a
synchronous counter cannot.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping

from opentelemetry.metrics import CallbackOptions, Meter, Observation

MISSING_METRICS = "otel_bridge/missing_metrics"
QUERY_ERRORS = "otel_bridge/query_errors"
QUERY_WARNINGS = "otel_bridge/query_warnings"
SCRAPE_ERRORS = "otel_bridge/scrape_errors"
BACKEND_ERRORS = "otel_bridge/backend_errors"
BACKEND_DROPPED = "otel_bridge/backend_dropped"
DROPPED_INFRA = "otel_bridge/dropped_infra_steps"
NONFINITE_VALUES = "otel_bridge/nonfinite_values"
SKIPPED_VALUES = "otel_bridge/skipped_values"
INFRA_UNAVAILABLE = "otel_bridge/infra_unavailable"
BOUNDARY_LAG = "otel_bridge/boundary_lag_s"
TARGETS_DOWN = "otel_bridge/targets_down"
TARGETS_UNREAD = "otel_bridge/targets_unread"
UNREAD = "otel_bridge/unread_s"
GROUPS_DROPPED = "otel_bridge/groups_dropped"
IMPOSSIBLE_VALUES = "otel_bridge/impossible_values"
ANSWER_ERRORS = "otel_bridge/answer_errors"
INCREASE_DISAGREEMENTS = "otel_bridge/increase_disagreements"
CLOCK_OFFSET = "otel_bridge/clock_offset_s"
SAMPLE_GAP = "otel_bridge/sample_gap_s"

DESCRIPTIONS: Mapping[str, str] = {
    MISSING_METRICS: "configured metrics that matched no series in the last step",
    QUERY_ERRORS: "failed Prometheus queries",
    QUERY_WARNINGS: "Prometheus answers that came with warnings (a partial answer: a Thanos store or a Mimir querier "
    "that could not reach all its data may leave series out of the step)",
    SCRAPE_ERRORS: "failed /metrics scrapes",
    BACKEND_ERRORS: "failed tracker writes (each attempt)",
    BACKEND_DROPPED: "step records a tracker's full queue dropped",
    DROPPED_INFRA: "steps whose infrastructure readings were dropped (delivery queue full)",
    NONFINITE_VALUES: "NaN or infinite values left out of step records",
    SKIPPED_VALUES: "trainer values that are not one number (tensors, overflowing ints, ...) left out of step records",
    INFRA_UNAVAILABLE: "producers that failed in the last step",
    BOUNDARY_LAG: "largest distance between a boundary of the last step (its phases' included) and the sample that "
    "stood for it",
    SAMPLE_GAP: "longest time within the last step or one of its phases that a scraped target went without a reading "
    "rendered in it (the resolution of its gauges' figures)",
    TARGETS_DOWN: "Prometheus targets with a failed scrape during the last step",
    TARGETS_UNREAD: "configured targets without a reading at the end of the last step",
    UNREAD: "per target unread at the end of the last step: seconds since its last reading",
    GROUPS_DROPPED: "per metric over its max_groups in the last step: label groups summed into its _other group or "
    "left out",
    IMPOSSIBLE_VALUES: "per metric with a full_scale: series left out of a step for values outside [0, full_scale] "
    "(a utilization of 150 or -50), one per series and step",
    ANSWER_ERRORS: "per metric: label groups a store's answer gave a figure no window can have (a negative or "
    "non-finite counter increase, negative idle seconds), left out of that step, one per group and step",
    INCREASE_DISAGREEMENTS: "per metric: the store's exact increase disagreed with the samples around a window's "
    "boundaries when the run's first windows were cross-checked (the run reads its counters from the samples since)",
    CLOCK_OFFSET: "the store's clock minus the trainer's, as last measured (PromQL path): the windows asked are moved "
    "by it",
}
UNITS: Mapping[str, str] = {BOUNDARY_LAG: "s", UNREAD: "s", CLOCK_OFFSET: "s", SAMPLE_GAP: "s"}

_Key = tuple[str, tuple[tuple[str, str], ...]]


class Health:
    """Thread-safe counters and per-step gauges, each keyed by name and optional labels; OTel instruments once bound."""

    def __init__(self, meter: Meter | None = None) -> None:
        self._lock = threading.Lock()
        self._counters: dict[_Key, float] = {}
        self._gauges: dict[_Key, float] = {}
        self._bind_lock = threading.Lock()  # never held with _lock: callbacks take _lock inside the SDK's collect
        self._meter: Meter | None = None
        self._exposed: set[str] = set()
        self.count(NONFINITE_VALUES, 0.0)
        if meter is not None:
            self.bind(meter)

    def bind(self, meter: Meter) -> None:
        """Expose every health metric, present and future, as an asynchronous instrument of ``meter``."""
        with self._bind_lock:
            self._meter = meter
        self._expose()

    def count(self, name: str, amount: float = 1.0, labels: Mapping[str, str] | None = None) -> None:
        """Add ``amount`` to a cumulative counter."""
        key = (name, tuple(sorted((labels or {}).items())))
        with self._lock:
            self._counters[key] = self._counters.get(key, 0.0) + amount
        if name not in self._exposed:
            self._expose()

    def set(self, name: str, value: float, labels: Mapping[str, str] | None = None) -> None:
        """Set a gauge."""
        with self._lock:
            self._gauges[(name, tuple(sorted((labels or {}).items())))] = value
        if name not in self._exposed:
            self._expose()

    def forget(self, name: str, labels: Mapping[str, str]) -> None:
        """Drop the counter and gauge ``name`` with ``labels`` (e.g. a target that left): no later record has it, and
        its instrument stops observing it."""
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            self._counters.pop(key, None)
            self._gauges.pop(key, None)

    def counter(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        """Current value of a counter (0 when never counted)."""
        with self._lock:
            return self._counters.get((name, tuple(sorted((labels or {}).items()))), 0.0)

    def gauge(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        """Current value of a gauge (0 when never set)."""
        with self._lock:
            return self._gauges.get((name, tuple(sorted((labels or {}).items()))), 0.0)

    def snapshot(self) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
        """``(name, labels, value)`` for every counter and gauge."""
        with self._lock:
            items = [*self._counters.items(), *self._gauges.items()]
        return [(name, labels, value) for (name, labels), value in sorted(items)]

    def _expose(self) -> None:
        """Create the instruments of the names that have none yet (outside ``_lock``: see ``_bind_lock``)."""
        with self._bind_lock:
            meter = self._meter
            if meter is None:
                return
            with self._lock:
                counters = {name for name, _ in self._counters} - self._exposed
                gauges = {name for name, _ in self._gauges} - self._exposed - counters
            for name in sorted(counters):
                meter.create_observable_counter(
                    name, [self._observer(self._counters, name)], UNITS.get(name, ""), DESCRIPTIONS.get(name, "")
                )
            for name in sorted(gauges):
                meter.create_observable_gauge(
                    name, [self._observer(self._gauges, name)], UNITS.get(name, ""), DESCRIPTIONS.get(name, "")
                )
            self._exposed |= counters | gauges

    def _observer(self, values: dict[_Key, float], name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            with self._lock:
                points = [(dict(labels), value) for (n, labels), value in values.items() if n == name]
            return [Observation(value, attributes) for attributes, value in points]

        return observe
