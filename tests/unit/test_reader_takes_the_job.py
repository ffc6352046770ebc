"""The step reader assembles and exports what one ``StepJob`` carries (issue 33 point 3): no Bridge around it, a
producer of its own, and an exporter that is any ``StepExporter`` (here the real ``TrackerExporter`` writing to the
suite's backend double)."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.sdk.metrics.export import ScopeMetrics

from otel_bridge.exporters import TrackerExporter
from otel_bridge.exporters.tracker import INFRA_DROPPED_NOTE, INTERRUPTED_NOTE
from otel_bridge.pipeline.reader import StepMetricReader
from otel_bridge.pipeline.step_job import StepJob
from otel_bridge.producers import infra_scope
from otel_bridge.schema import gauge_metric
from otel_bridge.window import StepWindow
from tests.helpers.backends import BackendDouble


class CountingProducer:
    """A producer whose reading is the number of windows it was asked for."""

    def __init__(self) -> None:
        self.windows: list[StepWindow] = []

    def produce(self, timeout_millis: float = 10_000, *, window: StepWindow) -> Sequence[ScopeMetrics]:
        self.windows.append(window)
        return infra_scope([gauge_metric("served", [({}, float(len(self.windows)))], window)])


def test_the_reader_exports_what_the_job_carries() -> None:
    backend = BackendDouble()
    exporter = TrackerExporter([backend], infra_prefix="rollout")
    producer = CountingProducer()
    reader = StepMetricReader(exporter, [producer])
    try:
        first = reader.export_step(StepJob(StepWindow(0, 100.0, 101.0), values={"loss": 0.5}))
        dropped = reader.export_step(StepJob(StepWindow(1, 101.0, 102.0), values={"loss": 0.25}, infra=False))
        cut = reader.export_step(StepJob(StepWindow(2, 102.0, 103.0, interrupted=True), values={"loss": 0.125}))
    finally:
        reader.shutdown(timeout_millis=5_000)
    assert first is not None
    assert dropped is not None
    assert cut is not None
    assert [window.step for window in producer.windows] == [0, 2]  # a job whose readings were dropped asks no one
    assert (first.values["loss"], first.values["rollout/served"]) == (0.5, 1.0)
    assert "rollout/served" not in dropped.values
    assert INFRA_DROPPED_NOTE in dropped.notes
    assert INTERRUPTED_NOTE in cut.notes
    assert cut.values["rollout/served"] == 2.0
    assert backend.written == [0, 1, 2]
