"""The record every backend receives, one per training step, and the flags that say how its step went."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StepRecord:
    """Everything a tracker logs for one training step.

    ``values`` maps flat tracker keys (see :mod:`otel_bridge.exporters.naming`) to finite floats. ``time``
    is the step boundary (the window end, unix seconds); ``window_start`` is the previous boundary, or
    ``None`` for a step without one. ``notes`` are human-readable remarks about the record, e.g. why some
    statistics are missing.
    """

    step: int
    values: Mapping[str, float]
    time: float
    window_start: float | None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class StepFlags:
    """What happened to a step besides its values, handed with its ``MetricsData`` from the reader to the exporter;
    each flag set becomes a note of the step's record.

    ``infra_dropped``: the step's infrastructure readings were not asked for (the step queue was full, or ``close()``
    ran out of time); ``infra_late``: the sources did not answer within ``delivery.produce_timeout_s``;
    ``interrupted``: the step did not end normally (an exception or SIGTERM left its block, or ``close()`` ended it
    while open).
    """

    infra_dropped: bool = False
    infra_late: bool = False
    interrupted: bool = False
