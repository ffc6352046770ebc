"""Producers: where infrastructure metrics come from, one step window at a time (OpenTelemetry's MetricProducer).

- :mod:`~otel_bridge.producers.base`: what a producer is (:class:`MetricProducer`, :class:`ProducerLifecycle`);
- :mod:`~otel_bridge.producers.metric_set` and :mod:`~otel_bridge.producers.presets`: the configured metrics, resolved;
- :mod:`~otel_bridge.producers.statistics`: all window math, from samples to a step's statistics;
  :mod:`~otel_bridge.producers.partials`: a reader's mergeable part of a window (:class:`WindowPartial`) and their
  merge (:func:`merge_window`);
- :mod:`~otel_bridge.producers.window_source`: one way of reading a window (:class:`WindowSource`), chosen once at a
  producer's start-up; :mod:`~otel_bridge.producers.window_report`: what a window could not read, said in one place
  (:class:`WindowReport`, :class:`WindowReporter`);
- two wings: :mod:`~otel_bridge.producers.promql` (:class:`PromQLProducer`, through a Prometheus-compatible store) and
  :mod:`~otel_bridge.producers.scrape` (:class:`ScrapeProducer`, straight from ``/metrics`` endpoints).
"""

from otel_bridge.producers.base import MetricProducer, ProducerLifecycle, infra_scope, metrics_of
from otel_bridge.producers.metric_set import MetricQuery, resolve_metrics
from otel_bridge.producers.partials import WindowPartial, merge_window
from otel_bridge.producers.presets import DEPRECATED, PRESETS, replacement_text
from otel_bridge.producers.promql import PromQLProcess, PromQLProducer
from otel_bridge.producers.scrape import ScrapeProcess, ScrapeProducer
from otel_bridge.producers.statistics import RawSeries, StatPoint, compute_stats, histogram_statistic
from otel_bridge.producers.window_report import WindowReport, WindowReporter
from otel_bridge.producers.window_source import ReadBudget, WindowReading, WindowSource

__all__ = [
    "DEPRECATED",
    "PRESETS",
    "MetricProducer",
    "MetricQuery",
    "ProducerLifecycle",
    "PromQLProcess",
    "PromQLProducer",
    "RawSeries",
    "ReadBudget",
    "ScrapeProcess",
    "ScrapeProducer",
    "StatPoint",
    "WindowPartial",
    "WindowReading",
    "WindowReport",
    "WindowReporter",
    "WindowSource",
    "compute_stats",
    "histogram_statistic",
    "infra_scope",
    "merge_window",
    "metrics_of",
    "replacement_text",
    "resolve_metrics",
]
