"""``otel-bridge query``: one metric name or PromQL expression, as the bridge would record it for one window.

The window is ``(at - window, at]``. A configured metric (by key or name) keeps its configured type, statistics and
labels; another metric name is read with ``--type`` (or Prometheus' metadata) and ``--stats``/``--by``; anything else
is a raw PromQL expression evaluated as is at ``at`` (``$window`` stands for the window's length).
"""

from __future__ import annotations

import argparse
import difflib
import re
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, TextIO

from opentelemetry.sdk.metrics.export import Metric

from otel_bridge.cli.config_file import CONFIG_HELP, load_chosen_config
from otel_bridge.cli.inputs import check_url, printable
from otel_bridge.cli.output import format_rows, format_value
from otel_bridge.config import BridgeConfig
from otel_bridge.errors import ConfigError
from otel_bridge.exporters.naming import infra_key
from otel_bridge.producers.base import metrics_of
from otel_bridge.producers.metric_set import MetricQuery, resolve_metrics
from otel_bridge.producers.promql import connect
from otel_bridge.prometheus.client import PrometheusClient
from otel_bridge.prometheus_names import METRIC_NAME
from otel_bridge.schema import STAT_ATTRIBUTE
from otel_bridge.window import StepWindow

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
MAX_DURATION_S: Final = 366 * 86400.0
"""The longest duration a command takes (``--window``, ``--interval``, ``--at -D``): a year."""
LAST_TIME_S: Final = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()
"""The latest time ``--at`` takes (the last second a timestamp can show)."""


def add_parser(commands: Any) -> None:
    """Register ``query`` on the sub-command parsers ``commands``."""
    query = commands.add_parser(
        "query",
        help="evaluate a metric or PromQL expression over one window, as the bridge records it",
        description="Evaluate EXPR with the window statistics of the window (AT - WINDOW, AT] through Prometheus "
        "and print a table. EXPR is a configured metric (its key or name), another metric name, or a raw PromQL "
        "expression (evaluated as is at AT; $window stands for the window's length).",
    )
    query.add_argument("expr", metavar="EXPR", help="metric name, configured key, or PromQL expression")
    query.add_argument("--config", type=Path, help=CONFIG_HELP)
    query.add_argument("--prometheus-url", help="Prometheus base URL (default: prometheus.url of the config)")
    query.add_argument("--window", default="30s", help="window length: 30s, 500ms, 5m, 1h (default 30s)")
    query.add_argument("--at", default="now", help="window end: now, unix seconds, ISO 8601, or -5m (default now)")
    query.add_argument("--type", choices=("counter", "gauge", "histogram"), help="metric type (default: metadata)")
    query.add_argument("--stats", nargs="+", metavar="STAT", help="statistics, e.g. delta rate / max mean / p99")
    query.add_argument("--by", nargs="+", default=[], metavar="LABEL", help="keep these labels' values apart")
    query.set_defaults(run=run)


def parse_duration(text: str, option: str = "--window") -> float:
    """``30s`` / ``500ms`` / ``5m`` / ``1h`` / ``12.5`` (seconds) in seconds; :class:`ConfigError` otherwise."""
    match = _DURATION.match(text.strip())
    if match is None or float(match.group(1)) <= 0:
        raise ConfigError(
            f"{option} {printable(text)[:60]!r} is not a positive duration; use e.g. 30s, 500ms, 5m or 2.5"
        )
    seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if seconds > MAX_DURATION_S:
        raise ConfigError(f"{option} {text[:60]!r} is longer than a year; use at most {MAX_DURATION_S / 3600:g}h")
    return seconds


def parse_time(text: str, now: float | None = None) -> float:
    """``now``, ``-5m`` (relative to now), unix seconds, or ISO 8601 (naive means UTC) as unix seconds."""
    now = time.time() if now is None else now
    value = text.strip()
    if value == "now":
        return now
    if value.startswith("-"):
        return now - parse_duration(value[1:], "--at")
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if not 0 <= seconds <= LAST_TIME_S:  # also nan and inf
            raise ConfigError(
                f"--at {printable(text)[:60]!r} is not a time between 1970 and 9999 in unix seconds; use now, -5m, "
                "unix seconds or ISO 8601 (2026-01-31T12:00:00Z)"
            )
        return seconds
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(
            f"--at {printable(text)[:60]!r} is not a time; use now, -5m, unix seconds or ISO 8601 "
            "(2026-01-31T12:00:00Z)"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def command_client(config: BridgeConfig, url: str | None = None) -> PrometheusClient:
    """The Prometheus a command talks to: ``url`` (``--prometheus-url``; default: the config's ``prometheus.url``,
    discovered when ``auto``), with the config's auth and TLS."""
    if url is not None:
        check_url(url, "--prometheus-url")
    if url is None and config.prometheus.url is None:
        raise ConfigError(
            "no Prometheus to ask: pass --prometheus-url URL, set prometheus.url in the config, or set "
            "OTEL_BRIDGE_PROMETHEUS_URL"
        )
    return connect(config.prometheus, url)


def build_query(expr: str, config: BridgeConfig, args: argparse.Namespace) -> MetricQuery:
    """The query for ``expr``: a configured metric, a metric name with the options, or a raw PromQL expression."""
    stats = tuple(args.stats or ())
    by = tuple(args.by or ())
    for configured in resolve_metrics(config.metrics):
        if expr in (configured.key_name, configured.name):
            query = replace(configured, by=by or configured.by, source_index=0)
            if args.type is not None:
                query = replace(query, kind=args.type, stats=())
            if stats or args.type is not None:
                query = replace(query, stats=stats)
            return query.with_kind(query.kind) if query.kind is not None else query
    if METRIC_NAME.fullmatch(expr):
        query = MetricQuery(key_name=expr, name=expr, stats=stats, by=by, source_index=-1)
        return query.with_kind(args.type) if args.type is not None else query
    if stats or by or args.type is not None:
        raise ConfigError(
            "--type, --stats and --by apply to metric names; a PromQL expression is evaluated as is "
            "(drop them or write the aggregation into the expression)"
        )
    return MetricQuery(key_name="value", promql=expr, source_index=-1)  # -1: not a configured entry


def metric_rows(metrics: list[Metric], prefix: str | None = "rollout") -> list[list[str]]:
    """Table rows ``[key, stat, labels, value]`` of the producer's metrics.

    ``key`` is the key the bridge records the value under (``rollout/vllm/generation_tokens_total/delta``, with
    ``naming.infra_prefix`` as ``prefix``); ``prefix=None`` keeps the metric's own name (a raw PromQL expression has no
    key in a run).
    """
    rows = []
    for metric in metrics:
        for point in getattr(metric.data, "data_points", ()):
            attributes = {str(k): str(v) for k, v in (point.attributes or {}).items()}
            stat = attributes.pop(STAT_ATTRIBUTE, "")
            labels = ",".join(f"{k}={v}" for k, v in sorted(attributes.items()))
            key = metric.name if prefix is None else infra_key(metric.name, stat or None, attributes, prefix=prefix)
            rows.append([printable(key), stat or "-", printable(labels) or "-", format_value(float(point.value))])
    return rows


def unknown_name(client: PrometheusClient, query: MetricQuery) -> str | None:
    """Why a metric name of unknown type matches nothing: it does not exist in Prometheus (with the closest existing
    name); ``None`` when Prometheus knows it, or when the query is not such a name."""
    if query.promql is not None or query.name is None or query.kind is not None:
        return None
    known = client.metadata()
    base = re.sub(r"_(count|sum|bucket)$", "", query.name)
    if query.name in known or base in known:
        return None
    close = difflib.get_close_matches(query.name, list(known), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else "; check the name (otel-bridge doctor lists what exists)"
    return f"{query.name} does not exist in Prometheus (no metadata for it){hint}"


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Evaluate the query over the window and print a table; exit status 1 when nothing matched."""
    from otel_bridge.producers.promql import PromQLProducer

    window_s = parse_duration(args.window)
    at = parse_time(args.at)
    if at - window_s < 0:
        raise ConfigError(f"--window {args.window} reaches back before 1970 from --at {args.at}; shorten --window")
    config = load_chosen_config(args)
    query = build_query(args.expr, config, args)
    client = command_client(config, args.prometheus_url)
    span = f"over ({_iso(at - window_s)}, {_iso(at)}] = {format_value(window_s)}s, from {client.url}"
    missing = unknown_name(client, query)
    if missing is not None:
        client.close()
        out.write(f"{query.name} {span}\n\nno series matched: {printable(missing)}\n")
        return 1
    producer = PromQLProducer(client, [query], scrape_interval_s=config.prometheus.scrape_interval_s)
    try:
        producer.start()
        window = StepWindow(step=0, start=at - window_s, end=at)
        prefix = None if query.promql is not None else config.naming.infra_prefix
        rows = metric_rows(metrics_of(producer.produce(window=window)), prefix)
        resolved = producer.queries[0]
    finally:
        producer.close()
    what = f"PromQL {printable(args.expr)}" if resolved.promql is not None else f"{resolved.name} ({resolved.kind})"
    out.write(f"{what} {span}\n\n")
    if not rows:
        out.write("no series matched in this window: check the name and labels (otel-bridge doctor lists them)\n")
        return 1
    out.write(format_rows(["key", "stat", "labels", "value"], rows, right=(3,)) + "\n")
    return 0
