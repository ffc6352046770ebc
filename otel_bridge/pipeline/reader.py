"""StepMetricReader: an OpenTelemetry MetricReader that collects at training-step boundaries.

At a boundary it takes the SDK's own instruments (in memory, fast: done on the training thread) and, later on the
delivery worker, every producer's readings for the step's window (:class:`~otel_bridge.producers.base.MetricProducer`:
the SDK's proposed MetricProducer, told the window), and hands one ``MetricsData`` to its exporter, with the step's
flags (:class:`~otel_bridge.exporters.record.StepFlags`: its readings dropped or late, the step interrupted) as data
beside it; the exporter's record comes back to the delivery worker.

The shape of the ``MetricsData`` it assembles (scopes, attributes, the window metric) is defined in
:mod:`otel_bridge.schema`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from opentelemetry.sdk.metrics import Histogram
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    HistogramDataPoint,
    Metric,
    MetricReader,
    MetricsData,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.metrics.export import Histogram as HistogramData
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from otel_bridge import schema
from otel_bridge.errors import OtelBridgeError
from otel_bridge.exporters.record import StepFlags, StepRecord
from otel_bridge.health import INFRA_UNAVAILABLE, Health
from otel_bridge.pipeline.infra_deadline import InfraDeadline
from otel_bridge.pipeline.phases import Phase
from otel_bridge.pipeline.step_job import StepJob
from otel_bridge.producers.base import MetricProducer, metrics_of
from otel_bridge.producers.statistics import combine_window_metrics
from otel_bridge.ratelimit import RateLimitedLogger
from otel_bridge.schema import gauge_metric
from otel_bridge.suppression import instrumentation_suppressed
from otel_bridge.window import StepWindow

_log = logging.getLogger(__name__)
DELTA = AggregationTemporality.DELTA
_PRODUCE_TIMEOUT_MS = 10_000.0  # what a producer is given without a deadline (the SDK's default timeout_millis)


class StepExporter(Protocol):
    """What the reader hands each step to: an OpenTelemetry ``MetricExporter`` that also takes the step's flags and
    returns the step's record (:class:`~otel_bridge.exporters.tracker.TrackerExporter` is one)."""

    def export_step(self, metrics_data: MetricsData, flags: StepFlags) -> StepRecord:
        """Deliver one step's ``metrics_data`` with its ``flags``; the record it made."""
        ...

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        """Wait until what was exported is written; ``False`` on timeout."""
        ...

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        """Deliver what is pending, then release the trackers."""
        ...


class StepMetricReader(MetricReader):
    """Collects the SDK's instruments and every producer at step boundaries and exports one MetricsData per step.

    It collects only at boundaries: histograms are DELTA, so a collection between two boundaries would take the
    step's observations out of its record. :meth:`force_flush` (what ``MeterProvider.force_flush()`` calls) therefore
    delivers the records of ended steps instead of collecting, and :meth:`shutdown` (``MeterProvider.shutdown()``)
    first runs the ``on_shutdown`` hook (the bridge delivers its pending steps there), then closes the trackers. A
    ``collect()`` someone else makes between boundaries is folded into the next boundary's snapshot
    (:func:`fold_deltas`).
    The instruments of the bridge's own health meter (scope ``otel_bridge.health``) are left out of the instrument
    snapshot: the record takes them, current, from :class:`~otel_bridge.health.Health` after the producers ran.

    Unlike the SDK's readers (``PeriodicExportingMetricReader`` runs its own export thread, ``InMemoryMetricReader`` is
    pulled by its user), it does not decide when to collect: the :class:`~otel_bridge.bridge.Bridge` drives it, calling
    :meth:`snapshot_instruments` on the training thread at each boundary and :meth:`export_step` on its delivery
    worker. It is therefore not part of the public API; ``Bridge.reader`` is the instance a MeterProvider holds.
    """

    def __init__(
        self,
        exporter: StepExporter,
        producers: Sequence[MetricProducer] = (),
        *,
        health: Health | None = None,
        resource: Resource | None = None,
        warn_interval_s: float = 60.0,
        infra_deadline: InfraDeadline | None = None,
        collect_every: int = 1,
    ) -> None:
        """``infra_deadline``: the deadline of each step's infrastructure readings (``delivery.produce_timeout_s``),
        shared with the producers' start-up; without one each producer is given the SDK's default 10 s."""
        super().__init__(preferred_temporality={Histogram: AggregationTemporality.DELTA})
        self._collect_every = collect_every
        self._boundaries = 0
        self._skipped = False  # the last boundary did not collect: its observations wait for a later one
        self._deadline = infra_deadline
        self._exporter = exporter
        self._producers = list(producers)
        self._health = health or Health()
        self._resource = resource or Resource.create({})
        self._lock = threading.RLock()  # held by snapshot_instruments around collect(), which calls _receive_metrics
        self._received: MetricsData | None = None
        self._warn = RateLimitedLogger(_log, warn_interval_s)
        self._shutdown = False
        self._exporter_closed = False
        self.on_shutdown: Callable[[float], None] | None = None
        """Called with the time left (seconds) when the reader is shut down, before the trackers are closed."""

    def abandon_infra(self) -> None:
        """Stop waiting for the step being assembled's infrastructure readings (the step queue is full)."""
        if self._deadline is not None:
            self._deadline.abandon()

    @property
    def producers(self) -> list[MetricProducer]:
        """The registered producers."""
        return list(self._producers)

    @property
    def is_shutdown(self) -> bool:
        """:meth:`shutdown` was called (by the bridge or by the MeterProvider)."""
        return self._shutdown

    def _receive_metrics(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> None:
        with self._lock:
            if self._received is not None:  # a collect() between boundaries: keep its deltas for the step's record
                metrics_data = fold_deltas(self._received, metrics_data)
            self._received = metrics_data

    def snapshot_instruments(self) -> list[ResourceMetrics]:
        """Collect the SDK's instruments now (in memory). Empty when none has recorded anything yet, and at the
        boundaries ``collect_every`` skips (``otel.collect_every``: the 1st, then every N-th boundary collects):
        histogram observations of skipped boundaries go to the next collecting one, or to :meth:`final_instruments`.

        A ``collect()`` someone made since the last boundary is not lost: its histogram deltas are added in.
        """
        self._boundaries += 1
        self._skipped = (self._boundaries - 1) % self._collect_every != 0
        return [] if self._skipped else self._collect_now()

    def final_instruments(self, snapshot: Sequence[ResourceMetrics]) -> Sequence[ResourceMetrics]:
        """The instruments for a record sent as final (the run's last, or one ``commit()``/``collect()`` sends before
        the next step): ``snapshot``, or, if its boundary skipped collecting, a collection now (what the skipped
        boundaries observed is not left out). Does not move the ``collect_every`` schedule."""
        if not self._skipped:
            return snapshot
        self._skipped = False
        return self._collect_now()

    def _collect_now(self) -> list[ResourceMetrics]:
        with self._lock:
            self.collect()
            received, self._received = self._received, None
        collected: list[ResourceMetrics] = list(received.resource_metrics) if received is not None else []
        return [
            ResourceMetrics(
                resource=rm.resource,
                scope_metrics=[sm for sm in rm.scope_metrics if sm.scope.name != schema.HEALTH_SCOPE],
                schema_url=rm.schema_url,
            )
            for rm in collected
        ]

    def assemble(self, job: StepJob) -> tuple[MetricsData, StepFlags]:
        """One MetricsData for ``job`` (its window, instrument snapshot, trainer values and phases, the producers'
        readings, health) and the step's flags.

        When the job's ``infra`` is off the producers are not asked (the step's infrastructure readings were dropped:
        ``infra_dropped``); the phases' durations are still recorded. Readings that miss the infrastructure deadline
        are left out the same way (``infra_late``). A window that did not end normally is ``interrupted``.
        """
        window, phases, trainer_values, produce = job.window, job.phases, job.values, job.infra
        produced = self._produce_in_time(window, phases) if produce else None
        flags = StepFlags(
            infra_dropped=not produce, infra_late=produce and produced is None, interrupted=window.interrupted
        )
        scopes = [
            ScopeMetrics(
                scope=InstrumentationScope(schema.WINDOW_SCOPE),
                metrics=[gauge_metric(schema.STEP_METRIC, [({}, float(window.step))], window)],
                schema_url="",
            )
        ]
        if trainer_values:
            metrics = [gauge_metric(key, [({}, float(value))], window) for key, value in trainer_values.items()]
            scopes.append(
                ScopeMetrics(scope=InstrumentationScope(schema.TRAINER_SCOPE), metrics=metrics, schema_url="")
            )
        infra, phase_metrics, health = produced or ([], [], self._health_metrics(window))
        phase_metrics = [*phase_durations(window, phases), *phase_metrics]
        if infra:
            scopes.append(ScopeMetrics(scope=InstrumentationScope(schema.INFRA_SCOPE), metrics=infra, schema_url=""))
        if phase_metrics:
            scopes.append(
                ScopeMetrics(scope=InstrumentationScope(schema.PHASE_SCOPE), metrics=phase_metrics, schema_url="")
            )
        if health:
            scopes.append(ScopeMetrics(scope=InstrumentationScope(schema.HEALTH_SCOPE), metrics=health, schema_url=""))
        own = ResourceMetrics(resource=self._resource, scope_metrics=scopes, schema_url="")
        return MetricsData(resource_metrics=[own, *job.instruments]), flags

    def _produce_in_time(
        self, window: StepWindow, phases: Sequence[Phase]
    ) -> tuple[list[Metric], list[Metric], list[Metric]] | None:
        """:meth:`_produce_all` within the infrastructure deadline; ``None`` (sources counted unavailable) if not."""
        if self._deadline is None:
            return self._produce_all(window, phases, None)
        busy = self._deadline.busy
        until = time.monotonic() + self._deadline.timeout_s
        produced = self._deadline.run(lambda: self._produce_all(window, phases, until))
        if produced is None:
            self._health.set(INFRA_UNAVAILABLE, float(len(self._producers)))
            self._warn.warning(
                "infra-late",
                "step %d: the infrastructure sources %s within delivery.produce_timeout_s (%ss); the record goes "
                "out with the trainer's values and the infrastructure missing",
                window.step,
                "were still busy with an earlier step" if busy else "did not answer",
                self._deadline.timeout_s,
            )
        return produced

    def _health_metrics(self, window: StepWindow) -> list[Metric]:
        return [gauge_metric(name, [(dict(labels), value)], window) for name, labels, value in self._health.snapshot()]

    def _produce_all(
        self, window: StepWindow, phases: Sequence[Phase], until: float | None
    ) -> tuple[list[Metric], list[Metric], list[Metric]]:
        """The step's infrastructure metrics, its phases' (each point with the phase attribute) and the health gauges
        as the step's producers left them.

        Windows are produced in the order of their starts, the step's first among equals: a producer that keeps
        samples between windows (the scrape producer) may then drop those before the start of the window it was
        last asked about. Health is read once they all are: a phase's window only raises the step's
        ``otel_bridge/boundary_lag_s`` and ``otel_bridge/sample_gap_s``
        (:class:`~otel_bridge.producers.window_report.WindowReporter`), so the record says how late the readings of
        any of its boundaries were and how far apart its gauges' samples. ``until`` (monotonic) is when the step's
        production deadline ends, if it has one.
        """
        order = sorted([None, *phases], key=lambda p: (_start_of(window) if p is None else p.start, p is not None))
        infra: list[Metric] = []
        occurrences: dict[str, list[tuple[Phase, list[Metric]]]] = {}
        for phase in order:
            if phase is None:
                infra = self._produce(window, until)
            else:
                produced = self._produce(phase.window(window.step), until, phase=True)
                occurrences.setdefault(phase.key, []).append((phase, produced))
        health = self._health_metrics(window)
        per_phase: list[Metric] = []
        for key, found in occurrences.items():
            if len(found) == 1:
                metrics = found[0][1]
            else:  # one key for several occurrences (naming.phase_repeats: sum): their union's statistics
                span = StepWindow(window.step, found[0][0].start, found[-1][0].end)
                metrics = combine_window_metrics([(p.seconds, m) for p, m in found], span)
            per_phase.extend(with_phase(m, key) for m in metrics)
        return infra, per_phase, health

    def _produce(self, window: StepWindow, until: float | None, *, phase: bool = False) -> list[Metric]:
        metrics: list[Metric] = []
        failed = 0
        for producer in self._producers:
            name = type(producer).__name__
            left_ms = _PRODUCE_TIMEOUT_MS if until is None else max(0.0, until - time.monotonic()) * 1000
            try:
                metrics.extend(metrics_of(producer.produce(left_ms, window=window)))
            except OtelBridgeError as exc:
                failed += 1
                self._warn.warning(
                    f"produce:{name}",
                    "step %d: %s failed, its metrics are missing: %s",
                    window.step,
                    name,
                    exc,
                )
            except Exception:  # noqa: BLE001 - a producer bug must not stop the trainer's metrics from being delivered
                failed += 1
                if self._warn.error(f"produce-bug:{name}", "step %d: %s raised unexpectedly", window.step, name):
                    _log.exception("traceback of the %s failure", name)
        if not phase:
            self._health.set(INFRA_UNAVAILABLE, float(failed))
        return metrics

    def export_step(self, job: StepJob) -> StepRecord | None:
        """Assemble the step's MetricsData (:meth:`assemble`) and hand it, with its flags, to the exporter; the step's
        record (``None`` when it was not delivered: the MeterProvider holding this reader was shut down).

        The producers' queries and scrapes run here, with instrumentation suppressed (as the SDK's periodic reader
        exports): an instrumented ``requests`` in the trainer does not record the bridge's own HTTP calls.
        """
        with instrumentation_suppressed():
            data, flags = self.assemble(job)
            if self._exporter_closed:
                self._warn.error(
                    "export-after-shutdown",
                    "step %d is not delivered: the MeterProvider holding the bridge's reader was shut down",
                    job.window.step,
                )
                return None
            return self._exporter.export_step(data, flags)

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        """Wait until every tracker has written the records of the steps delivered so far; ``False`` on timeout.

        Unlike the base class it does not collect: between two boundaries a collection would drop the step's
        histogram deltas. A step is recorded at its boundary, never earlier.
        """
        if self._exporter_closed:
            return True
        return self._exporter.force_flush(timeout_millis=timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        """Run ``on_shutdown`` (deliver what is pending), then shut the exporter down (closes the tracker backends).

        Called once by the MeterProvider's ``shutdown()``; later calls do nothing.
        """
        deadline = time.monotonic() + timeout_millis / 1000
        with self._lock:
            if self._shutdown:
                return
            self._shutdown = True
        if self.on_shutdown is not None:
            self.on_shutdown(max(0.0, deadline - time.monotonic()))
        self._exporter.shutdown(timeout_millis=max(0.0, deadline - time.monotonic()) * 1000)
        self._exporter_closed = True


def _start_of(window: StepWindow) -> float:
    return -math.inf if window.start is None else window.start


def phase_durations(window: StepWindow, phases: Sequence[Phase]) -> list[Metric]:
    """One :data:`~otel_bridge.schema.PHASE_SECONDS_METRIC` per phase key (the seconds of its occurrences added up),
    stamped with the span of its occurrences; with phases and a window start, the step's seconds and those outside
    every phase (phases do not overlap) beside them."""
    by_key: dict[str, list[Phase]] = {}
    for p in phases:
        by_key.setdefault(p.key, []).append(p)
    durations = [
        gauge_metric(
            schema.PHASE_SECONDS_METRIC,
            [({schema.PHASE_ATTRIBUTE: key}, math.fsum(p.seconds for p in found))],
            StepWindow(window.step, found[0].start, found[-1].end),
        )
        for key, found in by_key.items()
    ]
    if phases and window.start is not None and window.seconds is not None:
        start, end = window.start, window.end
        covered = math.fsum(max(0.0, min(p.end, end) - max(p.start, start)) for p in phases)
        durations.append(gauge_metric(schema.STEP_SECONDS_METRIC, [({}, window.seconds)], window))
        durations.append(gauge_metric(schema.OUTSIDE_PHASES_METRIC, [({}, max(0.0, window.seconds - covered))], window))
    return durations


def with_phase(metric: Metric, phase: str) -> Metric:
    """``metric`` with the phase attribute added to each of its gauge points."""
    data = metric.data
    if not isinstance(data, Gauge):
        return metric
    points = [
        dataclasses.replace(p, attributes={**(p.attributes or {}), schema.PHASE_ATTRIBUTE: phase})
        for p in data.data_points
    ]
    return dataclasses.replace(metric, data=dataclasses.replace(data, data_points=points))


_PointKey = tuple[str, str, frozenset[tuple[str, Any]]]


def _delta_histograms(data: MetricsData) -> Iterator[tuple[_PointKey, HistogramDataPoint]]:
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if isinstance(metric.data, HistogramData) and metric.data.aggregation_temporality is DELTA:
                    for p in metric.data.data_points:
                        yield (sm.scope.name, metric.name, frozenset((p.attributes or {}).items())), p


def fold_deltas(earlier: MetricsData, later: MetricsData) -> MetricsData:
    """``later`` with the DELTA histogram points of ``earlier`` added in: the same scope, metric and attributes merge
    into one point (explicit buckets must match, else the later point stands); a point ``later`` lacks is carried over.
    Cumulative sums and gauges need nothing: ``later`` supersedes them."""
    pending = dict(_delta_histograms(earlier))
    if not pending:
        return later

    def merged(scope: str, metric: Metric) -> Metric:
        data = metric.data
        if not (isinstance(data, HistogramData) and data.aggregation_temporality is DELTA):
            return metric
        points = [
            _add(pending.pop((scope, metric.name, frozenset((p.attributes or {}).items())), None), p)
            for p in data.data_points
        ]
        return dataclasses.replace(metric, data=dataclasses.replace(data, data_points=points))

    resource_metrics = [
        dataclasses.replace(
            rm,
            scope_metrics=[
                dataclasses.replace(sm, metrics=[merged(sm.scope.name, m) for m in sm.metrics])
                for sm in rm.scope_metrics
            ],
        )
        for rm in later.resource_metrics
    ]
    carried = [
        dataclasses.replace(rm, scope_metrics=scopes)
        for rm in earlier.resource_metrics
        if (scopes := [s for s in (_only(sm, pending) for sm in rm.scope_metrics) if s is not None])
    ]
    return MetricsData(resource_metrics=[*resource_metrics, *carried])


def _only(sm: ScopeMetrics, keep: Mapping[_PointKey, HistogramDataPoint]) -> ScopeMetrics | None:
    """The metrics of ``sm`` reduced to the points in ``keep`` (``None`` when none is left)."""
    metrics = []
    for metric in sm.metrics:
        if isinstance(metric.data, HistogramData):
            points = [
                p
                for p in metric.data.data_points
                if (sm.scope.name, metric.name, frozenset((p.attributes or {}).items())) in keep
            ]
            if points:
                metrics.append(dataclasses.replace(metric, data=dataclasses.replace(metric.data, data_points=points)))
    return dataclasses.replace(sm, metrics=metrics) if metrics else None


def _add(earlier: HistogramDataPoint | None, later: HistogramDataPoint) -> HistogramDataPoint:
    if earlier is None or tuple(earlier.explicit_bounds) != tuple(later.explicit_bounds):
        return later
    return dataclasses.replace(
        later,
        start_time_unix_nano=earlier.start_time_unix_nano,
        count=earlier.count + later.count,
        sum=earlier.sum + later.sum,
        bucket_counts=[a + b for a, b in zip(earlier.bucket_counts, later.bucket_counts, strict=True)],
        min=min(earlier.min, later.min),
        max=max(earlier.max, later.max),
        exemplars=[*earlier.exemplars, *later.exemplars],
    )
