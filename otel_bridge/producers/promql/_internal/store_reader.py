"""What every PromQL window source does with the store, in one place: wait until a window's samples are there, ask
its union, re-read targets raw, and turn the answer into metrics and a window report.

A source decides which parts its counting queries get (:data:`~.plan.CounterParts`) and how re-read targets are
reconciled (:data:`Reconcile`); the rest is the same for all of them: the union's common parts (gauges, raw PromQL,
failed and unread targets: :class:`~.plan.WindowPlan`), the waits for stored samples and for arrivals
(:mod:`.arrivals`), the answer's warnings, Prometheus' ``up`` as health keys, and the statistics.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from opentelemetry.sdk.metrics.export import Metric

from otel_bridge.errors import PrometheusError
from otel_bridge.health import (
    ANSWER_ERRORS,
    CLOCK_OFFSET,
    QUERY_ERRORS,
    QUERY_WARNINGS,
    SCRAPE_ERRORS,
    TARGETS_DOWN,
    Health,
)
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.promql._internal.arrivals import ArrivalWait
from otel_bridge.producers.promql._internal.histogram_storage import with_histogram_storage
from otel_bridge.producers.promql._internal.plan import (
    REREAD_LOOKBACK_S,
    WINDOW_PLACEHOLDER,
    CounterParts,
    Target,
    WindowAnswer,
    WindowPlan,
    as_served,
)
from otel_bridge.producers.promql._internal.setup import Setup
from otel_bridge.producers.promql._internal.targets import ServingTargets
from otel_bridge.producers.statistics import (
    ImpossibleValues,
    RawSeries,
    native_series,
    possible_increases,
    possible_points,
    stats_from_increases,
    to_metric,
)
from otel_bridge.producers.window_report import MissingMetric, UnreadTarget, WindowReport, WindowReporter
from otel_bridge.producers.window_source import WindowReading
from otel_bridge.prometheus import promql
from otel_bridge.prometheus.answers import QueryResult
from otel_bridge.prometheus.client import PrometheusClient
from otel_bridge.ratelimit import RateLimitedLogger
from otel_bridge.window import StepWindow

__all__ = ["Reconcile", "StoreReader", "raw_series"]

_log = logging.getLogger(__name__)

_STORED_SLACK_S = 0.25  # after a scrape's timeout, until its samples are queryable
_CLOSING_SLACK_S = 0.1  # past one interval after a final window's end, where its closing sample may lie

Reconcile = Callable[[WindowPlan, WindowAnswer, Sequence[RawSeries]], None]
"""Replaces the re-read targets' share of the answer's sums (:attr:`WindowAnswer.reread`) by what their raw samples
say: a window source's own reconciliation."""


class StoreReader:
    """Reads windows from the store for a window source (see the module docstring).

    ``serving``: the members whose unread readings and failed scrapes records name. ``scrapes_name_members``: the
    bridge's boundary scrapes read the members themselves and say when one fails or is unread, so Prometheus' view of
    them is not said again. ``closed``: set when the producer closes (ends every wait).
    """

    def __init__(
        self,
        client: PrometheusClient,
        setup: Setup,
        serving: ServingTargets,
        *,
        health: Health,
        warn: RateLimitedLogger,
        reporter: WindowReporter,
        closed: threading.Event,
        scrapes_name_members: bool = False,
    ) -> None:
        self.client = client
        self.setup = setup
        self.queries = list(setup.queries)
        self._serving = serving
        self._health = health
        self.warn = warn
        self._reporter = reporter
        self.closed = closed
        self._scrapes_name_members = scrapes_name_members
        self._down_keys: set[str] = set()  # instances with a scrape_errors key from Prometheus' ``up``
        self._last_read: dict[str, float] = {}  # unread instances -> their last successful scrape
        self._impossible = ImpossibleValues(health, warn)
        gauges = {n for q in self.queries if q.kind == "gauge" and q.name for n in q.stored(q.name)}
        self._arrivals = ArrivalWait(
            client,
            setup,
            [*setup.primary_names, *gauges],
            utf8=frozenset(n for q in self.queries for n in q.utf8_names),
            closed=closed,
        )

    # -- before asking ---------------------------------------------------------------------------------------------

    def closing_s(self) -> float:
        """How far after a final window's end the sample closing it may lie: one scrape interval, when the targets'
        schedule is known (remote-written series: their arrival says it, :meth:`plan`)."""
        schedule = self.setup.schedule
        return schedule.interval_s + _CLOSING_SLACK_S if schedule.targets_known else 0.0

    def plan(
        self, window: StepWindow, counting: Sequence[int], *, closing_s: float, counters: CounterParts
    ) -> WindowPlan:
        """The union for ``window`` with the common parts and the counting queries' (``counters``), once the samples
        of series no known target serves have arrived after the window's end (:mod:`.arrivals`). The plan's window is
        ``window`` on the store's clock (:meth:`read_clock`)."""
        window = self.read_clock(window)
        arrived = self._arrivals.wait(window)
        return WindowPlan(
            self.queries,
            window,
            increase_queries=counting,
            pad_s=self.setup.pad_s,
            closing_s=closing_s if arrived is None else arrived.closed_at - window.end,
            closing_from=None if arrived is None else arrived.closing_from,
            counters=counters,
            report_unread=not self._scrapes_name_members and bool(self._serving.members),
            watched=sorted(self._down_keys),
            first_over_time=self.setup.store.first_over_time,
        )

    def read_clock(self, window: StepWindow) -> StepWindow:
        """``window`` on the store's clock, measured again when due; ``otel_bridge/clock_offset_s`` says the offset
        and a WARNING (rate-limited) when it is beyond ``prometheus.max_clock_offset_s``. A failed measurement keeps
        the last offset (counted in ``otel_bridge/query_errors``, logged)."""
        clock = self.setup.clock
        try:
            clock.refresh()
        except PrometheusError as exc:
            self._health.count(QUERY_ERRORS)
            self.warn.warning(
                "clock-offset-unmeasured",
                "measuring prometheus.url's clock failed, the last offset (%.3fs) stays: %s",
                clock.offset_s,
                exc,
            )
        if clock.measured:
            self._health.set(CLOCK_OFFSET, clock.offset_s)
        if clock.beyond_bound:
            self.warn.warning(
                "clock-offset",
                "prometheus.url's clock is %+.3fs from this process' (measured to +-%.3fs), beyond "
                "prometheus.max_clock_offset_s (%gs): each window is asked at the store's times, moved by the offset "
                "(reported in %s); synchronise the clocks (NTP) of the trainer's and the store's nodes",
                clock.offset_s,
                clock.precision_s,
                clock.max_offset_s,
                CLOCK_OFFSET,
            )
        return clock.to_store(window)

    def wait_until_stored(self, t: float, delay_s: float | None = None) -> None:
        """Wait until every scrape that started at or before ``t`` (the store's time) is stored (``delay_s`` after it:
        by default the targets' storing delay; a source whose own writes take longer says so)."""
        delay = self.setup.schedule.storing_delay_s if delay_s is None else delay_s
        remaining = t + delay + self.setup.store.storing_delay_s + _STORED_SLACK_S - self.setup.clock.now()
        if remaining > 0:
            self.closed.wait(remaining)

    # -- asking ----------------------------------------------------------------------------------------------------

    def ask(self, plan: WindowPlan, read: Callable[[QueryResult], WindowAnswer] | None = None) -> WindowAnswer:
        """The union's answer at the window's end, in the parts the store takes, read by ``read`` (default:
        :meth:`WindowPlan.read`); its warnings are counted and logged."""
        store = self.setup.store
        expressions = plan.expressions(store.max_query_bytes, store.max_query_setting)
        if not expressions:
            return WindowAnswer()
        results = [
            self.client.query(expression, time=plan.window.end, native_histograms=True) for expression in expressions
        ]
        self._report_warnings(plan.window, results)
        return (read or plan.read)(
            QueryResult(
                "vector",
                tuple(series for result in results for series in result.series),
                tuple(warning for result in results for warning in result.warnings),
            )
        )

    def reread(self, plan: WindowPlan, answer: WindowAnswer, reconcile: Reconcile) -> None:
        """Fetch the raw samples of the targets the answer marks for re-reading, and ``reconcile`` them."""
        targets = {t for targets in answer.reread.values() for t in targets}
        expression = plan.reread_expression(targets)
        if expression is not None:
            result = self.client.query(expression, time=plan.reread_until, native_histograms=True)
            reconcile(plan, answer, as_served(plan.queries, raw_series(result)))

    def _report_warnings(self, window: StepWindow, results: Sequence[QueryResult]) -> None:
        """An answer with warnings may be partial (Thanos' partial responses, a querier missing a store): the step's
        values are kept, counted in ``otel_bridge/query_warnings`` and logged (rate-limited), never silent."""
        warnings = [warning for result in results if result.warnings for warning in result.warnings]
        if not warnings:
            return
        self._health.count(QUERY_WARNINGS, float(sum(1 for result in results if result.warnings)))
        self.warn.warning(
            "query-warnings",
            "step %s: prometheus.url answered the step's query with warnings, so its values may be partial "
            "(counted in %s): %s",
            window.step,
            QUERY_WARNINGS,
            "; ".join(dict.fromkeys(warnings)),
        )

    # -- after asking ----------------------------------------------------------------------------------------------

    def reading(self, plan: WindowPlan, answer: WindowAnswer) -> WindowReading:
        """The window's metrics from ``answer``, and its report (lag, unread members, missing metrics); Prometheus'
        failed scrapes are counted as they are found, in the step's window (a phase's lie inside it)."""
        window = self.setup.clock.to_trainer(plan.window)
        unread: list[UnreadTarget] | None = None
        new: set[str] = set()
        if window.phase is None:
            if not self._scrapes_name_members and self._serving.members:
                unread, new = self._unread(answer.unread, plan.window)  # up samples: the store's times
            self._report_targets(answer, plan, said=new)
        metrics: list[Metric] = []
        report = WindowReport(window, "Prometheus", lag_s=answer.lag_s or 0.0, unread=unread)
        for index, series in sorted(answer.impossible.items()):
            self._impossible(self.queries[index], series, window)
        for index in sorted(answer.answered):
            query = self.queries[index]
            if index in answer.increases or index in answer.reread:
                increases, wrong = possible_increases(query, answer.increases.get(index, {}))
                points = stats_from_increases(query, increases, window)
            else:
                points, wrong = possible_points(answer.points.get(index, []))
            if wrong:
                self._answer_error(query, wrong, window)
            if points:
                metrics.append(to_metric(query, report.within_bounds(query, points), window))
        interval_s = self.setup.schedule.interval_s
        missing = report.missing
        for index, query in enumerate(self.queries):
            if index in answer.answered or not _expects_answer(query, window):
                continue
            if query.kind == "gauge" and window.seconds is not None and window.seconds < interval_s:
                # Not a wrong name: a window shorter than the scrape interval may hold no sample of a gauge.
                missing.append(
                    MissingMetric(
                        query,
                        f"no sample inside this {window.seconds:.3g}s window (Prometheus samples every "
                        f"{interval_s:.3g}s)",
                        "a gauge has a value only in steps holding a scrape: scrape more often, or use the scrape path",
                    )
                )
            else:
                missing.append(MissingMetric(query, "Prometheus returned no series for it"))
        self._find_histograms([m.query for m in missing if m.query.kind == "histogram" and m.query.ratio is None])
        return WindowReading(metrics, report)

    def _find_histograms(self, missing: Sequence[MetricQuery]) -> None:
        """Ask again how the store holds the histograms a window found no series of (:mod:`.histogram_storage`): the
        next window reads them as they are stored now. A failed question keeps what was found before (counted in
        ``otel_bridge/query_errors``, logged)."""
        if not missing:
            return
        indices = [self.queries.index(query) for query in missing]
        try:
            found = with_histogram_storage(self.client, missing, max_query_bytes=self.setup.store.max_query_bytes)
        except PrometheusError as exc:
            self._health.count(QUERY_ERRORS)
            self.warn.warning("histogram-storage", "asking how the store holds %s failed: %s", missing[0].key_name, exc)
            return
        for index, query in zip(indices, found, strict=True):
            self.queries[index] = query

    def _answer_error(self, query: MetricQuery, groups: int, window: StepWindow) -> None:
        """The store answered figures no window can have for ``groups`` label groups of ``query`` (a negative or
        non-finite counter increase, negative idle seconds, several values of one group's aggregated statistic): a
        wrong answer, not a value. They are left out of the
        step (never fabricated), counted in ``otel_bridge/answer_errors{metric}`` and named in a WARNING
        (rate-limited)."""
        self._health.count(ANSWER_ERRORS, float(groups), labels={"metric": query.key_name})
        self.warn.warning(
            f"answer-error:{query.key_name}",
            "step %d: prometheus.url (%s) answered figures no window can have for %d label group(s) of metric %s "
            "(%s): a negative or non-finite increase of a counter, negative idle seconds, or several values of one "
            "group's aggregated statistic; they are left out of "
            "the step, counted in %s; the store's answers are wrong: check its version and what sits in front of it",
            window.step,
            self.setup.store.name,
            groups,
            query.key_name,
            query.entry,
            ANSWER_ERRORS,
        )

    def _report_targets(self, answer: WindowAnswer, plan: WindowPlan, *, said: set[str]) -> None:
        """Prometheus' failed scrapes as health keys and warnings (not for the instances ``said``: newly unread, the
        report's warning names them under the same key)."""
        self._health.set(TARGETS_DOWN, float(len(answer.failed_scrapes)))
        for (job, instance), failed in sorted(answer.failed_scrapes.items()):
            self._health.count(SCRAPE_ERRORS, failed, labels={"instance": instance})
            self._down_keys.add(instance)
            if self._scrapes_name_members and (job, instance) in self._serving.members:
                continue  # the boundary scrapes' own WARNING about it said so
            if instance in said:
                continue
            self.warn.warning(
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

    def _unread(self, down: set[Target], window: StepWindow) -> tuple[list[UnreadTarget], set[str]]:
        """The member targets Prometheus has no reading of at the window's end (their last scrape failed), with the
        seconds since their last successful scrape, and the instances newly unread (the first window one is unread
        in warns, under the key of the warning about its failed scrapes)."""
        members = self._serving.members
        unread = {target for target in down if target in members}
        new = sorted(instance for _, instance in unread if instance not in self._last_read)
        if new:
            self._last_read.update(self._last_successful_scrapes(new, window.end))
        for instance in set(self._last_read) - {instance for _, instance in unread}:
            del self._last_read[instance]
        return [
            UnreadTarget(instance, window.end - self._last_read[instance], job, warn_key=f"down:{job}/{instance}")
            for job, instance in sorted(unread)
        ], set(new)

    def _last_successful_scrapes(self, instances: Sequence[str], at: float) -> dict[str, float]:
        """When Prometheus last scraped each of ``instances`` successfully before ``at`` (its ``up`` samples, looking
        back :data:`REREAD_LOOKBACK_S`; that far back when none is found)."""
        found = dict.fromkeys(instances, at - REREAD_LOOKBACK_S)
        selector = f"up{{instance=~{promql.value_alternation(instances)}}}[{promql.duration(REREAD_LOOKBACK_S)}]"
        try:
            result = self.client.query(selector, time=at)
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


def raw_series(result: QueryResult) -> list[RawSeries]:
    """The series of a range-vector answer, each with its name apart from its labels (the ones without a name left
    out). A native histogram's samples become its parts' series (:func:`native_series`), unless a classic ``_count``
    series of the same labels is in the answer too (the store holds the histogram both ways: read once, as classic)."""
    out = []
    classic = {
        (series.labels["__name__"], *sorted((k, v) for k, v in series.labels.items() if k != "__name__"))
        for series in result.series
        if series.samples and series.labels.get("__name__", "").endswith("_count")
    }
    for series in result.series:
        name = series.labels.get("__name__")
        if name is None:
            continue
        labels = {k: v for k, v in series.labels.items() if k != "__name__"}
        if series.samples:
            out.append(RawSeries(name=name, labels=labels, samples=series.samples))
        if series.histograms and (f"{name}_count", *sorted(labels.items())) not in classic:
            out.extend(native_series(name, labels, series.histograms))
    return out
