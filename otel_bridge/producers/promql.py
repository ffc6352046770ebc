"""PromQLProducer: window statistics from the Prometheus HTTP API, at most two requests per step.

For a window ``(start, end]`` every query is evaluated at ``time=end``:

1. one instant query, the union (``or``) of every gauge statistic computed by Prometheus
   (``sum by (...) (max_over_time(x[<window>]))``) and every raw PromQL expression, each tagged with a label
   ``otel_bridge_q`` saying which configured metric and statistic it answers;
2. one range-selector query (``{__name__=~"a|b|..."}[<window + baseline lookback>]``) returning the raw samples of
   every counter and histogram series, from which the exact, reset-aware window statistics are computed with the same
   code the scrape path uses (:mod:`otel_bridge.producers.aggregate`).

So the number of HTTP requests per step does not grow with the number of configured metrics.
"""

from __future__ import annotations

import logging
import math
import time
from collections import defaultdict
from collections.abc import Sequence

from opentelemetry.sdk.metrics.export import Metric

from otel_bridge.errors import ConfigError, PrometheusAPIError, PrometheusError
from otel_bridge.health import MISSING_METRICS, QUERY_ERRORS, Health
from otel_bridge.producers.aggregate import RawSeries, StatPoint, compute_stats
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.points import missing_warning, to_metric
from otel_bridge.prometheus import promql
from otel_bridge.prometheus.client import PrometheusClient, QueryResult
from otel_bridge.ratelimit import RateLimitedLogger
from otel_bridge.window import MetricKind, StepWindow

_log = logging.getLogger(__name__)

TAG_LABEL = "otel_bridge_q"
WINDOW_PLACEHOLDER = "$window"
_OVER_TIME = {
    "last": "last_over_time",
    "min": "min_over_time",
    "max": "max_over_time",
    "mean": "avg_over_time",
}
_AGGREGATE = {"sum": "sum", "mean": "avg", "max": "max", "min": "min"}


class PromQLProducer:
    """Reads the configured metrics from Prometheus for each step window (see the module docstring)."""

    def __init__(
        self,
        client: PrometheusClient,
        queries: Sequence[MetricQuery],
        *,
        scrape_interval_s: float = 15.0,
        health: Health | None = None,
        warn_interval_s: float = 60.0,
        strict: bool = True,
    ) -> None:
        self._client = client
        self._strict = strict
        self._ready = False
        self._queries = list(queries)
        self._lookback_s = 2.0 * scrape_interval_s
        self._health = health or Health()
        self._warn = RateLimitedLogger(_log, warn_interval_s)
        self._health.count(QUERY_ERRORS, 0.0)

    @property
    def queries(self) -> list[MetricQuery]:
        """The resolved queries (types filled in after :meth:`start`)."""
        return list(self._queries)

    def start(self) -> None:
        """Check Prometheus and every query once, resolving metric types from its metadata.

        A rejected query raises :class:`ConfigError`. An unreachable or broken Prometheus raises in strict mode; in
        degrade mode it is logged and retried at every step until it works.
        """
        try:
            self._prepare()
        except ConfigError:
            raise
        except PrometheusError as exc:
            if self._strict:
                raise
            self._health.count(QUERY_ERRORS)
            _log.warning(
                "Prometheus is not usable at start-up (%s); running without infrastructure metrics and retrying "
                "at every step (startup: degrade)",
                exc,
            )

    def _prepare(self) -> None:
        if any(q.needs_kind for q in self._queries):
            metadata = self._client.metadata()
            self._queries = [self._resolve_kind(q, metadata) for q in self._queries]
        now = time.time()
        window = StepWindow(step=-1, start=now - self._lookback_s, end=now)
        instant = self.instant_expression(window)
        if instant is not None:
            try:
                self._client.query(instant, time=now)
            except PrometheusAPIError as exc:
                raise ConfigError(
                    f"Prometheus rejects the configured metrics ({exc.error_type}: {exc.error}); "
                    "check the promql/name/labels entries under metrics"
                ) from None
        if not self._ready:
            self._ready = True
            _log.info("Prometheus at %s is usable: %d configured metric(s)", self._client.url, len(self._queries))

    def _resolve_kind(self, query: MetricQuery, metadata: dict[str, list[dict[str, str]]]) -> MetricQuery:
        if not query.needs_kind:
            return query
        assert query.name is not None
        base = query.name
        entries = metadata.get(base) or (metadata.get(base[: -len("_total")]) if base.endswith("_total") else None)
        kinds = {e.get("type") for e in entries or []}
        kind = next(iter(kinds)) if len(kinds) == 1 else None
        if kind not in ("counter", "gauge", "histogram"):
            found = (
                f"Prometheus reports {sorted(k or '?' for k in kinds)}"
                if kinds
                else "Prometheus has no metadata for it"
            )
            raise ConfigError(
                f"metrics[{query.source_index}] {query.name}: type unknown ({found}); "
                "set type: counter, gauge or histogram"
            )
        resolved: MetricKind = kind  # type: ignore[assignment]
        return query.with_kind(resolved)

    def on_boundary(self, t: float) -> None:
        """Nothing to do: Prometheus keeps the history."""

    def close(self) -> None:
        """Close the HTTP session."""
        self._client.close()

    def instant_expression(self, window: StepWindow) -> str | None:
        """The single instant query (gauge statistics and raw PromQL) for ``window``; ``None`` when there is none."""
        range_s = window.seconds if window.seconds is not None else self._lookback_s
        length = promql.duration(max(range_s, 0.001))
        parts = []
        for index, query in enumerate(self._queries):
            if query.promql is not None:
                if WINDOW_PLACEHOLDER in query.promql and window.start is None:
                    continue
                expr = query.promql.replace(WINDOW_PLACEHOLDER, length)
                parts.append(promql.tag_series(expr, TAG_LABEL, f"{index}/"))
            elif query.kind == "gauge":
                assert query.name is not None
                stats = query.stats if window.start is not None else tuple(s for s in query.stats if s == "last")
                sel = promql.selector(query.name, dict(query.matchers))
                aggregate = _AGGREGATE[query.agg] + (f" by ({', '.join(query.by)})" if query.by else "")
                for stat in stats:
                    expr = f"{aggregate} ({_OVER_TIME[stat]}({sel}[{length}]))"
                    parts.append(promql.tag_series(expr, TAG_LABEL, f"{index}/{stat}"))
        return promql.union(parts) if parts else None

    def raw_expression(self, window: StepWindow) -> str | None:
        """The single range-selector query for counters, histograms and ratios; ``None`` without a window start."""
        if window.seconds is None:
            return None
        names = sorted(
            {name for q in self._queries if q.promql is None and q.kind != "gauge" for name in q.series_names()}
        )
        if not names:
            return None
        length = promql.duration(window.seconds + self._lookback_s)
        return f"{{__name__=~{promql.regex_alternation(names)}}}[{length}]"

    def produce(self, window: StepWindow) -> list[Metric]:
        """Query Prometheus for ``window`` (at most two requests) and return one Metric per configured metric."""
        points: dict[int, list[StatPoint]] = defaultdict(list)
        answered: set[int] = set()
        if not self._ready:
            try:
                self._prepare()
            except PrometheusError:
                self._health.count(QUERY_ERRORS)
                raise
        try:
            instant = self.instant_expression(window)
            if instant is not None:
                self._collect_instant(self._client.query(instant, time=window.end), points, answered)
            raw = self.raw_expression(window)
            raw_series = self._raw_series(self._client.query(raw, time=window.end)) if raw is not None else []
        except PrometheusError:
            self._health.count(QUERY_ERRORS)
            raise
        for index, query in enumerate(self._queries):
            if query.promql is not None or query.kind == "gauge":
                continue
            computed = compute_stats(query, raw_series, window) if raw is not None else []
            if computed is not None:
                answered.add(index)
                points[index].extend(computed)
        missing = [q for i, q in enumerate(self._queries) if i not in answered and self._expects_answer(q, window)]
        self._health.set(MISSING_METRICS, float(len(missing)))
        for query in missing:
            missing_warning(self._warn, query, window, "Prometheus returned no series for it")
        return [to_metric(self._queries[i], pts, window) for i, pts in sorted(points.items()) if pts]

    def _expects_answer(self, query: MetricQuery, window: StepWindow) -> bool:
        if window.start is not None:
            return True
        if query.promql is not None:
            return WINDOW_PLACEHOLDER not in query.promql
        return query.kind == "gauge" and "last" in query.stats

    def _collect_instant(self, result: QueryResult, points: dict[int, list[StatPoint]], answered: set[int]) -> None:
        for series in result.series:
            tag = series.labels.get(TAG_LABEL)
            if tag is None or not series.samples:
                continue
            index_text, _, stat = tag.partition("/")
            index = int(index_text)
            labels = {k: v for k, v in series.labels.items() if k not in (TAG_LABEL, "__name__")}
            query = self._queries[index]
            group = (
                tuple(sorted(labels.items()))
                if query.promql is not None
                else tuple((b, labels[b]) for b in query.by if b in labels)
            )
            value = series.samples[-1][1]
            answered.add(index)
            if query.promql is not None or not math.isnan(value):
                points[index].append(StatPoint(stat or None, group, value))

    @staticmethod
    def _raw_series(result: QueryResult) -> list[RawSeries]:
        out = []
        for series in result.series:
            name = series.labels.get("__name__")
            if name is None:
                continue
            labels = {k: v for k, v in series.labels.items() if k != "__name__"}
            out.append(RawSeries(name=name, labels=labels, samples=series.samples))
        return out
