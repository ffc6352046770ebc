"""The pipeline behind the facade: configuration in, one record per step out.

- :mod:`~otel_bridge.pipeline.build`: the configuration made into producers and the trackers;
- :mod:`~otel_bridge.pipeline.meter_provider`: the MeterProvider and its extra readers (``/metrics``, OTLP);
- :mod:`~otel_bridge.pipeline.reader`: :class:`~otel_bridge.pipeline.reader.StepMetricReader`, the OpenTelemetry
  MetricReader that collects at step boundaries, and :mod:`~otel_bridge.pipeline.infra_deadline`, the deadline of a
  step's infrastructure readings;
- :mod:`~otel_bridge.pipeline.phases`: the phases of a step, as the training thread marks them;
- :mod:`~otel_bridge.pipeline.trainer_values`: what ``bridge.log()`` accepts from the trainer;
- :mod:`~otel_bridge.pipeline.worker`: the step queue, the delivery thread and close-time teardown;
- :mod:`~otel_bridge.pipeline.record_store`: the last delivered records, for ``collect()`` and ``record()``;
- :mod:`~otel_bridge.pipeline.run_dir`: each run's own directory (a re-run of a name never appends to another run);
- :mod:`~otel_bridge.pipeline.tracing`: each delivered step as an OpenTelemetry trace.

Only the facade (:mod:`otel_bridge.bridge`) reaches into these modules; the rest of the house and users take what is
on this face.
"""

from otel_bridge.pipeline.build import build_producers
from otel_bridge.pipeline.record_store import KEPT_RECORDS
from otel_bridge.pipeline.run_dir import DEFAULT_RUN_PREFIX, runs_of

__all__ = ["DEFAULT_RUN_PREFIX", "KEPT_RECORDS", "build_producers", "runs_of"]
