"""PromQLProducer: window statistics from the Prometheus HTTP API, one window at a time.

Where a window's counters come from depends on ``prometheus.boundary`` (resolved once, at :meth:`start`):

- **boundary scrapes** (``scrape``; ``auto`` with few reachable targets): the bridge scrapes the targets Prometheus
  lists for the configured counters and histograms itself at each step boundary (a
  :class:`~otel_bridge.producers.scrape.ScrapeProducer` fed by Prometheus' ``/api/v1/targets``), so every count lands
  in the step during which it happened; Prometheus supplies the gauges' history, raw PromQL and ``up``.
- **Prometheus' samples** (``samples``; ``auto`` otherwise): each boundary is represented, per series, by the last
  sample at or before it. Prometheus sums those samples per group itself (:mod:`otel_bridge.producers.promql.plan`),
  targets that restarted or appeared are re-read raw and their share replaced by their exact increase, and the
  record carries ``otel_bridge/boundary_lag_s``: the largest distance between a boundary and the sample that stood
  for it.

Either way consecutive windows share their boundary samples, so the deltas of contiguous steps add up to the run's
increase; a window is read only once every scrape that started before its end has been stored (twice the targets'
recent scrape duration after the end, at most their ``scrape_timeout``), and the run's last window waits for the
samples after its end that close it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from opentelemetry.sdk.metrics.export import Metric, ScopeMetrics

from otel_bridge.config import BoundaryMode, RulesMode
from otel_bridge.discovery.watcher import TargetWatcher
from otel_bridge.errors import ConfigError, PrometheusError, ScrapeError
from otel_bridge.health import (
    BOUNDARY_LAG,
    MISSING_METRICS,
    QUERY_ERRORS,
    QUERY_WARNINGS,
    SCRAPE_ERRORS,
    TARGETS_DOWN,
    TARGETS_UNREAD,
    UNREAD,
    Health,
)
from otel_bridge.producers.base import infra_scope, metrics_of
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.promql.checks import check_expressions, check_names, resolve_kind
from otel_bridge.producers.promql.plan import (
    REREAD_LOOKBACK_S,
    WINDOW_PLACEHOLDER,
    ExactIncrease,
    Target,
    WindowAnswer,
    WindowPlan,
    primary_names,
    target_of,
)
from otel_bridge.producers.promql.rules import RuleSet, counting, rules_in_use
from otel_bridge.producers.promql.store import Store, detect_store
from otel_bridge.producers.promql.targets import (
    schedule_of,
    scrape_urls,
    served_names,
    serving_targets,
    target_key,
)
from otel_bridge.producers.scrape.process import Scraper
from otel_bridge.producers.statistics import (
    GroupBound,
    Increases,
    RawSeries,
    merge_increases,
    missing_warning,
    stats_from_increases,
    to_metric,
    window_increases,
    with_roles,
)
from otel_bridge.prometheus import promql
from otel_bridge.prometheus.answers import QueryResult
from otel_bridge.prometheus.client import PrometheusClient
from otel_bridge.ratelimit import RateLimitedLogger
from otel_bridge.window import StepWindow

_log = logging.getLogger(__name__)

BoundaryScraper = Callable[[Sequence[str], Sequence[MetricQuery]], Scraper]
"""Builds the scrape producer for boundary scrapes from target URLs and the queries it reads."""

_STORED_SLACK_S = 0.25  # after a scrape's timeout, until its samples are queryable
_CLOSING_SLACK_S = 0.1  # past one interval after a final window's end, where its closing sample may lie
_ARRIVAL_POLL_S = 0.25  # how often the arrival of remote-written samples after a window's end is asked
_RULES_POLL_S = 0.2  # how often the rule evaluation standing for a boundary is asked for, until it is stored
_ENDS_KEPT = 64  # window ends whose rule evaluation is remembered: a step's and its phases'
_RULES_WAIT_INTERVALS = 5.0  # for at most this many rule intervals after a boundary (then the lag says how far off)


class PromQLProducer:
    """Reads the configured metrics from Prometheus for each step window (see the module docstring)."""

    def __init__(
        self,
        client: PrometheusClient,
        queries: Sequence[MetricQuery],
        *,
        scrape_interval_s: float = 15.0,
        boundary: BoundaryMode = "samples",
        boundary_max_targets: int = 64,
        boundary_scraper: BoundaryScraper | None = None,
        recording_rules: RulesMode = "auto",
        refresh_interval_s: float = 30.0,
        health: Health | None = None,
        warn_interval_s: float = 60.0,
        strict: bool = True,
        store: Store | None = None,
    ) -> None:
        """``store``: what ``client`` talks to; detected at :meth:`start` when ``None`` (given, e.g. to measure one
        plan against another on the same store)."""
        if boundary != "samples" and boundary_scraper is None:
            raise ConfigError(f"prometheus.boundary: {boundary} needs a boundary scraper; use boundary: samples")
        self._client = client
        self._strict = strict
        self._ready = False
        self._queries = list(queries)
        self._interval_s = scrape_interval_s
        self._timeout_s = min(10.0, scrape_interval_s)
        self._targets_known = False
        self._boundary: BoundaryMode = boundary
        self._max_targets = boundary_max_targets
        self._new_scraper = boundary_scraper
        self._rules_mode: RulesMode = recording_rules
        self._rules: RuleSet | None = None
        self._ends: dict[float, float] = {}  # window end -> the rule evaluation that stood for it (the latest few)
        self._refresh_interval_s = refresh_interval_s
        self._scraper: Scraper | None = None
        self._scraped: list[int] = []  # the counting queries the boundary scrapes read (the rest: Prometheus' samples)
        self._watcher: TargetWatcher | None = None
        self._closed = threading.Event()
        self._health = health or Health()
        self._down_keys: set[str] = set()  # instances with a scrape_errors key from Prometheus' ``up``
        # The targets serving the configured counters and histograms, down ones included until Prometheus stops
        # scraping them (replaced whole by the target watcher's thread, read by the delivery worker).
        self._members: frozenset[Target] = frozenset()
        self._store = store
        self._last_read: dict[str, float] = {}  # unread instances -> their last successful scrape
        self._warn = RateLimitedLogger(_log, warn_interval_s)
        self._bound = GroupBound(self._health, self._warn)
        self._health.count(QUERY_ERRORS, 0.0)
        self._health.count(QUERY_WARNINGS, 0.0)

    @property
    def queries(self) -> list[MetricQuery]:
        """The resolved queries (types filled in after :meth:`start`)."""
        return list(self._queries)

    @property
    def boundary(self) -> BoundaryMode:
        """How windows are bounded: ``scrape`` or ``samples`` once started (``auto`` before)."""
        return self._boundary

    @property
    def rules(self) -> RuleSet | None:
        """The bridge's recording rules Prometheus runs, when they serve any query (see :meth:`start`)."""
        return self._rules

    @property
    def _pad_s(self) -> float:
        return 2.0 * self._interval_s

    def start(self) -> None:
        """Check Prometheus and every query once, resolve metric types, and choose how boundaries are observed.

        A rejected query raises :class:`ConfigError`. An unreachable or broken Prometheus raises in strict mode; in
        degrade mode it is logged and retried at every step until it works.
        """
        try:
            self._prepare()
        except ConfigError:
            raise
        except (PrometheusError, ScrapeError) as exc:
            if self._strict:
                raise
            self._health.count(QUERY_ERRORS)
            _log.warning(
                "Prometheus is not usable at start-up (%s); running without infrastructure metrics and retrying "
                "at every step (startup: degrade)",
                exc,
            )

    @property
    def store(self) -> Store | None:
        """What ``prometheus.url`` is and what its queries may use (known once started)."""
        return self._store

    def _prepare(self) -> None:
        if self._store is None:
            self._store = detect_store(self._client)
        check_names(self._queries, self._store)
        if any(q.needs_kind for q in self._queries):
            metadata = self._client.metadata()
            self._queries = [resolve_kind(q, metadata) for q in self._queries]
        now = time.time()
        window = StepWindow(step=-1, start=now - self._pad_s, end=now)
        check_expressions(
            self._client,
            self._queries,
            window,
            self._increase_queries(),
            pad_s=self._pad_s,
            exact_increase=self._exact_increase(),
            store=self._store,
        )
        if not self._ready:
            primary = self._primary_names()
            gauges = sorted({q.name for q in self._queries if q.kind == "gauge" and q.name and q.ratio is None})
            # The scrape interval matters to gauges too (a short step may hold no sample of them).
            found = serving_targets(self._client, primary, *([[*primary, *gauges]] if gauges else []))
            targets, scraped = found[0], found[-1]
            self._members = frozenset(target_key(t) for t in targets)
            self._learn_schedule(scraped)
            self._choose_boundary(targets)
            if self._watcher is None and self._members:  # the members whose unread readings records name, kept current
                self._watch_targets(targets, lambda changed: None)
            self._learn_rules()
            self._ready = True
            _log.info(
                "%s at prometheus.url is usable: %d configured metric(s), %d target(s) serving them every %.3gs, "
                "boundaries observed by %s",
                self._store.name if self._store is not None else "Prometheus",
                len(self._queries),
                len(targets),
                self._interval_s,
                "the bridge's own boundary scrapes" if self._boundary == "scrape" else "Prometheus' samples",
            )
            if self._rules is not None:
                _log.info(
                    "Prometheus runs otel-bridge's recording rules (every %.3gs) for %d of %d counter/histogram "
                    "metric(s): each step reads their per-group sums",
                    self._rules.interval_s,
                    len(self._rules.records),
                    len(self._counting_queries()),
                )

    # -- targets and how boundaries are observed -------------------------------------------------------------------

    def _counting_queries(self) -> list[int]:
        return [i for i, q in enumerate(self._queries) if counting(q)]

    def _increase_queries(self) -> list[int]:
        return [i for i in self._counting_queries() if i not in self._scraped]

    def _primary_names(self) -> list[str]:
        return sorted({n for i in self._counting_queries() for n in primary_names(self._queries[i])})

    def _serving_targets(self) -> list[dict[str, object]]:
        """Prometheus' targets serving the configured counters and histograms (those that served them before and
        Prometheus still scrapes included: down, or restarting); kept as the members whose readings records name."""
        targets = serving_targets(self._client, self._primary_names(), members=self._members)[0]
        self._members = frozenset(target_key(t) for t in targets)
        return targets

    def _learn_schedule(self, targets: Sequence[dict[str, object]]) -> None:
        schedule = schedule_of(targets, self._interval_s)
        self._interval_s, self._timeout_s, self._targets_known = (
            schedule.interval_s,
            schedule.storing_delay_s,
            schedule.targets_known,
        )

    def _choose_boundary(self, targets: Sequence[dict[str, object]]) -> None:
        if self._boundary == "samples" or self._new_scraper is None or not self._counting_queries():
            self._boundary = "samples"
            return
        urls = sorted({str(t.get("scrapeUrl")) for t in targets if t.get("scrapeUrl")})
        reason = None
        if not urls:
            reason = "Prometheus lists no target serving the configured counters and histograms yet"
        elif self._boundary == "auto" and len(urls) > self._max_targets:
            reason = f"{len(urls)} targets are more than prometheus.boundary_max_targets ({self._max_targets})"
        scraped: list[int] = []
        if reason is None:  # only series from the targets can be scraped: remote-written ones are read as samples
            served = served_names(self._client, self._primary_names(), targets)
            scraped = [i for i in self._counting_queries() if served & set(primary_names(self._queries[i]))]
            if not scraped:
                reason = "no target Prometheus scrapes serves the configured counters and histograms"
        if reason is None:
            scraper = self._new_scraper(urls, [self._queries[i] for i in scraped])
            try:
                scraper.start()
            except (ScrapeError, ConfigError) as exc:
                scraper.close()
                reason = str(exc)
            else:
                silent = scraper.unanswered()
                if silent:
                    scraper.close()
                    reason = f"the bridge cannot scrape {', '.join(silent)} itself"
                else:
                    self._scraper, self._scraped = scraper, scraped
                    self._watch_targets(targets, scraper.set_targets)
        if self._scraper is not None:
            self._boundary = "scrape"
            return
        if self._boundary == "scrape":
            raise ScrapeError(
                f"prometheus.boundary: scrape, but {reason}; set prometheus.boundary: samples (windows bounded by "
                "Prometheus' own samples, off by up to one scrape interval) or make the targets reachable"
            )
        _log.info("boundaries observed by Prometheus' samples (prometheus.boundary: auto): %s", reason)
        self._boundary = "samples"

    def _watch_targets(self, targets: Sequence[dict[str, object]], on_change: Callable[[list[str]], None]) -> None:
        """Re-read the serving targets every ``refresh_interval_s`` (members join and leave), telling ``on_change``
        their scrape URLs when they change."""
        self._watcher = TargetWatcher(
            self._target_urls,
            on_change,
            interval_s=self._refresh_interval_s,
            initial=scrape_urls((t.get("scrapeUrl") for t in targets if t.get("scrapeUrl")), "Prometheus targets"),
            name="Prometheus targets",
            normalize=scrape_urls,
        )
        self._watcher.start()

    def _learn_rules(self) -> None:
        if self._rules_mode != "off" and self._boundary == "samples" and self._counting_queries():
            if self._store is not None and self._store.rules is not None:
                if self._rules_mode == "required":
                    raise ConfigError(
                        f"prometheus.recording_rules: required, but {self._store.rules}; set "
                        "prometheus.recording_rules: off (or auto)"
                    )
                _log.info("otel-bridge's recording rules are not used: %s", self._store.rules)
                return
            self._rules = rules_in_use(
                self._client.rule_groups(), self._queries, required=self._rules_mode == "required"
            )

    def _target_urls(self) -> list[str]:
        return sorted({str(t["scrapeUrl"]) for t in self._serving_targets() if t.get("scrapeUrl")})

    def on_boundary(self, t: float) -> None:
        """Forward the boundary to the boundary scrapes (never blocks); nothing to do with Prometheus' samples."""
        if self._scraper is not None:
            self._scraper.on_boundary(t)

    def close(self) -> None:
        """Stop the boundary scrapes and close the HTTP session."""
        self._closed.set()
        if self._watcher is not None:
            self._watcher.close()
        if self._scraper is not None:
            self._scraper.close()
        self._client.close()

    # -- one window ------------------------------------------------------------------------------------------------

    def produce(self, timeout_millis: float = 10_000, *, window: StepWindow) -> list[ScopeMetrics]:
        """Query Prometheus for ``window`` and return one Metric per configured metric, in the infrastructure scope
        (each request is bounded by ``prometheus.timeout_s``; the boundary scrapes get ``timeout_millis``, the wait for
        the rule evaluations standing for the boundaries half of it)."""
        budget_end = time.time() + timeout_millis / 2000.0
        if not self._ready:
            try:
                self._prepare()
            except (PrometheusError, ScrapeError):
                self._health.count(QUERY_ERRORS)
                raise
        try:
            arrived = self._await_arrivals(window)
        except PrometheusError:
            self._health.count(QUERY_ERRORS)
            raise
        plan = WindowPlan(
            self._queries,
            window,
            increase_queries=self._increase_queries(),
            pad_s=self._pad_s,
            closing_s=self._closing_s() if arrived is None else arrived - window.end,
            report_unread=self._scraper is None and bool(self._members),
            rules=self._rules,
            watched=sorted(self._down_keys),
            exact_increase=self._exact_increase(),
        )
        self._wait_until_stored(plan.close_at)
        if plan.ruled:
            try:
                plan.at_rule_evaluations(self._rule_evaluations(plan, budget_end))
            except PrometheusError:
                self._health.count(QUERY_ERRORS)
                raise
        metrics: list[Metric] = []
        answered: set[int] = set()
        if self._scraper is not None:
            scraped = metrics_of(self._scraper.produce(timeout_millis, window=window))
            metrics.extend(scraped)
            answered.update(self._scraper_answered(scraped))
        try:
            answer = self._ask(plan)
        except PrometheusError:
            self._health.count(QUERY_ERRORS)
            raise
        answered |= answer.answered
        if self._scraper is None and self._members:
            self._report_unread(answer.unread, window)
        self._report_targets(answer, plan)
        for index in sorted(answer.answered):
            query = self._queries[index]
            if index in answer.increases or index in answer.reread:
                points = stats_from_increases(query, answer.increases.get(index, {}), window)
            else:
                points = answer.points.get(index, [])
            if points:
                metrics.append(to_metric(query, self._bound(query, points, window), window))
        missing = [q for i, q in enumerate(self._queries) if i not in answered and _expects_answer(q, window)]
        self._health.set(MISSING_METRICS, float(len(missing)))
        for query in missing:
            if query.kind == "gauge" and window.seconds is not None and window.seconds < self._interval_s:
                # Not a wrong name: a window shorter than the scrape interval may hold no sample of a gauge.
                missing_warning(
                    self._warn,
                    query,
                    window,
                    f"no sample inside this {window.seconds:.3g}s window (Prometheus samples every "
                    f"{self._interval_s:.3g}s)",
                    "a gauge has a value only in steps holding a scrape: scrape more often, or use the scrape path",
                )
            else:
                missing_warning(self._warn, query, window, "Prometheus returned no series for it")
        return infra_scope(metrics)

    def _scraper_answered(self, scraped: Sequence[Metric]) -> set[int]:
        keys = {m.name for m in scraped}
        return {i for i in self._scraped if self._queries[i].key_name in keys}

    def _closing_s(self) -> float:
        """How far after a final window's end the sample (or rule evaluation) closing it may lie."""
        if self._rules is not None:
            # The first evaluation that has stored every target's first scrape after the end.
            return self._interval_s + self._timeout_s + self._rules.interval_s + _CLOSING_SLACK_S
        return self._interval_s + _CLOSING_SLACK_S if self._targets_known else 0.0

    def _await_arrivals(self, window: StepWindow) -> float | None:
        """With no target known (the series arrive by remote write: the collector's, the trainer's own), wait until
        every series the window read from Prometheus has a sample after its end, which shows that nothing stamped
        inside the window is still on its way (remote write sends a series' samples in order) and gives the run's last
        window the sample that closes it; at most two of ``prometheus.scrape_interval_s`` after the end. Returns when
        that was (``None`` when the targets' schedule says it instead)."""
        names = sorted({*self._primary_names(), *(q.name for q in self._queries if q.kind == "gauge" and q.name)})
        utf8 = {n for q in self._queries for n in q.utf8_names}
        if self._targets_known or not names or window.start is None:
            return None
        deadline = window.end + 2.0 * self._interval_s + (self._store.storing_delay_s if self._store else 0.0)
        # Only series still reporting near the end: one that stopped earlier in the window (a departed source) has no
        # sample coming and must not hold every later window until the deadline.
        span = promql.duration(max(min(window.end - window.start, 1.5 * self._interval_s), 0.001))
        while not self._closed.is_set():
            now = time.time()
            if now >= deadline:  # a window of the past (or one waited for long enough): nothing to ask
                return now
            after = now - window.end
            if after >= 0.001:
                missing = " + ".join(
                    f"(count(count_over_time({name}[{span}] @ {window.end:.3f}) unless "
                    f"count_over_time({name}[{promql.duration(after)}])) or vector(0))"
                    for name in (promql.selector(n, utf8=n in utf8) for n in names)
                )
                result = self._client.query(missing, time=now)
                if not result.series or result.series[0].samples[-1][1] == 0:
                    return now
            self._closed.wait(min(_ARRIVAL_POLL_S, max(deadline - now, 0.0)) or _ARRIVAL_POLL_S)
        return time.time()

    def _report_warnings(self, window: StepWindow, results: Sequence[QueryResult]) -> None:
        """An answer with warnings may be partial (Thanos' partial responses, a querier missing a store): the step's
        values are kept, counted in ``otel_bridge/query_warnings`` and logged (rate-limited), never silent."""
        warnings = [warning for result in results if result.warnings for warning in result.warnings]
        if not warnings:
            return
        self._health.count(QUERY_WARNINGS, float(sum(1 for result in results if result.warnings)))
        self._warn.warning(
            "query-warnings",
            "step %s: prometheus.url answered the step's query with warnings, so its values may be partial "
            "(counted in %s): %s",
            window.step,
            QUERY_WARNINGS,
            "; ".join(dict.fromkeys(warnings)),
        )

    def _exact_increase(self) -> ExactIncrease | None:
        """The store's own exact window increase, when it has one (:mod:`otel_bridge.producers.promql.store`)."""
        store = self._store
        return store.exact_increase if store is not None and store.increase is not None else None

    def _wait_until_stored(self, t: float) -> None:
        """Wait until every scrape (and rule evaluation) that started at or before ``t`` is stored in Prometheus."""
        delay = max(self._timeout_s, 2.0 * self._rules.evaluation_s if self._rules is not None else 0.0)
        delay += self._store.storing_delay_s if self._store is not None else 0.0
        remaining = t + delay + _STORED_SLACK_S - time.time()
        if remaining > 0:
            self._closed.wait(remaining)

    def _rule_evaluations(self, plan: WindowPlan, budget_end: float) -> dict[str, float]:
        """The rule evaluations standing for the window's boundaries: ``{"start": t_rs, "end": t_re}``.

        A boundary is represented by the last evaluation at or before it. Prometheus stores an evaluation's samples
        when each rule is done, seconds after the time they carry on a busy server, so the bridge waits (a few rule
        intervals at most) until an evaluation after the boundary is stored whole: evaluations of one group run one
        after the other, so none at or before the boundary is still to come. The run's last window is closed by an
        evaluation holding every target's first scrape after its end, waited for within half the step's budget
        (``delivery.produce_timeout_s``). When a wait runs out, the last stored evaluation stands for the boundary
        (the lag says how far off it is), and the next window starts from the very evaluation this one ended with,
        so the steps still add up exactly to the run.
        """
        assert self._rules is not None
        window = plan.window
        assert window.start is not None
        # The window that ended last at or before this start (a step's, or one of its phases').
        previous = max(((end, t) for end, t in self._ends.items() if end <= window.start), default=None)
        closing = window.end + self._interval_s + self._timeout_s if plan.close_at > window.end else None
        # The last window waits as long as the step's budget allows: nothing after it would count what it misses.
        deadline = budget_end if closing is not None else plan.close_at + _RULES_WAIT_INTERVALS * self._rules.interval_s
        deadline = min(deadline, budget_end)
        while True:
            times = plan.read_rule_times(
                self._client.query(plan.rule_times_expression(start=True), time=max(time.time(), plan.close_at))
            )
            latest = times.get("latest")
            if (latest is not None and latest > plan.close_at) or time.time() >= deadline or self._closed.is_set():
                break
            self._closed.wait(min(_RULES_POLL_S, max(deadline - time.time(), 0.0)) or _RULES_POLL_S)
        end = times.get("end")
        if closing is not None and latest is not None and (end is None or end < closing) and latest >= closing:
            # The last window, whose evaluations ran late or were skipped: the last stored one holds every target's
            # first scrape after the end.
            times["end"] = latest
        start = times.get("start")
        if previous is not None and (start is None or start <= previous[0]):
            # No evaluation between the previous window's end and this start: this window starts where that one ended.
            times["start"] = previous[1]
        if "end" in times:
            times["end"] = max(times["end"], times.get("start", times["end"]))
            self._ends[window.end] = times["end"]
            for old in sorted(self._ends)[:-_ENDS_KEPT]:
                del self._ends[old]
        return times

    def _ask(self, plan: WindowPlan) -> WindowAnswer:
        store = self._store
        expressions = plan.expressions(*((store.max_query_bytes, store.max_query_setting) if store else (None,)))
        if not expressions:
            return WindowAnswer()
        results = [self._client.query(expression, time=plan.window.end) for expression in expressions]
        self._report_warnings(plan.window, results)
        answer = plan.read(
            QueryResult(
                "vector",
                tuple(series for result in results for series in result.series),
                tuple(warning for result in results for warning in result.warnings),
            )
        )
        targets = {t for targets in answer.reread.values() for t in targets}
        reread = plan.reread_expression(targets, answer)
        if reread is not None:
            raw = _raw_series(self._client.query(reread, time=plan.reread_until))
            window = plan.window
            views, unknown = plan.rule_views(raw, targets) if plan.ruled else ({}, set())
            for job, instance in sorted(unknown):
                self._warn.warning(
                    f"rule-view:{job}/{instance}",
                    "step %s: could not tell which samples of %s (job %s) otel-bridge's recording rules had at the "
                    "step's boundaries (their otel_bridge:target:counted_5m matches none of its sample times); its "
                    "share is taken as if they had all, so a count may land in a neighbouring step",
                    window.step,
                    instance,
                    job,
                )
            for index, chosen in answer.reread.items():
                query = self._queries[index]
                names = query.series_names()
                mine = [s for s in raw if target_of(s.labels) in chosen and s.name in names and query.matches(s.labels)]
                summed: Increases = {}
                for series in with_roles(query, mine):  # the sums were taken per role, as with_roles labels
                    share = plan.summed_share(index, series, answer, views.get(target_of(series.labels)))
                    if share is not None:
                        summed[share[0]] = summed.get(share[0], 0.0) - share[1]
                if index in plan.ruled:
                    exact: Increases = {}
                    for target in sorted(chosen):
                        own = [s for s in mine if target_of(s.labels) == target]
                        view = views.get(target)
                        if own and view is not None:
                            exact = merge_increases(exact, plan.ruled_exact(index, own, answer, view))
                else:
                    closed = [_closed_by(s, window) for s in mine]
                    exact = window_increases(query, closed, plan.exact_window(index, answer)) or {}
                answer.increases[index] = merge_increases(answer.increases.get(index, {}), summed, exact)
        return answer

    def _report_targets(self, answer: WindowAnswer, plan: WindowPlan) -> None:
        if self._scraper is None:
            self._health.set(BOUNDARY_LAG, answer.lag_s or 0.0)
        elif self._increase_queries():  # remote-written counters beside the scraped ones: the larger distance
            self._health.set(BOUNDARY_LAG, max(self._health.gauge(BOUNDARY_LAG), answer.lag_s or 0.0))
        self._health.set(TARGETS_DOWN, float(len(answer.failed_scrapes)))
        for (job, instance), failed in sorted(answer.failed_scrapes.items()):
            self._health.count(SCRAPE_ERRORS, failed, labels={"instance": instance})
            self._down_keys.add(instance)
            if self._scraper is not None and (job, instance) in self._members:
                continue  # the boundary scrapes' own WARNING about it said so
            self._warn.warning(
                f"down:{job}/{instance}",
                "Prometheus could not scrape %s (job %s) %d time(s) during the step: its metrics are missing from "
                "that time",
                instance,
                job,
                int(failed),
            )
        if answer.present is not None:
            # A target Prometheus no longer scrapes (dropped from its service discovery or config) takes its key
            # with it, as the scrape path's set_targets does: otherwise every record would carry it forever.
            for gone in sorted(set(plan.watched) - answer.present):
                self._health.forget(SCRAPE_ERRORS, {"instance": gone})
                self._down_keys.discard(gone)

    def _report_unread(self, down: set[Target], window: StepWindow) -> None:
        """Name the member targets Prometheus has no reading of at the window's end (their last scrape failed), with
        the seconds since their last successful scrape, for as long as they stay unread; one WARNING (shared with the
        one about its failed scrapes) when one becomes unread, one INFO line when it is read again."""
        unread = {target for target in down if target in self._members}
        new = sorted(instance for _, instance in unread if instance not in self._last_read)
        if new:
            self._last_read.update(self._last_successful_scrapes(new, window.end))
        self._health.set(TARGETS_UNREAD, float(len({instance for _, instance in unread})))
        for job, instance in sorted(unread):
            seconds = window.end - self._last_read[instance]
            self._health.set(UNREAD, seconds, labels={"instance": instance})
            if instance in new:
                self._warn.warning(
                    f"down:{job}/{instance}",
                    "step %d: Prometheus has no reading of %s (job %s) at the step's end, its last successful scrape "
                    "%.3gs before: its counts since then are in the step where it is read again (lost if it comes "
                    "back as a new process); every step until then names it in otel_bridge/unread_s",
                    window.step,
                    instance,
                    job,
                    seconds,
                )
        for instance in sorted(set(self._last_read) - {instance for _, instance in unread}):
            del self._last_read[instance]
            self._health.forget(UNREAD, {"instance": instance})
            _log.info("step %d: Prometheus reads %s again", window.step, instance)

    def _last_successful_scrapes(self, instances: Sequence[str], at: float) -> dict[str, float]:
        """When Prometheus last scraped each of ``instances`` successfully before ``at`` (its ``up`` samples, looking
        back :data:`REREAD_LOOKBACK_S`; that far back when none is found)."""
        found = dict.fromkeys(instances, at - REREAD_LOOKBACK_S)
        selector = f"up{{instance=~{promql.value_alternation(instances)}}}[{promql.duration(REREAD_LOOKBACK_S)}]"
        try:
            result = self._client.query(selector, time=at)
        except PrometheusError as exc:
            self._health.count(QUERY_ERRORS)
            _log.warning("reading when %s were last scraped failed: %s", ", ".join(instances), exc)
            return found
        for series in result.series:
            instance = series.labels.get("instance", "")
            good = [t for t, value in series.samples if value == 1.0]
            if instance in found and good:
                found[instance] = max(found[instance], good[-1])
        return found


def _expects_answer(query: MetricQuery, window: StepWindow) -> bool:
    if window.start is not None:
        return True
    if query.promql is not None:
        return WINDOW_PLACEHOLDER not in query.promql
    return query.kind == "gauge" and "last" in query.stats


def _closed_by(series: RawSeries, window: StepWindow) -> RawSeries:
    """For the run's last window: the series' samples up to its first one after the end (which closes the window)."""
    if not window.final:
        return series
    kept = []
    for sample in series.samples:
        kept.append(sample)
        if sample[0] > window.end:
            break
    return RawSeries(series.name, series.labels, kept)


def _raw_series(result: QueryResult) -> list[RawSeries]:
    out = []
    for series in result.series:
        name = series.labels.get("__name__")
        if name is None:
            continue
        labels = {k: v for k, v in series.labels.items() if k != "__name__"}
        out.append(RawSeries(name=name, labels=labels, samples=series.samples))
    return out
