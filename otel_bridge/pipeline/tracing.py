"""Each training step as an OpenTelemetry trace: a ``step`` span with one child span per phase.

When ``otel.otlp`` is enabled (and ``otel.otlp.traces`` not set false) the bridge exports, beside the trainer's
metrics, one trace per step over OTLP/HTTP:

- the span ``step`` covers the step's window (from its first phase when a phase began before the step's start, from
  the end when the first record of a run has no start), attributes ``otel_bridge.step``, ``otel_bridge.run``,
  ``otel_bridge.rank`` and the step's infrastructure figures under their record keys
  (``rollout/vllm/generation_tokens_total/rate``...);
- one child span per phase, named as the phase (``gen``, ``update_actor``, ``gen_2``), covering the phase's window,
  with the same three attributes, ``otel_bridge.phase`` and the phase's figures: ``seconds`` and every infrastructure
  statistic of the phase under its record key without the ``phase/<name>/`` prefix. A phase repeated within the step
  under one key (``naming.phase_repeats: sum``) is one span per occurrence, each with its own ``seconds`` only: the
  record's figures of that key are those of all occurrences together.

Spans are made after the fact on the delivery worker (start and end times given explicitly), once the step's record
exists, and exported by the SDK's ``BatchSpanProcessor`` (its own thread, instrumentation suppressed) with a
TracerProvider of the bridge's own: the global one, if the trainer set one, is left alone.

The endpoint: ``otel.otlp.endpoint`` with its ``/v1/metrics`` path replaced by ``/v1/traces`` (a bare collector URL
gets ``/v1/traces``); else ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``OTEL_EXPORTER_OTLP_ENDPOINT`` (+ ``/v1/traces``)
or ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` made a traces URL the same way.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource

from otel_bridge.config import OTelConfig
from otel_bridge.exporters.naming import PHASE_PREFIX
from otel_bridge.exporters.record import StepRecord
from otel_bridge.pipeline.phases import Phase
from otel_bridge.window import StepWindow

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

_log = logging.getLogger(__name__)

TRACER_NAME: Final = "otel_bridge.steps"
STEP_SPAN: Final = "step"
MAX_FIGURES: Final = 100
"""At most this many figures per span (the SDK keeps 128 attributes by default)."""


def traces_endpoint(metrics_endpoint: str | None, environ: Mapping[str, str]) -> str | None:
    """The OTLP/HTTP traces URL matching the metrics configuration (see the module docstring); ``None`` when only
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``/``OTEL_EXPORTER_OTLP_ENDPOINT`` say it (the exporter reads them)."""
    if metrics_endpoint is None:
        if environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
            return None
        metrics_endpoint = environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
        if not metrics_endpoint:
            return None
    base = metrics_endpoint.rstrip("/")
    if base.endswith("/v1/metrics"):
        base = base[: -len("/v1/metrics")]
    return f"{base}/v1/traces"


class StepTracer:
    """Turns each delivered step into a ``step`` span and its phases into child spans (module docstring)."""

    def __init__(self, provider: TracerProvider, *, run: str, rank: int, infra_prefix: str) -> None:
        self._provider = provider
        self._tracer = provider.get_tracer(TRACER_NAME)
        self._attributes: dict[str, str | int] = {"otel_bridge.run": run, "otel_bridge.rank": rank}
        self._infra_prefix = f"{infra_prefix}/" if infra_prefix else ""

    def trace(self, window: StepWindow, phases: Sequence[Phase], record: StepRecord | None) -> None:
        """Record the spans of one step (``record``: its delivered values, for the figures)."""
        values = record.values if record is not None else {}
        starts = [p.start for p in phases] + ([window.start] if window.start is not None else [])
        step_attributes = {**self._attributes, "otel_bridge.step": window.step}
        step_figures = {k: v for k, v in values.items() if self._infra_prefix and k.startswith(self._infra_prefix)}
        parent = self._tracer.start_span(
            STEP_SPAN,
            start_time=_ns(min(starts, default=window.end)),
            attributes={**_limited(step_figures), **step_attributes},
        )
        context = trace.set_span_in_context(parent)
        repeated = {key for key, n in Counter(p.key for p in phases).items() if n > 1}
        for phase in phases:
            prefix = f"{PHASE_PREFIX}/{phase.key}/"
            # the record's figures of a key several occurrences share are their union's: each span gets its own seconds
            figures = (
                {}
                if phase.key in repeated
                else {k[len(prefix) :]: v for k, v in values.items() if k.startswith(prefix)}
            )
            figures.setdefault("seconds", phase.seconds)
            span = self._tracer.start_span(
                phase.key,
                context=context,
                start_time=_ns(phase.start),
                attributes={**_limited(figures), **step_attributes, "otel_bridge.phase": phase.key},
            )
            span.end(end_time=_ns(phase.end))
        parent.end(end_time=_ns(window.end))

    def close(self, timeout_s: float = 10.0) -> None:
        """Export what is pending (up to ``timeout_s``) and stop the exporter."""
        self._provider.force_flush(max(0, int(timeout_s * 1000)))
        self._provider.shutdown()


def _ns(t: float) -> int:
    return round(t * 1e9)


def _limited(figures: Mapping[str, float]) -> dict[str, float]:
    return dict(sorted(figures.items())[:MAX_FIGURES])


def build_step_tracer(
    config: OTelConfig,
    resource: Resource,
    *,
    run: str,
    rank: int,
    infra_prefix: str,
    environ: Mapping[str, str] | None = None,
) -> StepTracer | None:
    """A :class:`StepTracer` exporting over OTLP/HTTP when ``otel.otlp`` is enabled with ``traces``, else ``None``."""
    if not config.otlp.enabled or not config.otlp.traces:
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    environ = os.environ if environ is None else environ
    endpoint = traces_endpoint(config.otlp.endpoint, environ)
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, timeout=config.otlp.timeout_s)))
    _log.info("otel-bridge: step traces to %s", endpoint or "the OTEL_EXPORTER_OTLP_* endpoint")
    return StepTracer(provider, run=run, rank=rank, infra_prefix=infra_prefix)
