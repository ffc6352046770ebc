"""Turning a query's statistic points into an OpenTelemetry ``Metric``, and reporting metrics that matched nothing."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.sdk.metrics.export import Metric

from otel_bridge.producers.aggregate import StatPoint
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.ratelimit import RateLimitedLogger
from otel_bridge.schema import STAT_ATTRIBUTE, gauge_metric
from otel_bridge.window import StepWindow


def to_metric(query: MetricQuery, points: Sequence[StatPoint], window: StepWindow) -> Metric:
    """One Metric named after the query's key, a data point per (statistic, label group)."""
    return gauge_metric(
        query.key_name,
        [({**dict(p.group), **({STAT_ATTRIBUTE: p.stat} if p.stat else {})}, p.value) for p in points],
        window,
    )


def missing_warning(
    warn: RateLimitedLogger,
    query: MetricQuery,
    window: StepWindow,
    why: str,
    fix: str = "check its name and labels",
) -> None:
    """Log, rate-limited per metric, that a configured metric matched no series in this step, why, and what to do."""
    what = query.name or query.promql or (f"ratio {query.ratio[0]} / {query.ratio[1]}" if query.ratio else "?")
    matchers = f" with labels {dict(query.matchers)}" if query.matchers else ""
    warn.warning(
        f"missing:{query.key_name}",
        "step %d: configured metric %s%s (metrics[%d]) matched no series: %s; %s",
        window.step,
        what,
        matchers,
        query.source_index,
        why,
        fix,
    )
