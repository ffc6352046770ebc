"""The PromQL wing's start-up: what the store and the setup allow (:func:`negotiate`), and the one window source
chosen from it (:func:`choose_source`).

:func:`negotiate` detects the store, checks the configured names and each window's query against it, resolves
metric types and how each histogram is stored (:mod:`.histogram_storage`), and finds the targets serving the counting
queries and their schedule: a frozen
:class:`~.setup.Setup`. :func:`choose_source` then picks how windows are read, once:

1. the bridge's boundary scrapes (:mod:`.sources.boundary_scrapes`), when ``prometheus.boundary`` asks for them
   (``scrape``, or ``auto``: with at most ``boundary_max_targets`` targets when the trainer reads them, any number
   when node agents do, ``scrape.readers``) and the bridge can scrape the targets;
2. otherwise otel-bridge's recording rules (:mod:`.sources.recording_rules`), when Prometheus runs them for some
   counting query (``prometheus.recording_rules``);
3. otherwise the store's exact increase (:mod:`.sources.exact_increase`), where the store has one;
4. otherwise Prometheus' samples around each boundary (:mod:`.sources.samples`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from otel_bridge.config import BoundaryMode, Readers, RulesMode
from otel_bridge.errors import ConfigError, DiscoveryError, PrometheusError, ScrapeError
from otel_bridge.health import Health
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.promql._internal.checks import check_expressions, check_names, resolve_kind
from otel_bridge.producers.promql._internal.histogram_storage import with_histogram_storage
from otel_bridge.producers.promql._internal.plan import primary_names
from otel_bridge.producers.promql._internal.rules import RuleSet, read_as_ruled, rules_in_use
from otel_bridge.producers.promql._internal.rules import counting as counts
from otel_bridge.producers.promql._internal.setup import Setup
from otel_bridge.producers.promql._internal.sources.boundary_scrapes import BoundaryScrapesSource
from otel_bridge.producers.promql._internal.sources.exact_increase import ExactIncreaseSource, counters_for
from otel_bridge.producers.promql._internal.sources.recording_rules import RecordingRulesSource
from otel_bridge.producers.promql._internal.sources.samples import SamplesSource
from otel_bridge.producers.promql._internal.store import Store, detect_store
from otel_bridge.producers.promql._internal.store_clock import REMEASURE_S, StoreClock
from otel_bridge.producers.promql._internal.store_reader import StoreReader
from otel_bridge.producers.promql._internal.stored_names import find_forms
from otel_bridge.producers.promql._internal.targets import (
    ServingTargets,
    schedule_of,
    scrape_urls,
    served_names,
    serving_targets,
)
from otel_bridge.producers.scrape import Scraper, WatchedScraper
from otel_bridge.producers.window_report import WindowReporter
from otel_bridge.producers.window_source import WindowSource
from otel_bridge.prometheus.client import PrometheusClient
from otel_bridge.ratelimit import RateLimitedLogger
from otel_bridge.window import StepWindow

__all__ = ["BoundaryScraper", "Chosen", "Negotiated", "Options", "choose_source", "negotiate"]

_log = logging.getLogger(__name__)

BoundaryScraper = Callable[[Sequence[str], Sequence[MetricQuery]], Scraper]
"""Builds the scrape producer for boundary scrapes from target URLs and the queries it reads."""


@dataclass(frozen=True, slots=True)
class Options:
    """What the ``prometheus`` section (and the bridge) allow the choice of a window source. ``boundary_readers``:
    who takes the boundary readings the ``boundary_scraper`` builds (``scrape.readers`` resolved): the trainer's
    process, within ``boundary_max_targets``, or node agents, without that limit."""

    boundary: BoundaryMode = "samples"
    boundary_max_targets: int = 64
    boundary_scraper: BoundaryScraper | None = None
    recording_rules: RulesMode = "auto"
    refresh_interval_s: float = 30.0
    boundary_readers: Readers = "trainer"


@dataclass(frozen=True, slots=True)
class Negotiated:
    """What :func:`negotiate` found: the setup, and the serving targets (kept current from here on)."""

    setup: Setup
    serving: ServingTargets


@dataclass(frozen=True, slots=True)
class Chosen:
    """The window source, and how its windows are bounded (``scrape`` or ``samples``) with which rules."""

    source: WindowSource
    boundary: BoundaryMode
    rules: RuleSet | None


def negotiate(
    client: PrometheusClient,
    queries: Sequence[MetricQuery],
    *,
    store: Store | None,
    interval_s: float,
    max_clock_offset_s: float = 1.0,
) -> Negotiated:
    """Check the store and every query once, resolve metric types, and find the serving targets and their schedule.

    A rejected query raises :class:`ConfigError`; an unreachable or broken store its
    :class:`~otel_bridge.errors.PrometheusError`. ``store``: given (to measure one plan against another on the same
    store), else detected. The store's clock is measured (:class:`StoreClock`; ``max_clock_offset_s``:
    ``prometheus.max_clock_offset_s``).
    """
    store = store if store is not None else detect_store(client)

    check_names(queries, store)
    resolved = list(queries)
    if any(q.needs_kind for q in resolved):
        metadata = client.metadata()
        resolved = [resolve_kind(q, metadata) for q in resolved]
    pad_s = 2.0 * interval_s
    now = time.time()  # a check needs no exact time: the store's clock is measured once the queries are known good
    counting = [i for i, q in enumerate(resolved) if counts(q)]
    check_expressions(
        client,
        resolved,
        StepWindow(step=-1, start=now - pad_s, end=now),
        counting,
        pad_s=pad_s,
        counters=counters_for(store),
        store=store,
    )
    # After the checks: what the store rejects is the config's, by entry.
    resolved = find_forms(client, resolved, max_query_bytes=store.max_query_bytes)
    # Under the forms found: a histogram escaped to vllm_x may be stored natively as vllm_x.
    resolved = with_histogram_storage(client, resolved, max_query_bytes=store.max_query_bytes)
    clock = StoreClock(client, max_offset_s=max_clock_offset_s, unreadable=store.clock)
    if store.clock is not None:
        _log.info(
            "%s: its clock is not measured (%s): the windows are asked at this process' times, and records carry no "
            "otel_bridge/clock_offset_s",
            store.name,
            store.clock,
        )
    try:
        clock.measure()
    except PrometheusError as exc:  # a store that cannot evaluate time(): its windows go uncorrected, said so
        _log.warning(
            "%s; the windows are asked at this process' times, uncorrected for any clock offset, and records carry "
            "no otel_bridge/clock_offset_s until a later measurement succeeds (every %gs)",
            exc,
            REMEASURE_S,
        )
    primary = sorted({s for i in counting for n in primary_names(resolved[i]) for s in resolved[i].stored(n)})
    gauges = sorted({s for q in resolved if q.kind == "gauge" and q.name and q.ratio is None for s in q.stored(q.name)})
    # The scrape interval matters to gauges too (a short step may hold no sample of them).
    found = serving_targets(client, primary, *([[*primary, *gauges]] if gauges else []))
    setup = Setup(store, tuple(resolved), schedule_of(found[-1], interval_s), clock)
    return Negotiated(setup, ServingTargets(client, primary, found[0]))


def choose_source(
    client: PrometheusClient,
    negotiated: Negotiated,
    options: Options,
    *,
    health: Health,
    warn: RateLimitedLogger,
    reporter: WindowReporter,
    closed: threading.Event,
) -> Chosen:
    """The one window source the setup allows (see the module docstring); the serving targets are kept current from
    here on (by the boundary scrapes' watcher, or their own). ``prometheus.boundary: scrape`` that cannot be had is a
    :class:`ScrapeError`; ``prometheus.recording_rules: required`` without them a :class:`ConfigError`."""
    setup, serving = negotiated.setup, negotiated.serving

    def reader(*, scrapes_name_members: bool = False, read: Setup = setup) -> StoreReader:
        return StoreReader(
            client,
            read,
            serving,
            health=health,
            warn=warn,
            reporter=reporter,
            closed=closed,
            scrapes_name_members=scrapes_name_members,
        )

    def without_rules(store_reader: StoreReader, counting: Sequence[int]) -> SamplesSource | ExactIncreaseSource:
        store = setup.store
        if store.increase is None:
            return SamplesSource(store_reader, counting)
        return ExactIncreaseSource(store_reader, counting, store.exact_increase, health=health)

    scraped = _boundary_scrapes(client, setup, serving, options)
    if scraped is not None:
        watched, indices = scraped
        rest = [i for i in setup.counting if i not in indices]
        source = BoundaryScrapesSource(
            watched, setup.queries, indices, without_rules(reader(scrapes_name_members=True), rest)
        )
        return Chosen(source, "scrape", None)
    serving.watch(options.refresh_interval_s)  # the members whose unread readings records name, kept current
    rules = _rules(client, setup, options.recording_rules)
    if rules is not None:
        store_reader = reader(read=replace(setup, queries=read_as_ruled(setup.queries, rules)))
        rules_source = RecordingRulesSource(store_reader, setup.counting, rules, counters_for(setup.store))
        return Chosen(rules_source, "samples", rules)
    return Chosen(without_rules(reader(), setup.counting), "samples", None)


def _boundary_scrapes(
    client: PrometheusClient, setup: Setup, serving: ServingTargets, options: Options
) -> tuple[WatchedScraper, list[int]] | None:
    """The started boundary scrapes and the counting queries they read, when ``prometheus.boundary`` asks for them
    and they can be had (``auto``: logged why not)."""
    counting = setup.counting
    new_scraper = options.boundary_scraper
    if options.boundary == "samples" or new_scraper is None or not counting:
        return None
    targets = serving.initial
    urls = sorted({str(t.get("scrapeUrl")) for t in targets if t.get("scrapeUrl")})
    reason = None
    limited = options.boundary == "auto" and options.boundary_readers == "trainer"  # node agents have no limit
    if not urls:
        reason = "Prometheus lists no target serving the configured counters and histograms yet"
    elif limited and len(urls) > options.boundary_max_targets:
        reason = (
            f"{len(urls)} targets are more than prometheus.boundary_max_targets ({options.boundary_max_targets}) for "
            "the trainer to read (node agents read any number on a Ray cluster: scrape.readers)"
        )
    scraped: list[int] = []
    if reason is None:  # only series from the targets can be scraped: remote-written ones are read as samples
        served = served_names(client, setup.primary_names, targets)
        scraped = [
            i
            for i in counting
            if served & {s for n in primary_names(setup.queries[i]) for s in setup.queries[i].stored(n)}
        ]
        if not scraped:
            reason = "no target Prometheus scrapes serves the configured counters and histograms"
    if reason is None:
        watched = WatchedScraper(
            new_scraper(urls, [setup.queries[i] for i in scraped]),
            serving.urls,
            interval_s=options.refresh_interval_s,
            name="Prometheus targets",
            initial=serving.initial_urls(),
            normalize=scrape_urls,
        )
        try:
            watched.start()
        except (ScrapeError, DiscoveryError, ConfigError) as exc:
            watched.close()
            reason = str(exc)
        else:
            silent = watched.unanswered()
            if not silent:
                return watched, scraped
            watched.close()
            reason = f"the bridge cannot scrape {', '.join(silent)} itself"
    if options.boundary == "scrape":
        raise ScrapeError(
            f"prometheus.boundary: scrape, but {reason}; set prometheus.boundary: samples (windows bounded by "
            "Prometheus' own samples, off by up to one scrape interval) or make the targets reachable"
        )
    _log.info("boundaries observed by Prometheus' samples (prometheus.boundary: auto): %s", reason)
    return None


def _rules(client: PrometheusClient, setup: Setup, mode: RulesMode) -> RuleSet | None:
    """otel-bridge's recording rules Prometheus runs, when they serve any counting query."""
    if mode == "off" or not setup.counting:
        return None
    store = setup.store
    if store.rules is not None:
        if mode == "required":
            raise ConfigError(
                f"prometheus.recording_rules: required, but {store.rules}; "
                "set prometheus.recording_rules: off (or auto)"
            )
        _log.info("otel-bridge's recording rules are not used: %s", store.rules)
        return None
    return rules_in_use(client.rule_groups(), setup.queries, required=mode == "required")
