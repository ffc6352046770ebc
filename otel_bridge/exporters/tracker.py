"""TrackerExporter: an OpenTelemetry MetricExporter that writes one flat record per training step to every backend.

Flattening rules (all key rules live in :mod:`otel_bridge.exporters.naming`):

- scope ``otel_bridge.window``: the step and its window (not a key); the step's flags come beside the data
  (:class:`~otel_bridge.exporters.record.StepFlags`) and become the record's notes;
- scope ``otel_bridge.infrastructure``: ``<prefix>/<metric name with ':' as '/'>/<stat>[/<label>.<value>...]``;
- scope ``otel_bridge.trainer`` (``bridge.log()``): the trainer's own keys, as given; a backend with a ``key_rule``
  (:class:`~otel_bridge.exporters.naming.KeyRule`: MLflow, wandb) receives the keys it cannot take renamed, and the
  record's notes say which;
- scope ``otel_bridge.phase``: ``phase/<phase>/seconds`` and ``phase/<phase>/<infrastructure key>`` (the phase's
  window statistics, keyed as the step's are);
- scope ``otel_bridge.health``: ``otel_bridge/...`` keys;
- any other scope (the trainer's OTel instruments): the instrument name, plus ``/<label>.<value>`` per attribute;
  histograms as ``/count``, ``/sum``, ``/mean``, ``/min``, ``/max`` of the step's observations.

Non-finite values (NaN: e.g. a quantile of a step without observations) are left out of the record and counted in
``otel_bridge/nonfinite_values``. Each backend is written by its own
:class:`~otel_bridge.exporters.delivery.BackendWorker` thread, in step order, with retries: one that fails or
hangs is counted in ``otel_bridge/backend_errors/backend.<name>`` and logged (rate-limited) while the others still
receive every record.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from opentelemetry.sdk.metrics.export import (
    Gauge,
    Histogram,
    HistogramDataPoint,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
    Sum,
)

from otel_bridge.exporters.backends.base import Backend
from otel_bridge.exporters.delivery import BackendWorker, DeliveryStatus, finish_all
from otel_bridge.exporters.naming import (
    OUTSIDE_PHASES_KEY,
    STEP_SECONDS_KEY,
    KeyRegistry,
    KeyRule,
    TrackerKeys,
    infra_key,
    instrument_key,
    phase_key,
    sanitize_key,
    trainer_key,
)
from otel_bridge.exporters.record import StepFlags, StepRecord
from otel_bridge.health import BACKEND_ERRORS, NONFINITE_VALUES, Health
from otel_bridge.ratelimit import RateLimitedLogger
from otel_bridge.schema import (
    HEALTH_SCOPE,
    INFRA_SCOPE,
    OUTSIDE_PHASES_METRIC,
    PHASE_ATTRIBUTE,
    PHASE_SCOPE,
    PHASE_SECONDS_METRIC,
    STAT_ATTRIBUTE,
    STEP_METRIC,
    STEP_SECONDS_METRIC,
    TRAINER_SCOPE,
    WINDOW_SCOPE,
)

_log = logging.getLogger(__name__)
_STEP_PHASE_KEYS = {STEP_SECONDS_METRIC: STEP_SECONDS_KEY, OUTSIDE_PHASES_METRIC: OUTSIDE_PHASES_KEY}

_NO_FLAGS = StepFlags()
FIRST_STEP_NOTE = "no previous boundary: counter, histogram and ratio statistics need one and are omitted for this step"
INFRA_DROPPED_NOTE = "infrastructure readings dropped: the delivery queue was full (see delivery.max_block_s)"
INFRA_LATE_NOTE = (
    "infrastructure readings missing: the sources did not answer within delivery.produce_timeout_s (or the step "
    "queue was full); the trainer's values are complete"
)
INTERRUPTED_NOTE = (
    "interrupted: the step did not end normally (an exception or SIGTERM left its block, or close() ended it while "
    "open); its window ends there and it has what was logged until then"
)


class TrackerExporter(MetricExporter):
    """Flattens each step's ``MetricsData`` to ``{key: float}`` and hands it to every backend's delivery thread."""

    def __init__(
        self,
        backends: Sequence[Backend],
        *,
        infra_prefix: str = "rollout",
        health: Health | None = None,
        warn_interval_s: float = 60.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        backend_queue_size: int = 10_000,
    ) -> None:
        super().__init__()
        self._prefix = infra_prefix
        self._health = health or Health()
        self._keys = KeyRegistry()
        self._warn = RateLimitedLogger(_log, warn_interval_s)
        self._lock = threading.Lock()
        self._closed = False
        self._pid = os.getpid()  # a forked child (DataLoader worker) must never write, flush or close these backends
        self._report: list[DeliveryStatus] | None = None
        names = [b.name for b in backends]
        if len(set(names)) != len(names):
            raise ValueError(f"tracker backends need distinct names, got {names}")
        for backend in backends:
            self._health.count(BACKEND_ERRORS, 0.0, labels={"backend": backend.name})
        self._tracker_keys: dict[str, TrackerKeys] = {
            backend.name: TrackerKeys(rule)
            for backend in backends
            if isinstance(rule := getattr(backend, "key_rule", None), KeyRule)
        }
        self._workers = [
            BackendWorker(
                backend,
                health=self._health,
                retries=retries,
                backoff_s=backoff_s,
                queue_size=backend_queue_size,
                warn=self._warn,
            )
            for backend in backends
        ]

    @property
    def backends(self) -> list[Backend]:
        """The backends records are written to."""
        return [w.backend for w in self._workers]

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        """Flatten one step's MetricsData and queue the record for every backend (no backend I/O here)."""
        self.export_step(metrics_data)
        return MetricExportResult.SUCCESS

    def export_step(self, metrics_data: MetricsData, flags: StepFlags = _NO_FLAGS) -> StepRecord:
        """:meth:`export` for the step reader: the step's ``flags`` come with its data, and the record is returned (to
        the delivery worker, which keeps it and traces the step)."""
        record = self.flatten(metrics_data, flags)
        self.write(record)
        return record

    def write(self, record: StepRecord) -> None:
        """Queue ``record`` for every backend, in step order (nothing in a forked child: the backends are the
        parent's)."""
        if self.forked:
            return
        with self._lock:
            if self._closed:
                raise RuntimeError("TrackerExporter is shut down")
            for worker in self._workers:
                keys = self._tracker_keys.get(worker.name)
                worker.submit(record if keys is None else replace(record, values=keys.rename(record.values)))

    @property
    def forked(self) -> bool:
        """This is a copy in a forked child process: the backends (their threads, runs, files) are the parent's."""
        return os.getpid() != self._pid

    def delivery_status(self) -> list[DeliveryStatus]:
        """Per backend: written, given up on, still queued (the final report once shut down)."""
        if self._report is not None:
            return list(self._report)
        return [w.status() for w in self._workers]

    def flatten(self, metrics_data: MetricsData, flags: StepFlags = _NO_FLAGS) -> StepRecord:
        """The step record a ``MetricsData`` describes, with the notes its step's ``flags`` call for (see the module
        docstring for the key rules)."""
        step: int | None = None
        start: float | None = None
        end = 0.0
        values: dict[str, float] = {}
        nonfinite = 0
        for scope_name, metric_name, point in _points(metrics_data):
            if scope_name == WINDOW_SCOPE:
                if metric_name == STEP_METRIC and isinstance(point, NumberDataPoint):
                    step = int(point.value)
                    start = point.start_time_unix_nano / 1e9 if point.start_time_unix_nano else None
                    end = point.time_unix_nano / 1e9
                continue
            for source, key, value in self._keys_of(scope_name, metric_name, point):
                if not math.isfinite(value):
                    nonfinite += 1
                    continue
                values[self._keys.key_for(source, key)] = value
        if step is None:
            raise ValueError(f"MetricsData has no {STEP_METRIC} metric in scope {WINDOW_SCOPE}: not a step collection")
        self._health.count(NONFINITE_VALUES, nonfinite)
        notes = (
            ((FIRST_STEP_NOTE,) if start is None else ())
            + ((INFRA_DROPPED_NOTE,) if flags.infra_dropped else ())
            + ((INFRA_LATE_NOTE,) if flags.infra_late else ())
            + ((INTERRUPTED_NOTE,) if flags.interrupted else ())
            + tuple(note for keys in self._tracker_keys.values() if (note := keys.note(values)) is not None)
        )
        return StepRecord(step=step, values=values, time=end, window_start=start, notes=notes)

    def _keys_of(
        self, scope_name: str, metric_name: str, point: NumberDataPoint | HistogramDataPoint
    ) -> Iterator[tuple[str, str, float]]:
        attributes = {str(k): str(v) for k, v in (point.attributes or {}).items()}
        source = f"{scope_name}|{metric_name}|{sorted(attributes.items())}"
        if scope_name == INFRA_SCOPE:
            stat = attributes.pop(STAT_ATTRIBUTE, None)
            assert isinstance(point, NumberDataPoint)
            yield source, infra_key(metric_name, stat, attributes, prefix=self._prefix), float(point.value)
        elif scope_name == PHASE_SCOPE and metric_name in _STEP_PHASE_KEYS:
            assert isinstance(point, NumberDataPoint)
            yield source, _STEP_PHASE_KEYS[metric_name], float(point.value)
        elif scope_name == PHASE_SCOPE:
            assert isinstance(point, NumberDataPoint)
            phase = attributes.pop(PHASE_ATTRIBUTE, "")
            if metric_name == PHASE_SECONDS_METRIC:
                yield source, phase_key(phase, "seconds"), float(point.value)
            else:
                stat = attributes.pop(STAT_ATTRIBUTE, None)
                key = infra_key(metric_name, stat, attributes, prefix=self._prefix)
                yield source, phase_key(phase, key), float(point.value)
        elif scope_name == TRAINER_SCOPE:
            assert isinstance(point, NumberDataPoint)
            yield source, trainer_key(metric_name), float(point.value)
        elif scope_name == HEALTH_SCOPE:
            assert isinstance(point, NumberDataPoint)
            yield source, _with_labels(metric_name, attributes), float(point.value)
        elif isinstance(point, HistogramDataPoint):
            base = _with_labels(instrument_key(metric_name), attributes)
            yield f"{source}|count", f"{base}/count", float(point.count)
            yield f"{source}|sum", f"{base}/sum", float(point.sum)
            if point.count:
                yield f"{source}|mean", f"{base}/mean", point.sum / point.count
                yield f"{source}|min", f"{base}/min", float(point.min)
                yield f"{source}|max", f"{base}/max", float(point.max)
        else:
            yield source, _with_labels(instrument_key(metric_name), attributes), float(point.value)

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        """Wait until every backend has written what it was given; ``False`` on timeout."""
        if self.forked:
            return True
        deadline = time.monotonic() + timeout_millis / 1000
        return all([w.drain(deadline) for w in self._workers])

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        """Deliver what is queued (until the timeout), close every backend, and log what was not delivered.

        In a forked child it does nothing: closing would end the parent's wandb/MLflow run while it trains.
        """
        if self.forked:
            return
        with self._lock:
            if self._closed:
                return
            self._closed = True
        report = finish_all(self._workers, time.monotonic() + timeout_millis / 1000)
        self._report = report
        for status in report:
            if status.failed_steps or status.pending_steps:
                _log.error(
                    "tracker backend %r did not receive %d step(s): given up %s, still queued at close %s",
                    status.backend,
                    len(status.failed_steps) + len(status.pending_steps),
                    list(status.failed_steps),
                    list(status.pending_steps),
                )
            for problem in status.problems:
                _log.error("tracker backend %r: %s", status.backend, problem)


def _with_labels(key: str, labels: Mapping[str, str]) -> str:
    suffix = "/".join(f"{name}.{value}" for name, value in sorted(labels.items()))
    return sanitize_key(f"{key}/{suffix}" if suffix else key)


def _points(metrics_data: MetricsData) -> Iterator[tuple[str, str, NumberDataPoint | HistogramDataPoint]]:
    for resource_metrics in metrics_data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            scope_name = scope_metrics.scope.name
            for metric in scope_metrics.metrics:
                data = metric.data
                if isinstance(data, Gauge | Sum | Histogram):
                    for point in data.data_points:
                        yield scope_name, metric.name, point
