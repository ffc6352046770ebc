"""BASELINE (not today's otel-bridge): the raw-sample PromQL design, frozen for the promql-scale suite.

A self-contained copy of the reading done by ``otel_bridge/producers/promql.py`` as of commit 3a63837 (before its
rewrite to server-side aggregation), so that it can still be measured after the rewrite. Per step window
``(start, end]``, evaluated at ``time=end``:

1. one instant query, the union (``or``) of every gauge statistic computed by Prometheus
   (``sum (max_over_time(x[<window>]))``), each tagged with a label ``otel_bridge_q`` naming the query and statistic;
2. one range-selector query ``{__name__=~"a|b|..."}[<window + 2 x scrape interval>]`` returning the raw samples of
   every counter and histogram series, of every replica, from which the exact reset-aware statistics are computed
   client-side (:func:`otel_bridge.producers.statistics.compute_stats`).

Two requests per step, but the second answer grows with replicas x series x samples: at 1,024 vLLM replicas it holds
over 100,000 series (the client's default ``max_series``). Raw PromQL queries (``promql:``) and start-up checks are
left out: the suite configures only the ``vllm`` preset. Nothing in ``otel_bridge`` uses this module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from otel_bridge.producers import MetricQuery, RawSeries, StatPoint, compute_stats
from otel_bridge.prometheus import PrometheusClient, QueryResult
from otel_bridge.window import StepWindow

TAG_LABEL = "otel_bridge_q"
_OVER_TIME = {"last": "last_over_time", "min": "min_over_time", "max": "max_over_time", "mean": "avg_over_time"}
_AGGREGATE = {"sum": "sum", "mean": "avg", "max": "max", "min": "min"}
_RE2_SPECIAL = frozenset("\\.+*?()|[]{}^$")


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _duration(seconds: float) -> str:
    millis = max(1, round(seconds * 1000))
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"


def _selector(name: str, matchers: Sequence[tuple[str, str]]) -> str:
    if not matchers:
        return name
    return name + "{" + ",".join(f"{k}={_quote(v)}" for k, v in sorted(matchers)) + "}"


def _tag(expr: str, value: str) -> str:
    return f'label_replace(({expr}), "{TAG_LABEL}", {_quote(value)}, "", "")'


class RawPromQLReader:
    """The raw-sample design: ``produce(window)`` -> ``{query key: [StatPoint, ...]}`` (see the module docstring)."""

    def __init__(self, client: PrometheusClient, queries: Sequence[MetricQuery], *, scrape_interval_s: float = 15.0):
        if any(q.promql is not None or q.kind is None for q in queries):
            raise ValueError("the raw-sample baseline reads typed metrics and ratios only (no promql:, no untyped)")
        self._client = client
        self._queries = list(queries)
        self._lookback_s = 2.0 * scrape_interval_s

    def instant_expression(self, window: StepWindow) -> str | None:
        """The union of the gauge statistics for ``window``; ``None`` without gauges."""
        length = _duration(window.seconds if window.seconds is not None else self._lookback_s)
        parts = []
        for index, query in enumerate(self._queries):
            if query.kind != "gauge" or query.name is None:
                continue
            stats = query.stats if window.start is not None else tuple(s for s in query.stats if s == "last")
            aggregate = _AGGREGATE[query.agg] + (f" by ({', '.join(query.by)})" if query.by else "")
            sel = _selector(query.name, query.matchers)
            parts += [_tag(f"{aggregate} ({_OVER_TIME[s]}({sel}[{length}]))", f"{index}/{s}") for s in stats]
        return " or ".join(f"({p})" for p in parts) if parts else None

    def raw_expression(self, window: StepWindow) -> str | None:
        """The range selector over every counter/histogram/ratio series name; ``None`` without a window start."""
        if window.seconds is None:
            return None
        names = sorted({n for q in self._queries if q.kind != "gauge" for n in q.series_names()})
        if not names:
            return None
        alternation = "|".join("".join(f"\\{c}" if c in _RE2_SPECIAL else c for c in n) for n in names)
        return f"{{__name__=~{_quote(alternation)}}}[{_duration(window.seconds + self._lookback_s)}]"

    def produce(self, window: StepWindow) -> dict[str, list[StatPoint]]:
        """Two queries at ``time=window.end``; the statistics per configured key (missing metrics left out)."""
        points: dict[str, list[StatPoint]] = {}
        instant = self.instant_expression(window)
        if instant is not None:
            self._collect_instant(self._client.query(instant, time=window.end), points)
        raw = self.raw_expression(window)
        if raw is None:
            return points
        series = self._raw_series(self._client.query(raw, time=window.end))
        for query in self._queries:
            if query.kind == "gauge":
                continue
            computed = compute_stats(query, series, window)
            if computed:
                points.setdefault(query.key_name, []).extend(computed)
        return points

    def _collect_instant(self, result: QueryResult, points: dict[str, list[StatPoint]]) -> None:
        for series in result.series:
            tag = series.labels.get(TAG_LABEL)
            if tag is None or not series.samples:
                continue
            index_text, _, stat = tag.partition("/")
            query = self._queries[int(index_text)]
            labels = {k: v for k, v in series.labels.items() if k not in (TAG_LABEL, "__name__")}
            group = tuple((b, labels[b]) for b in query.by if b in labels)
            value = series.samples[-1][1]
            if not math.isnan(value):
                points.setdefault(query.key_name, []).append(StatPoint(stat, group, value))

    @staticmethod
    def _raw_series(result: QueryResult) -> list[RawSeries]:
        out = []
        for series in result.series:
            name = series.labels.get("__name__")
            if name is not None:
                labels = {k: v for k, v in series.labels.items() if k != "__name__"}
                out.append(RawSeries(name=name, labels=labels, samples=series.samples))
        return out
