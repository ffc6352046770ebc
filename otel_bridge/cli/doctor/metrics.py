"""``otel-bridge doctor`` checks of the configured metrics: each returns series now (through Prometheus or the
rollout endpoints), a run reads it, and none uses a name vLLM removed.

"A run reads it" is checked the way a run reads it: the producer is built by
:func:`otel_bridge.pipeline.build.build_producers` from the same config, started (the start-up check: metadata for
entries without ``type``, the one query of every expression, targets, boundaries, recording rules) and asked for one
step's window between two boundaries, so the queries are the run's own; doctor cannot pass where a run fails to start or
records nothing for a metric.
"""

from __future__ import annotations

import difflib
import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from opentelemetry.sdk.metrics.export import Metric

from otel_bridge.cli.doctor.context import DoctorContext
from otel_bridge.config import AUTO, BridgeConfig, MetricConfig
from otel_bridge.errors import ConfigError, DiscoveryError, OtelBridgeError, PrometheusError, ScrapeError
from otel_bridge.producers import MetricQuery
from otel_bridge.producers.promql import check_names, find_forms
from otel_bridge.prometheus import ExpositionFamily, PrometheusClient

_STEP_MAX_S = 30.0  # the longest step doctor reads (Prometheus' scrape interval, when shorter)


@dataclass
class StepReading:
    """What one step read as a run reads it recorded: per configured metric (its key name), the record keys."""

    seconds: float
    keys: dict[str, list[str]] = field(default_factory=dict)


class _Collected(logging.Handler):
    """Keeps the distinct messages of the WARNINGs and ERRORs it is handed."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message not in self.messages:
            self.messages.append(message)


@contextmanager
def _producer_warnings() -> Iterator[list[str]]:
    """The producers' WARNINGs (why a scrape failed, a missing metric...), collected for doctor's checks instead of
    printed (printed too with --verbose)."""
    from otel_bridge import producers

    logger = logging.getLogger(producers.__name__)
    collected = _Collected()
    propagate = logger.propagate
    logger.propagate = logger.getEffectiveLevel() <= logging.DEBUG
    logger.addHandler(collected)
    try:
        yield collected.messages
    finally:
        logger.removeHandler(collected)
        logger.propagate = propagate


def check_endpoints(context: DoctorContext, config: BridgeConfig) -> dict[str, dict[str, ExpositionFamily]]:
    """``endpoint <url>``: every rollout endpoint answers; returns each one's parsed families."""
    from otel_bridge.discovery import ray_service_discovery_targets
    from otel_bridge.producers.scrape import ENDPOINT_DEFAULTS, MetricsEndpoint
    from otel_bridge.prometheus import parse_exposition

    targets = config.scrape_targets
    if config.scrape.targets == AUTO:
        try:
            found = ray_service_discovery_targets(
                config.scrape.ray_service_discovery_file, temp_dir=config.scrape.ray_temp_dir
            )
        except DiscoveryError as exc:
            context.add("endpoints", "fail", f"scrape.targets: auto: {exc}", "set scrape.targets explicitly")
            return {}
        targets = [f"http://{t}/metrics" if "://" not in t else t for t in found]
    if not targets:
        context.add("endpoints", "fail", "no scrape targets", "list the rollout servers under scrape.targets")
        return {}
    families: dict[str, dict[str, ExpositionFamily]] = {}
    for url in targets:
        endpoint = MetricsEndpoint(url, replace(ENDPOINT_DEFAULTS, timeout_s=config.scrape.timeout_s))
        try:
            families[url] = parse_exposition(endpoint.fetch())
        except (ScrapeError, OtelBridgeError) as exc:
            context.add(f"endpoint {url}", "fail", str(exc), f"start the server at {url} or fix scrape.targets")
            continue
        finally:
            endpoint.close()
        context.add(f"endpoint {url}", "pass", f"{len(families[url])} metric families")
    return families


def check_metrics(
    context: DoctorContext,
    config: BridgeConfig,
    client: PrometheusClient | None,
    families: dict[str, dict[str, ExpositionFamily]],
) -> None:
    """``metric <key>``: every configured metric has series now (Prometheus or the endpoints' expositions)."""
    if not context.queries:
        context.add("metrics", "skip", "no metrics configured")
        return
    if context.default_preset is not None:
        context.add(
            "metrics",
            "warn",
            f"no metrics configured: a run records no infrastructure metrics; checking the {context.default_preset} "
            "preset's metrics instead",
            f"list the metrics to record, e.g. `metrics: [{{preset: {context.default_preset}}}]`",
        )
    queries = context.queries
    if client is None and not families:
        context.add("metrics", "skip", "no source answered (see the checks above)")
        return
    step = read_one_step(context, config, client.url if client is not None else None)
    if client is not None:
        _metrics_from_prometheus(context, config, client, queries, step)
    else:
        _metrics_from_endpoints(context, queries, families, step)


def read_one_step(context: DoctorContext, config: BridgeConfig, url: str | None) -> StepReading | None:
    """``step``: build and start the producer as a run does, and read one step's window between two
    boundaries; ``None`` (a failed check) when a run would not start or its first step fails."""
    from otel_bridge.errors import ConfigError
    from otel_bridge.health import Health
    from otel_bridge.pipeline import build_producers
    from otel_bridge.producers import MetricProducer, ProducerLifecycle, metrics_of
    from otel_bridge.window import StepWindow

    update: dict[str, object] = {"startup": "strict"}  # degrade would hide at start what fails at every step
    if context.default_preset is not None:
        update["metrics"] = [MetricConfig(preset=context.default_preset)]
    if url is not None:
        update["prometheus"] = config.prometheus.model_copy(update={"url": url})
    run_config = config.model_copy(update=update)
    interval = context.scrape_interval_s or config.prometheus.scrape_interval_s  # so a gauge has a sample in the step
    seconds = 1.0 if url is None else min(_STEP_MAX_S, max(1.0, interval))
    built: list[MetricProducer] = []
    with _producer_warnings() as warnings:
        try:
            built = build_producers(run_config, Health())
            lifecycles = [p for p in built if isinstance(p, ProducerLifecycle)]
            for producer in lifecycles:
                producer.start()
            _settle_boundaries(context, built)
            start = time.time()
            for producer in lifecycles:
                producer.on_boundary(start)
            time.sleep(seconds)
            end = time.time()
            for producer in lifecycles:
                producer.on_boundary(end)
            window = StepWindow(step=0, start=start, end=end)
            metrics = [m for producer in built for m in metrics_of(producer.produce(window=window))]
        except ConfigError as exc:
            context.add("step", "fail", f"a run would not start: {exc}", "fix the config as the message says")
            return None
        except OtelBridgeError as exc:
            logged = f" (logged: {'; '.join(warnings[:3])})" if warnings else ""
            context.add(
                "step",
                "fail",
                f"a run would not start or read its first step: {exc}{logged}",
                "see the checks above (prometheus, endpoints) and the message",
            )
            return None
        finally:
            for made in built:
                if isinstance(made, ProducerLifecycle):
                    made.close()
    reading = StepReading(seconds)
    for metric in metrics:
        reading.keys.setdefault(metric.name, []).extend(_record_keys(metric, config.naming.infra_prefix))
    read = sum(1 for q in context.queries if reading.keys.get(q.key_name))
    idle = sum(1 for q in context.queries if not reading.keys.get(q.key_name) and needs_observations(q))
    context.add(
        "step",
        "pass" if read + idle == len(context.queries) else "fail",
        f"one {seconds:.3g}s step read as a run reads it: {read}/{len(context.queries)} configured metrics recorded"
        + (f", {idle} without a value in a step without observations (no traffic)" if idle else ""),
        None if read + idle == len(context.queries) else "see the metric checks below",
    )
    return reading


def _settle_boundaries(context: DoctorContext, producers: Sequence[object]) -> None:
    """The ``step boundaries`` warning under ``prometheus.boundary: auto`` passes when the run's producer, started,
    observes the boundaries by its own scrapes of the targets (their counters are then exact)."""
    from otel_bridge.producers.promql import PromQLProcess, PromQLProducer

    if context.boundary_detail is None:
        return
    if any(isinstance(p, (PromQLProducer, PromQLProcess)) and p.boundary == "scrape" for p in producers):
        context.settle(
            "step boundaries",
            "pass",
            context.boundary_detail
            + "; boundaries observed by the bridge's own boundary scrapes (prometheus.boundary: auto: the step check "
            "reached every target serving the metrics)",
        )


def _metrics_from_prometheus(
    context: DoctorContext,
    config: BridgeConfig,
    client: PrometheusClient,
    queries: Sequence[MetricQuery],
    step: StepReading | None,
) -> None:
    from otel_bridge.prometheus import promql

    try:
        known = sorted(client.metadata())
    except PrometheusError as exc:
        context.add("metrics", "fail", f"cannot read Prometheus' metadata: {exc}", "see the prometheus check")
        return
    lookback = promql.duration(2 * config.prometheus.scrape_interval_s)
    try:
        limit = context.store.max_query_bytes if context.store is not None else None
        stored_queries = find_forms(client, queries, max_query_bytes=limit)
    except PrometheusError as exc:
        context.add("metrics", "fail", f"cannot ask Prometheus which names it holds: {exc}", "see the prometheus check")
        return
    for query in stored_queries:
        name = f"metric {query.key_name}"
        if context.store is not None:
            try:
                check_names([query], context.store)
            except ConfigError as exc:
                context.add(name, "fail", str(exc), f"see metrics[{query.source_index}].otlp.translation_strategy")
                continue
        try:
            if query.promql is not None:
                expr = query.promql.replace("$window", lookback)
                result = client.query(expr)
                found = [dict(s.labels) for s in result.series]
                _series_check(context, name, found, query.promql, known, _recorded(step, query))
                continue
            missing: list[str] = []
            labels: list[dict[str, str]] = []
            for served in _sample_names(query):
                alternatives = tuple(stored for n in served for stored in query.stored(n))
                selector = _selector(alternatives, dict(query.matchers), utf8=query.utf8)
                result = client.query(f"last_over_time({selector}[{lookback}])")
                if not result.series:
                    others = [n for n in alternatives if n not in served]
                    missing.append(" or ".join(served) + (f" (nor {', '.join(others)})" if others else ""))
                labels.extend(dict(s.labels) for s in result.series)
        except PrometheusError as exc:
            context.add(name, "fail", str(exc), "fix the expression or check Prometheus")
            continue
        if missing:
            _series_check(context, name, [], " and ".join(missing), known)
        else:
            _series_check(context, name, labels, query.name or "", known, _recorded(step, query), stored=_stored(query))


def _stored(query: MetricQuery) -> str | None:
    """What the check says of the names the store holds the family under, when not (only) as configured."""
    if query.forms == ("served",):
        return None
    names = query.ratio if query.ratio is not None else (query.name or "",)
    stored = " and ".join(n for name in names for n in query.stored(name))
    return f"stored as {stored}" if len(query.forms) == 1 else f"stored under {len(query.forms)} names: {stored}"


def _sample_names(query: MetricQuery) -> list[tuple[str, ...]]:
    """Per sample name the query needs, the names that prove it exists (a histogram by its ``_count``)."""
    if query.ratio is not None:
        return [(n,) for n in query.ratio]
    assert query.name is not None
    if query.kind == "histogram":
        return [(f"{query.name}_count",)]
    if query.kind is None:
        return [(query.name, f"{query.name}_count")]
    return [(query.name,)]


def _series_check(
    context: DoctorContext,
    name: str,
    labels: list[dict[str, str]],
    what: str,
    known: Iterable[str],
    recorded: tuple[float, list[str], bool] | None = None,
    found: str | None = None,
    stored: str | None = None,
) -> None:
    """Pass when the metric has series (``found`` says where, default: how many and from which instances; ``stored``
    under which names, when not as configured) and (``recorded``: the step read as a run reads it) a step recorded
    it."""
    if labels:
        instances = sorted({series.get("instance", "") for series in labels} - {""})
        found = found or f"{len(labels)} series" + (f"; instance: {', '.join(instances)}" if instances else "")
        found += f"; {stored}" if stored else ""
        if recorded is None:
            context.add(name, "pass", found)
            return
        seconds, keys, idle = recorded
        if keys:
            more = f" (+{len(keys) - 1} more)" if len(keys) > 1 else ""
            context.add(name, "pass", f"{found}; a step records {keys[0]}{more}")
            return
        if idle:  # a histogram's mean/quantiles, a ratio: no value in a window without observations
            context.add(name, "pass", f"{found}; no observations in the {seconds:.3g}s step, so no value yet")
            return
        context.add(
            name,
            "fail",
            f"{found}, but a {seconds:.3g}s step read as a run reads it recorded nothing",
            "check the entry's type, stats and labels against the metric; `otel-bridge query NAME --config FILE` "
            "shows what a step reads",
        )
        return
    first = what.split(" and ")[0].split(" or ")[0].split(" (nor ")[0]
    for suffix in ("_count", "_bucket", "_sum"):
        first = first.removesuffix(suffix)
    close = difflib.get_close_matches(first, list(known), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}? " if close else ""
    context.add(
        name,
        "fail",
        f"no series for {what}",
        f"{hint}check the metric name and labels in the config, and that the server exporting it is scraped",
    )


def _metrics_from_endpoints(
    context: DoctorContext,
    queries: Sequence[MetricQuery],
    families: dict[str, dict[str, ExpositionFamily]],
    step: StepReading | None,
) -> None:
    known = sorted({name for found in families.values() for name in found})
    for query in queries:
        name = f"metric {query.key_name}"
        if query.promql is not None:
            context.add(name, "fail", "a PromQL metric on the scrape path", "set prometheus.url (source: promql)")
            continue
        wanted = query.ratio if query.ratio is not None else (query.name or "",)
        where = [
            url for url, found in families.items() if all(n in found and _matches(found[n], query) for n in wanted)
        ]
        if where:
            hosts = [u.split("//", 1)[-1].split("/", 1)[0] for u in where]
            found = f"{len(where)}/{len(families)} endpoints; instance: {', '.join(hosts)}"
            labels = [{"instance": host} for host in hosts]
            _series_check(context, name, labels, " and ".join(wanted), known, _recorded(step, query), found)
        else:
            _series_check(context, name, [], " and ".join(wanted), known)


def check_deprecated(context: DoctorContext, config: BridgeConfig) -> None:
    """``deprecated <name>``: vLLM names removed in vLLM 0.32, with the replacement."""
    from otel_bridge.producers import DEPRECATED, replacement_text

    used = [(i, m.name) for i, m in enumerate(config.metrics) if m.name is not None and m.name in DEPRECATED]
    if not used:
        context.add("deprecated names", "pass", "no deprecated vLLM metric names configured")
        return
    for index, old in used:
        context.add(
            f"deprecated {old}",
            "fail",
            f"metrics[{index}] uses {old}, removed in vLLM 0.32 (queried as its replacement for now)",
            f"replace it with {replacement_text(old)}",
        )


def _selector(names: Sequence[str], matchers: dict[str, str], *, utf8: bool = False) -> str:
    """``{__name__=~"a|b", label="value"}``: any of ``names`` with the equality ``matchers`` (``utf8``: the names may
    hold characters only Prometheus 3 takes, as an ``otlp:`` entry under a UTF-8 translation strategy has)."""
    from otel_bridge.prometheus import promql

    inner = [f"__name__=~{promql.regex_alternation(names, utf8=utf8)}"]
    inner += [f"{promql.validate_label_name(k)}={promql.quote_label_value(v)}" for k, v in sorted(matchers.items())]
    return "{" + ",".join(inner) + "}"


def _recorded(step: StepReading | None, query: MetricQuery) -> tuple[float, list[str], bool] | None:
    """The step's length, the record keys it had for ``query`` and whether ``query`` has no value in a step without
    observations (``None``: no step was read)."""
    if step is None:
        return None
    return step.seconds, sorted(step.keys.get(query.key_name, [])), needs_observations(query)


def needs_observations(query: MetricQuery) -> bool:
    """Whether ``query``'s statistics have no value in a window without observations: a ratio, or a histogram read
    only as means and quantiles (``count``/``sum`` are 0 then)."""
    if query.ratio is not None:
        return True
    return query.kind == "histogram" and not {"count", "sum"} & set(query.stats)


def _record_keys(metric: Metric, prefix: str) -> Iterator[str]:
    """The tracker keys a run records ``metric``'s points under (as the tracker exporter names them)."""
    from otel_bridge.exporters import infra_key
    from otel_bridge.schema import STAT_ATTRIBUTE

    for point in metric.data.data_points:
        attributes = {str(k): str(v) for k, v in (point.attributes or {}).items()}
        stat = attributes.pop(STAT_ATTRIBUTE, None)
        yield infra_key(metric.name, stat, attributes, prefix=prefix)


def _matches(family: ExpositionFamily, query: MetricQuery) -> bool:
    return any(query.matches(sample.labels) for sample in family.samples)
