"""The store's own exact increase: the window source of a store that has one (Prometheus 3's ``increase(x[w]
anchored)``, VictoriaMetrics' MetricsQL ``increase``: :mod:`otel_bridge.producers.promql._internal.store`).

Each counting query's increase over the window is the store's, summed per label group: from the last sample at or
before the start to the last one in the window, resets corrected per series inside the store, no extrapolation, so
nothing is re-read. The run's first windows are cross-checked once against the samples around their boundaries
(:mod:`.cross_check`): when they disagree, this source reads its counters as :mod:`.samples` does from then on. The
lag parts are the boundary sums' (:func:`.samples.lag_parts`). The run's last window is closed
by the sample after its end, which that increase does not reach: it is read from the samples around its boundaries
(:mod:`.samples`), re-read included.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from otel_bridge.health import Health
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.promql._internal.plan import (
    CounterParts,
    ExactIncrease,
    Part,
    WindowPlan,
    at,
    native_only,
    roled,
    stored_names,
)
from otel_bridge.producers.promql._internal.rules import counting
from otel_bridge.producers.promql._internal.sources.cross_check import (
    Disagreement,
    IncreaseCrossCheck,
    ask,
    disagreements,
)
from otel_bridge.producers.promql._internal.sources.samples import SamplesSource, boundary_sums, lag_parts, reconcile
from otel_bridge.producers.promql._internal.store import Store
from otel_bridge.producers.promql._internal.store_reader import StoreReader
from otel_bridge.producers.window_source import ReadBudget, WindowReading
from otel_bridge.prometheus import promql
from otel_bridge.prometheus.client import PrometheusClient
from otel_bridge.window import StepWindow

__all__ = ["ExactIncreaseSource", "counters_for", "cross_check_window", "exact_increases"]


class ExactIncreaseSource:
    """Reads each window from the store's exact increase (see the module docstring): the samples' source with these
    parts (its waits and, for the run's last window, its re-read); the samples' own parts once the cross-check of its
    first windows found them disagreeing."""

    def __init__(self, reader: StoreReader, counting: Sequence[int], exact: ExactIncrease, *, health: Health) -> None:
        self._reader = reader
        self._samples = SamplesSource(reader, counting, counters=functools.partial(exact_increases, exact=exact))
        self._cross_check = IncreaseCrossCheck(reader, health)

    @property
    def counting(self) -> list[int]:
        """The counting queries this source reads."""
        return self._samples.counting

    def read(self, window: StepWindow, budget: ReadBudget) -> WindowReading:
        """Ask the union once every sample of the window is stored."""
        return self.answer(self.prepare(window))

    def prepare(self, window: StepWindow) -> WindowPlan:
        """The window's union, once every sample it asks for is stored (the first half of :meth:`read`)."""
        return self._samples.prepare(window)

    def answer(self, plan: WindowPlan) -> WindowReading:
        """Ask ``plan``'s union (the second half of :meth:`read`), cross-checked while the first windows last."""
        if not self._cross_check.pending:
            return self._samples.answer(plan)
        reader = self._reader
        answer = reader.ask(plan)
        reader.reread(plan, answer, reconcile)
        if self._cross_check(plan, answer):
            self._samples = SamplesSource(reader, self._samples.counting)
        return reader.reading(plan, answer)

    def on_boundary(self, t: float) -> None:
        """Nothing to do: the store's samples are already there."""

    def close(self) -> None:
        """Nothing held."""


def counters_for(store: Store | None) -> CounterParts:
    """How the counting queries of a plan are read on ``store`` without recording rules: its exact increase where it
    has one, else the boundary sums."""
    if store is None or store.increase is None:
        return boundary_sums
    return functools.partial(exact_increases, exact=store.exact_increase)


def exact_increases(plan: WindowPlan, indices: Sequence[int] | None = None, *, exact: ExactIncrease) -> None:
    """Write the exact increase parts of the counting queries ``indices`` (default: all of the plan's) into ``plan``;
    for the run's last window, the boundary sums. A family the store holds under several names is read by the boundary
    sums too: the store's increase of each name would count a server whose name changed and changed back from the
    older name's last value, counting it twice; the boundary sums read such a server as one series."""
    chosen = plan.increase_queries if indices is None else list(indices)
    if plan.window.final:
        boundary_sums(plan, chosen)
        return
    several = [i for i in chosen if len(plan.queries[i].forms) > 1]
    if several:
        boundary_sums(plan, several)
    for index in chosen:
        if index not in several:
            _exact_increase(plan, index, plan.queries[index], exact)


def _exact_increase(plan: WindowPlan, index: int, query: MetricQuery, exact: ExactIncrease) -> None:
    window = plan.window
    assert window.start is not None
    # Both ends in whole milliseconds, as at() writes them, so the range starts exactly at the start's at().
    length = promql.duration((round(window.end * 1000) - round(window.start * 1000)) / 1000)
    # A window shorter than two scrape intervals may hold no sample of a live series (increase() then answers
    # nothing for it): those add 0, so the key stays.
    present = promql.duration(plan.pad_s) if window.end - window.start < plan.pad_s else None
    end = at(window.end)
    for position, name in enumerate(stored_names(query)):
        # A native histogram's increase is one (its buckets, sum and count): read whole, by its labels alone.
        by = ", ".join([*query.by, *(["le"] if name in query.bucket_names and name != query.native_name else [])])
        own = native_only(query, name, lambda sel: exact(sel, length, end, present=present))
        increase = roled(query, name, own)
        plan.add(f"{index}/increase/{position}", Part("increase", index, name=name), f"sum by ({by}) ({increase})")
    lag_parts(plan, index, query)


def cross_check_window(
    client: PrometheusClient, store: Store, queries: Sequence[MetricQuery], window: StepWindow, *, pad_s: float
) -> tuple[list[Disagreement], bool]:
    """The counting queries among ``queries`` read over the past ``window`` through ``store``'s exact increase and
    through the samples around its boundaries, compared (:func:`.cross_check.disagreements`): the disagreements, and
    whether any figure was not 0. What a run checks its first windows with, for ``otel-bridge doctor``."""
    indices = [i for i, query in enumerate(queries) if counting(query)]

    def plan(counters: CounterParts) -> WindowPlan:
        return WindowPlan(
            queries, window, increase_queries=indices, pad_s=pad_s, closing_s=0.0, counters=counters, report_down=False
        )

    exact = plan(counters_for(store))
    return disagreements(exact, ask(client, store, exact), ask(client, store, plan(boundary_sums)))
