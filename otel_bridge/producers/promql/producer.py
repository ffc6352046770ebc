"""PromQLProducer: window statistics from a Prometheus-compatible store's HTTP API, one window at a time.

The producer keeps the lifecycle: at :meth:`~PromQLProducer.start` it negotiates with the store once (which store,
the configured metrics checked and their types resolved, the targets serving them and their schedule) and chooses
the one window source the store and the setup allow (:mod:`otel_bridge.producers.promql._internal.negotiation`): the
bridge's own boundary scrapes, otel-bridge's recording rules, the store's exact increase, or Prometheus' samples
around each boundary. Each window is then read by that source, which owns its queries, its waits and its
reconciliation (docs/architecture.md, The PromQL wing); what it could not read is said through the window report.

Whichever source reads them, consecutive windows share their boundaries, so the deltas of contiguous steps add up to
the run's increase; a window is read only once every scrape that started before its end has been stored, and the
run's last window waits for what closes it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from opentelemetry.sdk.metrics.export import ScopeMetrics

from otel_bridge.config import BoundaryMode, Readers, RulesMode
from otel_bridge.errors import ConfigError, PrometheusError, SourceError
from otel_bridge.health import QUERY_ERRORS, QUERY_WARNINGS, Health
from otel_bridge.producers.base import infra_scope
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.promql._internal.negotiation import (
    BoundaryScraper,
    Chosen,
    Negotiated,
    Options,
    choose_source,
    negotiate,
)
from otel_bridge.producers.promql._internal.rules import RuleSet
from otel_bridge.producers.promql._internal.store import Store
from otel_bridge.producers.window_report import WindowReporter
from otel_bridge.producers.window_source import ReadBudget
from otel_bridge.prometheus.client import PrometheusClient
from otel_bridge.ratelimit import RateLimitedLogger
from otel_bridge.window import StepWindow

__all__ = ["BoundaryScraper", "PromQLProducer"]

_log = logging.getLogger(__name__)
_OBSERVERS: dict[Readers, str] = {
    "trainer": "the bridge's own boundary scrapes",
    "node_agents": "the node agents' boundary readings (one Ray actor per node)",
}


class PromQLProducer:
    """Reads the configured metrics from Prometheus for each step window (see the module docstring).

    ``boundary``, ``boundary_max_targets``, ``recording_rules``: the ``prometheus`` section's keys of those names;
    ``boundary_scraper`` builds the boundary scrapes (``boundary`` other than ``samples`` needs one), taken by
    ``boundary_readers`` (``scrape.readers`` resolved: ``boundary_max_targets`` limits the trainer only);
    ``refresh_interval_s`` how often the serving targets are re-read. ``store``: what ``client`` talks to; detected at
    :meth:`start` when ``None`` (given, e.g. to measure one plan against another on the same store).
    ``max_clock_offset_s``: ``prometheus.max_clock_offset_s`` (the store's clock is measured and each window asked at
    its times; beyond this a WARNING).
    """

    def __init__(
        self,
        client: PrometheusClient,
        queries: Sequence[MetricQuery],
        *,
        scrape_interval_s: float = 15.0,
        boundary: BoundaryMode = "samples",
        boundary_max_targets: int = 64,
        boundary_scraper: BoundaryScraper | None = None,
        boundary_readers: Readers = "trainer",
        recording_rules: RulesMode = "auto",
        refresh_interval_s: float = 30.0,
        health: Health | None = None,
        warn_interval_s: float = 60.0,
        store: Store | None = None,
        max_clock_offset_s: float = 1.0,
    ) -> None:
        if boundary != "samples" and boundary_scraper is None:
            raise ConfigError(f"prometheus.boundary: {boundary} needs a boundary scraper; use boundary: samples")
        self._client = client
        self._queries = list(queries)
        self._interval_s = scrape_interval_s
        self._store = store
        self._max_clock_offset_s = max_clock_offset_s
        self._options = Options(
            boundary, boundary_max_targets, boundary_scraper, recording_rules, refresh_interval_s, boundary_readers
        )
        self._closed = threading.Event()
        self._health = health or Health()
        self._warn = RateLimitedLogger(_log, warn_interval_s)
        self._reporter = WindowReporter(self._health, self._warn)
        self._negotiated: Negotiated | None = None
        self._chosen: Chosen | None = None
        self._health.count(QUERY_ERRORS, 0.0)
        self._health.count(QUERY_WARNINGS, 0.0)

    @property
    def queries(self) -> list[MetricQuery]:
        """The resolved queries (types filled in after :meth:`start`)."""
        if self._negotiated is not None:
            return list(self._negotiated.setup.queries)
        return list(self._queries)

    @property
    def boundary(self) -> BoundaryMode:
        """How windows are bounded: ``scrape`` or ``samples`` once started (as configured before)."""
        return self._chosen.boundary if self._chosen is not None else self._options.boundary

    @property
    def rules(self) -> RuleSet | None:
        """The bridge's recording rules Prometheus runs, when they serve any query (see :meth:`start`)."""
        return self._chosen.rules if self._chosen is not None else None

    @property
    def store(self) -> Store | None:
        """What ``prometheus.url`` is and what its queries may use (known once started)."""
        return self._negotiated.setup.store if self._negotiated is not None else self._store

    def start(self) -> None:
        """Negotiate with the store and choose the window source.

        A rejected query raises :class:`ConfigError`; an unreachable or broken Prometheus (or boundary scrapes that
        cannot be had) its :class:`~otel_bridge.errors.SourceError`, counted in ``otel_bridge/query_errors``: the
        bridge's ``startup`` decides whether that stops it, and every step retries until it works.
        """
        try:
            self._prepare()
        except ConfigError:
            raise
        except SourceError:
            self._health.count(QUERY_ERRORS)
            raise

    def _prepare(self) -> None:
        if self._chosen is not None:
            return
        negotiated = negotiate(
            self._client,
            self._queries,
            store=self._store,
            interval_s=self._interval_s,
            max_clock_offset_s=self._max_clock_offset_s,
        )
        try:
            chosen = choose_source(
                self._client,
                negotiated,
                self._options,
                health=self._health,
                warn=self._warn,
                reporter=self._reporter,
                closed=self._closed,
            )
        except BaseException:
            negotiated.serving.close()
            raise
        self._negotiated, self._chosen = negotiated, chosen
        setup = negotiated.setup
        _log.info(
            "%s at prometheus.url is usable: %d configured metric(s), %d target(s) serving them every %.3gs, "
            "boundaries observed by %s",
            setup.store.name,
            len(setup.queries),
            len(negotiated.serving.initial),
            setup.schedule.interval_s,
            _OBSERVERS[self._options.boundary_readers] if chosen.boundary == "scrape" else "Prometheus' samples",
        )
        if chosen.rules is not None:
            _log.info(
                "Prometheus runs otel-bridge's recording rules (every %.3gs) for %d of %d counter/histogram "
                "metric(s): each step reads their per-group sums",
                chosen.rules.interval_s,
                len(chosen.rules.records),
                len(setup.counting),
            )

    def on_boundary(self, t: float) -> None:
        """Forward the boundary to the window source (never blocks)."""
        if self._chosen is not None:
            self._chosen.source.on_boundary(t)

    def close(self) -> None:
        """Stop the window source and what keeps the targets current, and close the HTTP session."""
        self._closed.set()
        if self._chosen is not None:
            self._chosen.source.close()
        if self._negotiated is not None:
            self._negotiated.serving.close()
        self._client.close()

    def produce(self, timeout_millis: float = 10_000, *, window: StepWindow) -> list[ScopeMetrics]:
        """Read ``window`` through the window source and return one Metric per configured metric, in the
        infrastructure scope (each request is bounded by ``prometheus.timeout_s``; the source's waits for what stands
        for the boundaries by half of ``timeout_millis``, counted from this call)."""
        budget = ReadBudget(time.time(), timeout_millis)
        if self._chosen is None:
            try:
                self._prepare()
            except SourceError:
                self._health.count(QUERY_ERRORS)
                raise
        assert self._chosen is not None
        try:
            reading = self._chosen.source.read(window, budget)
        except PrometheusError:
            self._health.count(QUERY_ERRORS)
            raise
        self._reporter.publish(reading.report)
        return infra_scope(reading.metrics)
