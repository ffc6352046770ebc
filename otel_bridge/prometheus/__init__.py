"""Talking to Prometheus: the HTTP API client, PromQL building and exposition parsing."""

from otel_bridge.prometheus import promql
from otel_bridge.prometheus.answers import PromSeries, QueryResult
from otel_bridge.prometheus.client import PrometheusClient, check_credentials, normalise_url
from otel_bridge.prometheus.exposition import ExpositionFamily, ExpositionSample, parse_exposition
from otel_bridge.prometheus.promql import parse_duration

__all__ = [
    "ExpositionFamily",
    "ExpositionSample",
    "PromSeries",
    "PrometheusClient",
    "QueryResult",
    "check_credentials",
    "normalise_url",
    "parse_duration",
    "parse_exposition",
    "promql",
]
