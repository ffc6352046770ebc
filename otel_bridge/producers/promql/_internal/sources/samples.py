"""Prometheus' samples around each boundary: the window source every store allows (``prometheus.boundary: samples``
on a store without an exact increase of its own, and the recording rules off or not loaded).

Each boundary is represented, per series, by the last sample at or before it, and the store sums those samples per
label group itself: ``sum by (...) (last_over_time(x[...] @ end))`` and ``... @ start``; their difference is the
window's increase for every series whose counter did not reset. The targets to read sample by sample are asked in the
same union: those whose counters reset during the window (``resets(...) > 0``) or whose series have no sample just
before it (they appeared, or came back after being down). Their series are fetched raw by a second request (looking
back up to :data:`~otel_bridge.producers.promql._internal.plan.REREAD_LOOKBACK_S` for their baseline); their share of
the sums (:func:`summed_share`) is replaced by their exact increase (:func:`reconcile`), so a restart costs the bytes
of that one replica and exactness is kept. The lag parts ask how far from each boundary the samples standing for it
lie (``timestamp(x @ t)``).

The run's last window is closed by the first sample after its end (for a counter between resets the smallest sample
after it: ``min_over_time``), :attr:`WindowPlan.close_at` at the latest; read by arrival, the first after
:attr:`WindowPlan.closing_from` (:mod:`..arrivals`). The store's exact increase
(:mod:`.exact_increase`) and the recording rules (:mod:`.recording_rules`) read their run's last window, or the
queries the rules do not serve, with these parts.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.promql._internal.plan import (
    TARGET_LABELS,
    CounterParts,
    Part,
    Target,
    WindowAnswer,
    WindowPlan,
    at,
    native_only,
    primary_names,
    roled,
    stored_names,
    target_of,
)
from otel_bridge.producers.promql._internal.store_reader import StoreReader
from otel_bridge.producers.statistics import (
    Group,
    Increases,
    RawSeries,
    group_of,
    merge_increases,
    window_increases,
    with_roles,
)
from otel_bridge.producers.window_source import ReadBudget, WindowReading
from otel_bridge.prometheus import promql
from otel_bridge.window import StepWindow

__all__ = [
    "SamplesSource",
    "boundary_sums",
    "lag_parts",
    "reconcile",
    "reread_series",
    "share_key",
    "summed_share",
]


class SamplesSource:
    """Reads each window from the samples standing for its boundaries (see the module docstring)."""

    def __init__(self, reader: StoreReader, counting: Sequence[int], *, counters: CounterParts | None = None) -> None:
        """``counters``: the counting queries' parts (default: the boundary sums; the store's exact increase gives
        its own, :mod:`.exact_increase`)."""
        self._reader = reader
        self._counting = list(counting)
        self._counters: CounterParts = counters or boundary_sums

    @property
    def counting(self) -> list[int]:
        """The counting queries this source reads (the others are gauges and raw PromQL, or read elsewhere)."""
        return list(self._counting)

    def read(self, window: StepWindow, budget: ReadBudget) -> WindowReading:
        """Ask the union once every sample of the window is stored, re-read the targets that reset or appeared."""
        return self.answer(self.prepare(window))

    def prepare(self, window: StepWindow) -> WindowPlan:
        """The window's union, once every sample it asks for is stored (the first half of :meth:`read`)."""
        reader = self._reader
        plan = reader.plan(window, self._counting, closing_s=reader.closing_s(), counters=self._counters)
        reader.wait_until_stored(plan.close_at)
        return plan

    def answer(self, plan: WindowPlan) -> WindowReading:
        """Ask ``plan``'s union, re-read the targets that reset or appeared (the second half of :meth:`read`)."""
        reader = self._reader
        answer = reader.ask(plan)
        reader.reread(plan, answer, reconcile)
        return reader.reading(plan, answer)

    def on_boundary(self, t: float) -> None:
        """Nothing to do: Prometheus' samples are already there."""

    def close(self) -> None:
        """Nothing held."""


def boundary_sums(plan: WindowPlan, indices: Sequence[int] | None = None) -> None:
    """Write the boundary sums, re-read flags and lag parts of the counting queries ``indices`` (default: all of the
    plan's) into ``plan``."""
    for index in plan.increase_queries if indices is None else indices:
        _increase(plan, index, plan.queries[index])


def _end_value(plan: WindowPlan, sel: str, *, native: bool = False) -> str:
    window = plan.window
    assert window.start is not None
    within = f"last_over_time({sel}[{promql.duration(window.end - window.start + plan.pad_s)}] @ {at(window.end)})"
    if not window.final or plan.close_at <= window.end:  # nothing closes it later
        return within
    # A native histogram has no smallest sample (min_over_time skips histograms): its first one after the end, which
    # is the smallest between resets (and any reset after it is a later process's); on a store without
    # first_over_time, its last one up to close_at (lag_parts measures that one).
    closing = ("first_over_time" if plan.first_over_time else "last_over_time") if native else "min_over_time"
    # After closing_from (the series' first arrivals, when read by arrival), else after the end, else inside.
    after = [
        f"{closing}({sel}[{promql.duration(plan.close_at - t)}] @ {at(plan.close_at)})" for t in _closing_starts(plan)
    ]
    return f"({' or '.join([*after, within])})"


def _closing_starts(plan: WindowPlan) -> list[float]:
    """After when the samples closing the run's last window are looked for, in order of preference."""
    window = plan.window
    return [plan.closing_from, window.end] if plan.closing_from > window.end else [window.end]


def _base_value(plan: WindowPlan, sel: str) -> str:
    assert plan.window.start is not None
    return f"last_over_time({sel}[{promql.duration(plan.pad_s)}] @ {at(plan.window.start)})"


def _increase(plan: WindowPlan, index: int, query: MetricQuery) -> None:
    window = plan.window
    assert window.start is not None
    matchers = dict(query.matchers)
    span = promql.duration(plan.close_at - window.start + plan.pad_s)
    flags = []
    for name in (stored for primary in primary_names(query) for stored in query.stored(primary)):
        sel = promql.selector(name, matchers, utf8=query.utf8)
        flags.append(f"(resets({sel}[{span}] @ {at(plan.close_at)}) > 0)")
        flags.append(f"({_end_value(plan, sel)} unless {_base_value(plan, sel)})")
    reread = " or ".join(flags)
    targets = ", ".join(TARGET_LABELS)
    plan.add(f"{index}/reread", Part("reread", index), f"group by ({targets}) ({reread})")
    for position, name in enumerate(stored_names(query)):
        by = ", ".join([*query.by, *(["le"] if name in query.bucket_names and name != query.native_name else [])])
        # Each boundary is summed on its own over every series; the re-read targets' share of these sums is taken
        # out client-side (summed_share), so Prometheus touches every series once per boundary and evaluates the
        # re-read selection once per query (measured in bench/suite_promql_scale.py). A server whose series is under
        # two stored forms (its name changed within the range) stands for a boundary by the larger of its two values:
        # its counter's later one. The form that appears is flagged above, and its raw series merged with the other
        # (as_served), so that window's share is its counter's increase across the change, counted once.
        end_value = functools.partial(_end_value, plan, native=name == query.native_name)
        end = roled(query, name, native_only(query, name, end_value), "max")
        base = roled(query, name, native_only(query, name, lambda sel: _base_value(plan, sel)), "max")
        plan.add(f"{index}/end/{position}", Part("end", index, name=name), f"sum by ({by}) ({end})")
        plan.add(f"{index}/start/{position}", Part("start", index, name=name), f"sum by ({by}) ({base})")
    lag_parts(plan, index, query)


def lag_parts(plan: WindowPlan, index: int, query: MetricQuery) -> None:
    """How far from each boundary the samples standing for it lie, the largest over the query's series."""
    window = plan.window
    assert window.start is not None
    primary = primary_names(query)[0]
    last = primary == query.native_name and not plan.first_over_time  # closed by the last one
    lags = [
        _lags(plan, promql.selector(name, dict(query.matchers), utf8=query.utf8), last)
        for name in query.stored(primary)
    ]
    ends, starts = [end for end, _ in lags], [start for _, start in lags]
    plan.add(f"{index}/lag/end", Part("lag", index), f"max({ends[0] if len(ends) == 1 else promql.union(ends)})")
    plan.add(
        f"{index}/lag/start", Part("lag", index), f"max({starts[0] if len(starts) == 1 else promql.union(starts)})"
    )


def _lags(plan: WindowPlan, primary: str, closed_by_last: bool) -> tuple[str, str]:
    """The distance of the samples standing for the window's end and start from them, for the selector ``primary``
    (``closed_by_last``: the run's last window is closed by its last sample up to ``close_at``, a native histogram's on
    a store without ``first_over_time``)."""
    window = plan.window
    assert window.start is not None
    end_lag = f"abs({at(window.end)} - timestamp({primary} @ {at(plan.close_at)}))"
    if window.final and plan.close_at > window.end:
        # The run's last window is closed by each series' first sample after its end (the smallest counter value
        # there; read by arrival, after closing_from), which may lie well before close_at when the window is closed
        # by arrivals: that sample's distance, found by a subquery once per run (a series with none after the end:
        # its last one before).
        resolution = promql.duration(max(plan.pad_s / 20, 0.001))
        firsts = []
        for t in _closing_starts(plan):
            after = f"(timestamp({primary}) > {at(t)})[{promql.duration(plan.close_at - t)}:{resolution}]"
            first = f"{'max' if closed_by_last else 'min'}_over_time({after} @ {at(plan.close_at)})"
            firsts.append(f"({first} - {at(window.end)})")
        end_lag = " or ".join([*firsts, f"abs({at(window.end)} - timestamp({primary} @ {at(window.end)}))"])
    start_lag = f"abs({at(window.start)} - timestamp({primary} @ {at(window.start)}))"
    return end_lag, start_lag


def share_key(query: MetricQuery, series: RawSeries) -> tuple[str, Group] | None:
    """The key of the sum ``series`` is part of (its name and group, a bucket's ``le`` included); ``None`` for a
    bucket without one."""
    group: Group = group_of(series.labels, query.by)
    if series.name in query.bucket_names:
        le = series.labels.get("le")
        if le is None:
            return None
        group = (*group, ("le", le))
    return series.name, group


def summed_share(plan: WindowPlan, index: int, series: RawSeries) -> tuple[tuple[str, Group], float] | None:
    """What ``series`` contributed to query ``index``'s end sum minus its start sum, from its raw samples.

    Mirrors the ``end``/``start`` parts exactly (``last_over_time`` ignores staleness, so raw samples determine it):
    the end value is the last sample in ``(start - pad, end]`` (for a final window the smallest sample in
    ``(closing_from, close_at]``, else in ``(end, close_at]``, when there is one, a native histogram's last one there
    on a store without ``first_over_time``), the start value the last sample in ``(start - pad, start]``.
    """
    window = plan.window
    assert window.start is not None
    key = share_key(plan.queries[index], series)
    if key is None:
        return None
    low = window.start - plan.pad_s
    end_values = [v for t, v in series.samples if low < t <= window.end]
    after: list[float] = []
    for since in _closing_starts(plan):
        after = after or [v for t, v in series.samples if since < t <= plan.close_at]
    start_values = [v for t, v in series.samples if low < t <= window.start]
    closing = after[-1] if after and series.native and not plan.first_over_time else min(after, default=None)
    end = closing if window.final and after else (end_values[-1] if end_values else None)
    if end is None:
        return None
    return key, end - (start_values[-1] if start_values else 0.0)


def exact_window(plan: WindowPlan) -> StepWindow:
    """The window whose exact increase replaces a re-read target's share: the run's last one closed at
    :attr:`WindowPlan.close_at`."""
    window = plan.window
    return StepWindow(window.step, window.start, plan.close_at) if window.final else window


def reread_series(query: MetricQuery, raw: Sequence[RawSeries], chosen: set[Target]) -> list[RawSeries]:
    """The raw series of ``query`` among ``raw`` that belong to the ``chosen`` targets."""
    names = query.read_names()
    return [s for s in raw if target_of(s.labels) in chosen and s.name in names and query.matches(s.labels)]


def reconcile(
    plan: WindowPlan, answer: WindowAnswer, raw: Sequence[RawSeries], indices: Sequence[int] | None = None
) -> None:
    """Replace the re-read targets' share of the sums of the counting queries ``indices`` (default: all of the
    plan's) by their exact increase over the window, from their ``raw`` samples."""
    for index, chosen in answer.reread.items():
        if indices is not None and index not in indices:
            continue
        query = plan.queries[index]
        mine = reread_series(query, raw, chosen)
        summed: Increases = {}
        for series in with_roles(query, mine):  # the sums were taken per role, as with_roles labels
            share = summed_share(plan, index, series)
            if share is not None:
                summed[share[0]] = summed.get(share[0], 0.0) - share[1]
        closed = [_closed_by(s, plan) for s in mine]
        exact = window_increases(query, closed, exact_window(plan)) or {}
        answer.increases[index] = merge_increases(answer.increases.get(index, {}), summed, exact)


def _closed_by(series: RawSeries, plan: WindowPlan) -> RawSeries:
    """For the run's last window: the series' samples up to the one that closes it, its first after
    :attr:`WindowPlan.closing_from` (else its first after the end)."""
    if not plan.window.final:
        return series
    since = next((t for t in _closing_starts(plan) if any(t < s[0] <= plan.close_at for s in series.samples)), None)
    if since is None:
        return series
    kept = []
    for sample in series.samples:
        kept.append(sample)
        if sample[0] > since:
            break
    return RawSeries(series.name, series.labels, kept)
