"""What a producer asks for each window: a window source, one way of reading a window.

A producer keeps its lifecycle (start-up, the boundaries as they happen, shutdown) and, for each window, asks the one
source it chose at start-up from what its store and setup allow (the PromQL wing's four: docs/architecture.md, The
PromQL wing). A source answers with the window's metrics and its report (:class:`WindowReport`); the producer has the
report said (:class:`~otel_bridge.producers.window_report.WindowReporter`) and hands the metrics on. A source whose
readings come from elsewhere (agents pushing them) fits as well: it waits for them within the :class:`ReadBudget`
and reads them in :meth:`WindowSource.read`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from opentelemetry.sdk.metrics.export import Metric

from otel_bridge.producers.window_report import WindowReport
from otel_bridge.window import StepWindow

__all__ = ["ReadBudget", "WindowReading", "WindowSource"]


@dataclass(frozen=True, slots=True)
class ReadBudget:
    """The time a window's reading may take: the producer was asked at ``started`` (unix time) with
    ``timeout_millis`` (the step's ``delivery.produce_timeout_s``, what is left of it)."""

    started: float
    timeout_millis: float

    @property
    def waits_until(self) -> float:
        """Until when a source may wait for what stands for a boundary: half the budget, the rest is for asking and
        computing."""
        return self.started + self.timeout_millis / 2000.0


@dataclass
class WindowReading:
    """A window as a source read it: its metrics, and what it could not read (the report)."""

    metrics: list[Metric]
    report: WindowReport


class WindowSource(Protocol):
    """One way of reading a window, chosen once at a producer's start-up."""

    def read(self, window: StepWindow, budget: ReadBudget) -> WindowReading:
        """The metrics of ``window`` and its report, within ``budget`` (runs on the delivery worker: may block)."""
        ...

    def on_boundary(self, t: float) -> None:
        """A step boundary at unix time ``t`` (on the training thread: must not block)."""
        ...

    def close(self) -> None:
        """Release what the source holds (threads, a scraper)."""
        ...
