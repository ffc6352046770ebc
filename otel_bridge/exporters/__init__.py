"""Turning each step's collected metrics into one record for every tracker.

- :mod:`~otel_bridge.exporters.tracker`: :class:`TrackerExporter`, the OpenTelemetry MetricExporter that flattens a
  step's ``MetricsData`` into a :class:`StepRecord` (its :class:`StepFlags` as notes);
- :mod:`~otel_bridge.exporters.naming`: every key rule (made valid for every tracker);
- :mod:`~otel_bridge.exporters.delivery`: each backend written on its own thread, in step order, with retries;
- :mod:`~otel_bridge.exporters.backends`: the trackers, and the face plugin backends are written against.
"""

from otel_bridge.exporters.delivery import DeliveryReport, DeliveryStatus
from otel_bridge.exporters.naming import OUTSIDE_PHASES_KEY, STEP_SECONDS_KEY, infra_key
from otel_bridge.exporters.record import StepFlags, StepRecord
from otel_bridge.exporters.tracker import TrackerExporter

__all__ = [
    "OUTSIDE_PHASES_KEY",
    "STEP_SECONDS_KEY",
    "DeliveryReport",
    "DeliveryStatus",
    "StepFlags",
    "StepRecord",
    "TrackerExporter",
    "infra_key",
]
