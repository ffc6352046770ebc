"""What a producer is: OpenTelemetry's MetricProducer, told which step window to read.

The OpenTelemetry specification's MetricProducer bridges a third-party metric source into a MetricReader: its
``Produce`` returns a batch of metrics under the InstrumentationScope of the producer. opentelemetry-python has none
yet; its proposal (pull request 5419, for issue 4768) is an abstract ``MetricProducer`` whose
``produce(timeout_millis: float = 10_000) -> Iterable[ScopeMetrics]`` a ``MetricReader(metric_producers=[...])``
calls at each collection, merging the scopes it returns into the collection's ``MetricsData``.

:class:`MetricProducer` is that method with one more, keyword-only argument: the window whose statistics to produce.
A step boundary decides when a step is read, and a step (and each of its phases) is read as a window ``(start, end]``,
not as "now". Every producer answers with one ``ScopeMetrics`` of the infrastructure scope
(:data:`otel_bridge.schema.INFRA_SCOPE`: :func:`infra_scope`). Adopting the SDK's own type, once it ships, is an
adapter holding the window::

    class WindowProducer(opentelemetry.sdk.metrics.export.MetricProducer):
        def __init__(self, producer: MetricProducer, window: StepWindow) -> None:
            self._producer, self._window = producer, window

        def produce(self, timeout_millis: float = 10_000) -> Iterable[ScopeMetrics]:
            return self._producer.produce(timeout_millis, window=self._window)

The reader (:class:`~otel_bridge.pipeline.reader.StepMetricReader`) gives each call the time left of the step's
``delivery.produce_timeout_s`` and stops waiting when it is up, whatever a producer does; the built-in producers bound
each request by their own configured timeouts besides. :class:`ProducerLifecycle` is what a producer may add: its
start-up checks, the boundaries as they happen (on the training thread, never blocking), and its shutdown.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

from opentelemetry.sdk.metrics.export import Metric, ScopeMetrics
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from otel_bridge.schema import INFRA_SCOPE
from otel_bridge.window import StepWindow

__all__ = ["MetricProducer", "ProducerLifecycle", "infra_scope", "metrics_of"]


@runtime_checkable
class MetricProducer(Protocol):
    """OpenTelemetry's MetricProducer for a step window: the metrics describing what happened during ``window``."""

    def produce(self, timeout_millis: float = 10_000, *, window: StepWindow) -> Sequence[ScopeMetrics]:
        """The metrics for ``window``, as scope metrics (see the module docstring). May block on the network for up
        to ``timeout_millis``: it runs on the delivery worker."""
        ...


@runtime_checkable
class ProducerLifecycle(Protocol):
    """Optional hooks of a producer: start-up checks, boundary notifications, shutdown."""

    def start(self) -> None:
        """Validate and connect (raise a typed error on configuration problems)."""
        ...

    def on_boundary(self, t: float) -> None:
        """A step boundary happened at unix time ``t`` (called on the training thread: must not block)."""
        ...

    def close(self) -> None:
        """Release threads and connections."""
        ...


_INFRASTRUCTURE = InstrumentationScope(INFRA_SCOPE)


def infra_scope(metrics: Iterable[Metric]) -> list[ScopeMetrics]:
    """``metrics`` as :meth:`MetricProducer.produce` returns them: one ``ScopeMetrics`` of the infrastructure scope."""
    return [ScopeMetrics(scope=_INFRASTRUCTURE, metrics=list(metrics), schema_url="")]


def metrics_of(scopes: Iterable[ScopeMetrics]) -> list[Metric]:
    """Every metric of ``scopes`` (what a producer returned), in order."""
    return [metric for scope in scopes for metric in scope.metrics]
