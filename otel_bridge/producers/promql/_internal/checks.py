"""Start-up checks of the configured metrics against Prometheus: UTF-8 names on a store that has none, their types,
and expressions it rejects, by entry."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Sequence

from otel_bridge.errors import ConfigError, PrometheusAPIError
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.promql._internal.plan import WINDOW_PLACEHOLDER, CounterParts, WindowPlan
from otel_bridge.producers.promql._internal.rules import counting
from otel_bridge.producers.promql._internal.store import Store
from otel_bridge.prometheus import promql
from otel_bridge.prometheus.client import PrometheusClient
from otel_bridge.prometheus_names import stored_name
from otel_bridge.window import MetricKind, StepWindow

_QUERY_PARAMETER = 'invalid parameter "query": '


def check_names(queries: Sequence[MetricQuery], store: Store) -> None:
    """A :class:`ConfigError` naming the first ``otlp:`` entry whose series have a UTF-8 name (its
    ``translation_strategy`` keeps dots) when ``store`` has no UTF-8 names (Prometheus 2): nothing can have stored such
    a series there, and a selector for one does not even parse, so reading on would only ever report it missing."""
    if store.utf8_names:
        return
    for query in queries:
        if query.utf8_names:
            entry = f"{query.entry}.otlp"
            raise ConfigError(
                f"{entry} reads {query.utf8_names[0]}, a UTF-8 metric name (its translation_strategy keeps dots), "
                f"but {store.name} has no UTF-8 metric names: set {entry}.translation_strategy to "
                "UnderscoreEscapingWithSuffixes (or UnderscoreEscapingWithoutSuffixes) together with the writer's "
                "(the collector exporter's translation_strategy, or Prometheus' `otlp: translation_strategy`), or "
                "point prometheus.url at Prometheus 3"
            )


def resolve_kind(query: MetricQuery, metadata: dict[str, list[dict[str, str]]]) -> MetricQuery:
    """``query`` with its type from Prometheus' metadata; a :class:`ConfigError` saying why when it cannot be known.

    A name without metadata is usually misspelt (the closest known name is suggested); series that reach Prometheus
    without metadata (remote write) need ``type`` in the config.
    """
    if not query.needs_kind:
        return query
    assert query.name is not None
    entries = None
    for form in query.candidate_forms:  # a family the store holds under another form has its metadata there
        base = stored_name(query.name, form)
        entries = metadata.get(base) or (metadata.get(base[: -len("_total")]) if base.endswith("_total") else None)
        if entries:
            break
    kinds = {e.get("type") for e in entries or []}
    kind = next(iter(kinds)) if len(kinds) == 1 else None
    if kind in ("counter", "gauge", "histogram"):
        resolved: MetricKind = kind  # type: ignore[assignment]
        return query.with_kind(resolved)
    entry = f"{query.entry} {query.name}"
    if kinds:
        raise ConfigError(
            f"{entry}: type unknown (Prometheus reports {sorted(k or '?' for k in kinds)}); "
            "set type: counter, gauge or histogram"
        )
    close = difflib.get_close_matches(query.name, list(metadata), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise ConfigError(
        f"{entry}: Prometheus does not know this metric{hint}; fix the name, or, if its series reach Prometheus "
        "without metadata (remote write), set type: counter, gauge or histogram"
    )


def check_expressions(
    client: PrometheusClient,
    queries: Sequence[MetricQuery],
    window: StepWindow,
    increase_queries: Sequence[int],
    *,
    pad_s: float,
    counters: CounterParts,
    store: Store | None = None,
) -> None:
    """Evaluate one window's union once (in the parts ``store`` takes, see :meth:`WindowPlan.expressions`; the counting
    queries' parts written by ``counters``, as the window source will); when
    Prometheus rejects it as ``bad_data``, each query alone, to name the one it rejects (a :class:`ConfigError`). Any
    other API error (401, ``execution``, ``unavailable``...) is raised as it is: a server problem, which
    ``startup: degrade`` rides out. A part longer than the store takes in one query, in this window or in the run's
    last one (whose parts are longer: it is closed by the samples after its end), is a
    :class:`~otel_bridge.errors.QueryTooLongError`."""
    limit = (store.max_query_bytes, store.max_query_setting) if store is not None else (None,)
    plan = WindowPlan(queries, window, increase_queries=increase_queries, pad_s=pad_s, closing_s=0.0, counters=counters)
    expressions = plan.expressions(*limit)
    if not expressions:
        return
    last = dataclasses.replace(window, final=True)
    WindowPlan(
        queries,
        last,
        increase_queries=increase_queries,
        pad_s=pad_s,
        closing_s=pad_s,
        report_unread=True,
        counters=counters,
    ).expressions(*limit)
    try:
        for expression in expressions:
            client.query(expression, time=window.end, native_histograms=True)
    except PrometheusAPIError as exc:
        if not _rejected(exc):  # a 401, an overloaded or failing server: not the config's fault
            raise
        for query in queries:
            if query.promql is not None:  # as written, so Prometheus' line:column points into it
                parts = [query.promql.replace(WINDOW_PLACEHOLDER, f"{promql.duration(pad_s):<7}")]
            else:
                parts = WindowPlan(
                    [query],
                    window,
                    increase_queries=[0] if counting(query) else [],
                    pad_s=pad_s,
                    closing_s=0.0,
                    counters=counters,
                ).expressions(*limit)
            try:
                for part in parts:
                    client.query(part, time=window.end, native_histograms=True)
            except PrometheusAPIError as own:
                if not _rejected(own):
                    raise
                raise ConfigError(_rejection(query, own)) from None
        raise ConfigError(
            f"Prometheus rejects the configured metrics together ({_api_error(exc)}); check the promql/name/labels "
            "entries under metrics"
        ) from None


def _rejected(exc: PrometheusAPIError) -> bool:
    """Whether the store rejects the query itself: Prometheus says ``bad_data``, VictoriaMetrics answers 400 with
    ``"errorType": "400"`` (queries longer than its limit are never sent: :meth:`WindowPlan.expressions`)."""
    return exc.error_type in ("bad_data", "400")


def _api_error(exc: PrometheusAPIError) -> str:
    return f"{exc.error_type}: {(exc.error or '').removeprefix(_QUERY_PARAMETER)}"


def _rejection(query: MetricQuery, exc: PrometheusAPIError) -> str:
    """What to say about a query Prometheus rejects on its own: which entry, and Prometheus' words about it."""
    if query.source_index < 0:  # not from a config (otel-bridge query EXPR)
        return f"Prometheus rejects the expression ({_api_error(exc)})"
    entry = f"metrics[{query.source_index}] ({query.key_name})"
    if query.promql is not None:
        return (
            f"{entry}: Prometheus rejects its promql ({_api_error(exc)}; line:column count from the start of the "
            f"expression as written, {WINDOW_PLACEHOLDER} included); fix the expression"
        )
    return f"{entry}: Prometheus rejects the query built from it ({_api_error(exc)}); check its name and labels"
