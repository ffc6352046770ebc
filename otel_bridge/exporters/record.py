"""The record every backend receives: one per training step."""

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
