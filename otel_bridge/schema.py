"""The shape of one step's ``MetricsData``: scope names, attribute keys, and gauge points stamped with the window.

The reader writes this shape, producers fill the infrastructure scope, and the tracker exporter reads it back; all
three import it from here, so none of them depends on another for it.

Each ``MetricsData`` carries the window itself as the scope :data:`WINDOW_SCOPE` (metric :data:`STEP_METRIC`: value =
step, ``start_time_unix_nano`` = window start or 0, ``time_unix_nano`` = window end), so an exporter needs nothing
else to place the record. How the step went (its infrastructure readings dropped or late, the step interrupted) is not
part of it: those flags travel beside it as data (:class:`~otel_bridge.exporters.record.StepFlags`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from opentelemetry.sdk.metrics.export import Gauge, Metric, NumberDataPoint

from otel_bridge.window import StepWindow

WINDOW_SCOPE: Final = "otel_bridge.window"
"""Scope of the metric that places the record: :data:`STEP_METRIC`."""
INFRA_SCOPE: Final = "otel_bridge.infrastructure"
"""Scope of the producers' metrics (keys get ``naming.infra_prefix``)."""
TRAINER_SCOPE: Final = "otel_bridge.trainer"
"""Scope of the values passed to ``Bridge.log``."""
HEALTH_SCOPE: Final = "otel_bridge.health"
"""Scope of the bridge's own ``otel_bridge/*`` health metrics."""
STEP_METRIC: Final = "otel_bridge.step"
"""The window metric: value = step, start/time = the window's boundaries."""
STAT_ATTRIBUTE: Final = "otel_bridge.stat"
"""Data-point attribute naming the window statistic (``delta``, ``max``, ``p99``...)."""
PHASE_SCOPE: Final = "otel_bridge.phase"
"""Scope of the per-phase readings: :data:`PHASE_SECONDS_METRIC` and the producers' metrics over each phase's window,
every point carrying :data:`PHASE_ATTRIBUTE` and stamped with the phase's window."""
PHASE_ATTRIBUTE: Final = "otel_bridge.phase"
"""Data-point attribute naming the phase (unique within the step: ``gen``, ``gen_2``...)."""
PHASE_SECONDS_METRIC: Final = "otel_bridge.phase.seconds"
"""A phase's duration in seconds."""
STEP_SECONDS_METRIC: Final = "otel_bridge.phase.step_seconds"
"""The step's duration in seconds, beside its phases' (no phase attribute; only in a step with phases)."""
OUTSIDE_PHASES_METRIC: Final = "otel_bridge.phase.outside_seconds"
"""The seconds of the step that no phase covered: the time nobody accounted for (no phase attribute)."""
KINDS: Final = ("counter", "gauge", "histogram")
"""What an infrastructure metric's ``description`` holds: the kind of the source metric its statistics were computed
from (empty for ratios and raw PromQL). It says how a statistic of several windows combines into the statistic of
their union (a phase repeated within a step: :func:`otel_bridge.producers.statistics.combine_windows`)."""


def _ns(t: float | None) -> int:
    return 0 if t is None else round(t * 1e9)


def gauge_metric(
    name: str, points: Sequence[tuple[Mapping[str, Any], float]], window: StepWindow, description: str = ""
) -> Metric:
    """An OTel ``Metric`` holding gauge points stamped with the window (start = window start, time = window end)."""
    return Metric(
        name=name,
        description=description,
        unit="",
        data=Gauge(
            data_points=[
                NumberDataPoint(
                    attributes=dict(attributes),
                    start_time_unix_nano=_ns(window.start),
                    time_unix_nano=_ns(window.end),
                    value=value,
                )
                for attributes, value in points
            ]
        ),
    )
