"""The bridge's own health metrics (``otel_bridge/*`` keys), added to every step record.

Counters are cumulative since start-up (``otel_bridge/query_errors``); gauges describe the step just recorded
(``otel_bridge/missing_metrics``: configured metrics that matched no series in this step;
``otel_bridge/boundary_lag_s``: the largest distance between a boundary of the step and the sample that stood for it;
``otel_bridge/targets_down``: Prometheus targets with a failed scrape during the step).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

MISSING_METRICS = "otel_bridge/missing_metrics"
QUERY_ERRORS = "otel_bridge/query_errors"
SCRAPE_ERRORS = "otel_bridge/scrape_errors"
BACKEND_ERRORS = "otel_bridge/backend_errors"
BACKEND_DROPPED = "otel_bridge/backend_dropped"
DROPPED_INFRA = "otel_bridge/dropped_infra_steps"
NONFINITE_VALUES = "otel_bridge/nonfinite_values"
INFRA_UNAVAILABLE = "otel_bridge/infra_unavailable"
BOUNDARY_LAG = "otel_bridge/boundary_lag_s"
TARGETS_DOWN = "otel_bridge/targets_down"


class Health:
    """Thread-safe counters and per-step gauges, each keyed by name and optional labels."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self._gauges: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self.count(NONFINITE_VALUES, 0.0)

    def count(self, name: str, amount: float = 1.0, labels: Mapping[str, str] | None = None) -> None:
        """Add ``amount`` to a cumulative counter."""
        key = (name, tuple(sorted((labels or {}).items())))
        with self._lock:
            self._counters[key] = self._counters.get(key, 0.0) + amount

    def set(self, name: str, value: float, labels: Mapping[str, str] | None = None) -> None:
        """Set a gauge."""
        with self._lock:
            self._gauges[(name, tuple(sorted((labels or {}).items())))] = value

    def forget(self, name: str, labels: Mapping[str, str]) -> None:
        """Drop the counter and gauge ``name`` with ``labels`` (e.g. a target that left): no later record has it."""
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            self._counters.pop(key, None)
            self._gauges.pop(key, None)

    def counter(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        """Current value of a counter (0 when never counted)."""
        with self._lock:
            return self._counters.get((name, tuple(sorted((labels or {}).items()))), 0.0)

    def snapshot(self) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
        """``(name, labels, value)`` for every counter and gauge."""
        with self._lock:
            items = [*self._counters.items(), *self._gauges.items()]
        return [(name, labels, value) for (name, labels), value in sorted(items)]
