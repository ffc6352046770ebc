"""StepJob: one ended step on its way to the trackers, as the training thread hands it to the delivery worker and the
worker to the reader (:meth:`~otel_bridge.pipeline.reader.StepMetricReader.export_step`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from opentelemetry.sdk.metrics.export import ResourceMetrics

from otel_bridge.pipeline.phases import Phase
from otel_bridge.window import StepWindow


@dataclass(slots=True)
class StepJob:
    """One step waiting for delivery: its window, the instrument snapshot, the trainer's values, its phases.

    ``infra``: its infrastructure readings are still wanted (the step queue clears it when it drops them);
    ``queued``: it is in the step queue (it is never queued twice).
    """

    window: StepWindow
    instruments: Sequence[ResourceMetrics] = ()
    values: dict[str, float] = field(default_factory=dict)
    infra: bool = True
    phases: tuple[Phase, ...] = ()
    queued: bool = False
