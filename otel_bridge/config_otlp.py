"""A metrics entry given by OpenTelemetry instrument (``metrics[].otlp``) instead of by Prometheus name.

The trainer's instruments reach Prometheus through the collector renamed (``trainer.tokens`` counting ``{token}``
becomes ``trainer_tokens_total``); this entry names them as the trainer wrote them, and the bridge queries the name the
collector gives them (:mod:`otel_bridge.prometheus.otlp_names`), summed over every rank that pushes them.
"""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from otel_bridge.prometheus.otlp_names import Instrument, prometheus_name
from otel_bridge.prometheus.promql import METRIC_NAME

__all__ = ["OTLPInstrumentConfig"]


class OTLPInstrumentConfig(BaseModel):
    """``metrics[].otlp``: the instrument as the trainer created it, e.g. ``{name: trainer.tokens, unit: "{token}",
    instrument: counter}``."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    name: str = Field(description="The instrument's name, e.g. trainer.tokens.")
    unit: str = Field("", description="The instrument's unit (UCUM): s, By, 1, {token}, By/s, ...; default none.")
    instrument: Instrument = Field(
        description=(
            "counter | up_down_counter | gauge | histogram (ObservableCounter is a counter, ObservableUpDownCounter "
            "an up_down_counter, ObservableGauge a gauge)."
        )
    )
    namespace: str = Field(
        "", description="The collector exporter's `namespace`, if it sets one (the shipped config does not)."
    )

    @model_validator(mode="after")
    def _translatable(self) -> Self:
        translated = prometheus_name(self.name, self.unit, self.instrument, self.namespace)
        if not METRIC_NAME.fullmatch(translated):
            raise ValueError(
                f"namespace {self.namespace!r} makes {translated!r}, not a valid Prometheus metric name: use letters, "
                "digits and '_'"
            )
        return self

    @property
    def prometheus_name(self) -> str:
        """The metric name in Prometheus (a histogram's series add ``_bucket``, ``_sum``, ``_count``)."""
        return prometheus_name(self.name, self.unit, self.instrument, self.namespace)
