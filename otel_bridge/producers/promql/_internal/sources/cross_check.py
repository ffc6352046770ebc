"""The store's exact increase cross-checked once against the samples around a window's boundaries (issue 37 finding 4).

Store detection is confirmed by behaviour (:mod:`..store`), but a store, or something in front of it, may still answer
the exact increase (Prometheus 3's ``increase(x[w] anchored)``, MetricsQL's ``increase``) with figures that are
possible and wrong (a gateway that caches or rewrites answers, a store whose increase is not the one its name claims).
Both read the same samples: the last one at or before the window's start and the last one in the window, resets
corrected. So for the run's first windows read through the exact increase (up to :data:`WINDOWS`, until one holds an
increase), the same counting queries are read once more from the samples around the boundaries (the samples source's
parts, :mod:`.samples`, its re-reads included) and each label group's two figures are compared. They may
differ by what the samples' own lag explains (the window's increase at its rate over the distance between a boundary
and the sample standing for it) and no more. A disagreement is one WARNING naming the store, the plan, the metric and
both figures, counted in ``otel_bridge/increase_disagreements{metric}`` (``otel-bridge doctor`` makes the same check
over the last seconds, :func:`ask`); that window's counters and every later
window's are the samples' (the caller switches its plan). A figure no window can have (negative, not finite) is not
compared: it is an answer error of its own, left out of the step.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from otel_bridge.errors import PrometheusError
from otel_bridge.health import INCREASE_DISAGREEMENTS, QUERY_ERRORS, Health
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.promql._internal.plan import WindowAnswer, WindowPlan, as_served
from otel_bridge.producers.promql._internal.sources.samples import boundary_sums, reconcile
from otel_bridge.producers.promql._internal.store import Store
from otel_bridge.producers.promql._internal.store_reader import StoreReader, raw_series
from otel_bridge.producers.statistics import Group
from otel_bridge.prometheus.answers import QueryResult
from otel_bridge.prometheus.client import PrometheusClient

__all__ = ["WINDOWS", "Disagreement", "IncreaseCrossCheck", "ask", "disagreements"]

_log = logging.getLogger(__name__)

WINDOWS = 3
"""At most this many of the run's first windows are cross-checked (fewer once one holds an increase)."""

_RELATIVE = 1e-6  # floating-point sums in two orders: what two right answers may differ by besides the lag


@dataclass(frozen=True, slots=True)
class Disagreement:
    """One label group of a counting query whose exact increase and samples disagree."""

    query: MetricQuery
    name: str
    group: Group
    exact: float
    samples: float

    def describe(self) -> str:
        """``metric{group}: exact increase X, samples Y``."""
        labels = ", ".join(f'{k}="{v}"' for k, v in self.group)
        return f"{self.name}{{{labels}}}: exact increase {self.exact:.6g}, samples {self.samples:.6g}"


def disagreements(plan: WindowPlan, exact: WindowAnswer, samples: WindowAnswer) -> tuple[list[Disagreement], bool]:
    """The label groups of ``plan``'s counting queries whose ``exact`` and ``samples`` increases differ by more than
    the samples' lag explains (see the module docstring), and whether any figure was not 0 (a window that held an
    increase)."""
    window = plan.window
    seconds = window.seconds or 0.0
    lag = samples.lag_s or 0.0
    found: list[Disagreement] = []
    held = False
    for index in plan.increase_queries:
        if index not in exact.answered and index not in samples.answered:
            continue
        query = plan.queries[index]
        ours, theirs = exact.increases.get(index, {}), samples.increases.get(index, {})
        for key in sorted(set(ours) | set(theirs)):
            a, b = ours.get(key, 0.0), theirs.get(key, 0.0)
            if not math.isfinite(a) or a < 0.0:
                continue  # a figure no window can have: an answer error of its own (StoreReader.reading)
            held = held or a != 0.0 or b != 0.0
            explained = abs(b) * min(lag / seconds, 1.0) if seconds > 0 else abs(b)
            if abs(a - b) > explained + _RELATIVE * max(abs(a), abs(b)):
                found.append(Disagreement(query, key[0], key[1], a, b))
    return found, held


class IncreaseCrossCheck:
    """Cross-checks the run's first windows read through the store's exact increase (see the module docstring)."""

    def __init__(self, reader: StoreReader, health: Health) -> None:
        self._reader = reader
        self._health = health
        self._left = WINDOWS

    @property
    def pending(self) -> bool:
        """Whether a window is still to be cross-checked."""
        return self._left > 0

    def __call__(self, plan: WindowPlan, answer: WindowAnswer) -> bool:
        """Cross-check ``plan``'s answer (a window read through the exact increase) while windows are left; returns
        whether the two disagreed, with ``answer``'s counters replaced by the samples'."""
        window = plan.window
        if self._left <= 0 or window.start is None or window.final or not plan.increase_queries:
            return False
        self._left -= 1
        reader = self._reader
        store = reader.setup.store
        samples_plan = WindowPlan(
            plan.queries,
            window,
            increase_queries=plan.increase_queries,
            pad_s=plan.pad_s,
            closing_s=0.0,
            counters=boundary_sums,
            report_down=False,
        )
        try:
            samples = reader.ask(samples_plan)
            reader.reread(samples_plan, samples, reconcile)
        except PrometheusError as exc:
            self._health.count(QUERY_ERRORS)
            _log.warning(
                "step %d: the samples around the window could not be read to cross-check %s's exact increase: %s",
                window.step,
                store.name,
                exc,
            )
            return False
        found, held = disagreements(plan, answer, samples)
        if held:
            self._left = 0
        if not found:
            return False
        self._left = 0
        for metric in sorted({d.query.key_name for d in found}):
            self._health.count(INCREASE_DISAGREEMENTS, labels={"metric": metric})
        _log.warning(
            "step %d: %s at prometheus.url answers its exact increase (%s) with figures that disagree with its own "
            "samples around the window's boundaries, beyond what their lag (%.3gs) explains: %s; something in front "
            "of the store (a gateway, a cache) or the store itself answers that increase wrongly; counted in %s, and "
            "this run reads its counters from the samples around each boundary from now on",
            window.step,
            store.name,
            _plan_name(store.increase),
            samples.lag_s or 0.0,
            "; ".join(d.describe() for d in found),
            INCREASE_DISAGREEMENTS,
        )
        for index in plan.increase_queries:
            answer.increases[index] = samples.increases.get(index, {})
            if index in samples.answered:
                answer.answered.add(index)
        answer.lag_s = max(answer.lag_s or 0.0, samples.lag_s or 0.0)
        return True


def _plan_name(increase: str | None) -> str:
    return {"anchored": "increase(x[w] anchored)", "metricsql": "MetricsQL's increase()"}.get(increase or "", "none")


def ask(client: PrometheusClient, store: Store, plan: WindowPlan) -> WindowAnswer:
    """``plan``'s answer from ``store``, its re-read targets reconciled as the samples source does, outside a run (no
    health keys, no waits): what ``otel-bridge doctor`` cross-checks a past window with."""
    results = [
        client.query(expression, time=plan.window.end, native_histograms=True)
        for expression in plan.expressions(store.max_query_bytes)
    ]
    answer = plan.read(QueryResult("vector", tuple(series for result in results for series in result.series), ()))
    expression = plan.reread_expression({t for targets in answer.reread.values() for t in targets})
    if expression is not None:
        result = client.query(expression, time=plan.reread_until, native_histograms=True)
        reconcile(plan, answer, as_served(plan.queries, raw_series(result)))
    return answer
