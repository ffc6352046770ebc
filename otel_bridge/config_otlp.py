"""A metrics entry given by OpenTelemetry instrument (``metrics[].otlp``) instead of by Prometheus name.

The trainer's instruments reach Prometheus through the collector renamed (``trainer.tokens`` counting ``{token}``
becomes ``trainer_tokens_total``); this entry names them as the trainer wrote them, and the bridge queries the name the
collector gives them (:mod:`otel_bridge.prometheus_names`), summed over every rank that pushes them.

The entry mirrors the exporter's naming settings. otelcol-contrib v0.136.0's ``prometheusremotewrite`` exporter has
``add_metric_suffixes`` only (``translation_strategy`` came to it in 2026, contrib PR #47714); its ``prometheus``
exporter also has ``translation_strategy`` (since v0.132.0: the ``exporter.prometheusexporter.DisableAddMetricSuffixes``
gate registered with it, ``internal/metadata/generated_feature_gates.go`` at commit 40c9eb77, is alpha, i.e. off, in
v0.136), and an explicit strategy wins over ``add_metric_suffixes`` (``getTranslationConfiguration`` in its
``collector.go``, read at commit 0000b194: strategy if set, else suffixes if that gate is on, else
``add_metric_suffixes``; UTF-8 only for the two ``NoUTF8``/``NoTranslation`` strategies).
"""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from otel_bridge.prometheus_names import (
    ESCAPING_STRATEGIES,
    METRIC_NAME,
    Instrument,
    TranslationStrategy,
    prometheus_name,
)

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
    add_metric_suffixes: bool = Field(
        True, description="The collector exporter's `add_metric_suffixes` (true by default: unit, _total and _ratio)."
    )
    translation_strategy: TranslationStrategy | None = Field(
        None,
        description=(
            "The `prometheus` exporter's `translation_strategy`, if it sets one (it then wins over "
            "add_metric_suffixes): UnderscoreEscapingWithSuffixes or UnderscoreEscapingWithoutSuffixes."
        ),
    )

    @model_validator(mode="after")
    def _translatable(self) -> Self:
        strategy = self.translation_strategy
        if strategy is not None and strategy not in ESCAPING_STRATEGIES:
            raise ValueError(
                f"translation_strategy {strategy} keeps the name's dots (a UTF-8 metric name), which the bridge does "
                "not query: use UnderscoreEscapingWithSuffixes or UnderscoreEscapingWithoutSuffixes in the exporter "
                "and here"
            )
        translated = self.prometheus_name
        if not METRIC_NAME.fullmatch(translated):
            raise ValueError(
                f"namespace {self.namespace!r} makes {translated!r}, not a valid Prometheus metric name: use letters, "
                "digits and '_'"
            )
        return self

    @property
    def suffixes(self) -> bool:
        """Whether the exporter adds unit and type suffixes: the strategy's choice if one is set."""
        if self.translation_strategy is not None:
            return ESCAPING_STRATEGIES.get(self.translation_strategy, True)
        return self.add_metric_suffixes

    @property
    def prometheus_name(self) -> str:
        """The metric name in Prometheus (a histogram's series add ``_bucket``, ``_sum``, ``_count``)."""
        return prometheus_name(self.name, self.unit, self.instrument, self.namespace, self.suffixes)
