"""otel-bridge's recording rules: the window source when Prometheus runs them (``prometheus.recording_rules``: auto
finds them loaded, required insists; :mod:`otel_bridge.producers.promql._internal.rules` writes and finds them).

The queries the rules serve read the rules' per-group sums at each boundary: at the time of the rule evaluation that
stands for it (``t_r``). The source waits until the evaluations after both boundaries are stored
(:meth:`RecordingRulesSource.read`; a busy Prometheus stores them seconds after the time they carry), finds them
(:meth:`RuledWindow.rule_times_expression`) and reads both boundaries at them (:meth:`RuledWindow.at_rule_evaluations`);
the targets to re-read and the lag come from the rules' per-target series, and a re-read target's share is reproduced
at the same evaluations, as far as they had its samples (:meth:`RuledWindow.rule_views`). The counting queries the
rules do not serve are read in the same union as the store allows without rules (:mod:`.exact_increase` or
:mod:`.samples`); the run's last window is closed by an evaluation holding every target's first scrape after its end.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.promql._internal.plan import (
    TAG_LABEL,
    CounterParts,
    Part,
    Target,
    WindowAnswer,
    WindowPlan,
    at,
    target_of,
)
from otel_bridge.producers.promql._internal.rules import (
    AGE,
    COUNTED,
    COUNTED_PART,
    GROUP,
    LOOKBACK_S,
    PART_LABEL,
    PRESENT,
    RECORD,
    RESETS,
    TARGET_BY,
    RuleSet,
    primary_selections,
)
from otel_bridge.producers.promql._internal.sources import samples
from otel_bridge.producers.promql._internal.store_reader import StoreReader
from otel_bridge.producers.statistics import Group, Increases, RawSeries, merge_increases, window_increases, with_roles
from otel_bridge.producers.window_source import ReadBudget, WindowReading
from otel_bridge.prometheus import promql
from otel_bridge.prometheus.answers import QueryResult
from otel_bridge.window import StepWindow

__all__ = ["RecordingRulesSource", "RuleView", "RuledWindow", "unruled"]

_CLOSING_SLACK_S = 0.1  # past the evaluation holding a final window's closing scrapes
_RULES_POLL_S = 0.2  # how often the rule evaluation standing for a boundary is asked for, until it is stored
_ENDS_KEPT = 64  # window ends whose rule evaluation is remembered: a step's and its phases'
_RULES_WAIT_INTERVALS = 5.0  # for at most this many rule intervals after a boundary (then the lag says how far off)


class RecordingRulesSource:
    """Reads each window from the recording rules' sums at the evaluations standing for its boundaries (see the
    module docstring); ``rest`` writes the parts of the counting queries the rules do not serve."""

    def __init__(self, reader: StoreReader, counting: Sequence[int], rules: RuleSet, rest: CounterParts) -> None:
        self._reader = reader
        self._counting = list(counting)
        self.rules = rules
        self._rest = unruled(rules, rest)
        self._ends: dict[float, float] = {}  # window end -> the rule evaluation that stood for it (the latest few)
        self._raw = samples.SamplesSource(reader, counting, counters=rest)
        self._stopped = False  # the rules' evaluations stopped (their group removed): every window is read raw

    @property
    def counting(self) -> list[int]:
        """The counting queries this source reads (the rules' and the rest)."""
        return list(self._counting)

    def read(self, window: StepWindow, budget: ReadBudget) -> WindowReading:
        """Wait for the evaluations standing for the window's boundaries, ask the union at them, reconcile the
        re-read targets as far as the evaluations had their samples."""
        if self._stopped:
            return self._raw.read(window, budget)
        reader = self._reader
        plan = reader.plan(window, self._counting, closing_s=self._closing_s(), counters=self._rest)
        ruled = RuledWindow(plan, self.rules)
        schedule = reader.setup.schedule
        # As long as an evaluation takes (twice: the one running at the end, then one after it), within the rule
        # intervals a boundary is waited for at most: a group claiming an evaluation of 1e9 s must not hold each step.
        storing = min(2.0 * self.rules.evaluation_s, _RULES_WAIT_INTERVALS * self.rules.interval_s)
        reader.wait_until_stored(plan.close_at, max(schedule.storing_delay_s, storing))
        if ruled.ruled:
            times = self._rule_evaluations(ruled, budget.waits_until)
            if "latest" not in times and not reader.closed.is_set():
                return self._stop(window, budget)
            ruled.at_rule_evaluations(times)
        answer = reader.ask(plan, ruled.read)
        reader.reread(plan, answer, functools.partial(self._reconcile, ruled))
        return reader.reading(plan, answer)

    def _stop(self, window: StepWindow, budget: ReadBudget) -> WindowReading:
        """No evaluation of the rules is stored any more, within Prometheus' lookback and the wait for one (their
        group was removed or its rules' series dropped): this window and every later one are read from the raw
        series, as without rules, and a WARNING says so once."""
        self._stopped = True
        self._reader.warn.warning(
            "rules-stopped",
            "step %s: Prometheus stores no evaluation of otel-bridge's recording rules any more (the group %r was "
            "removed or stopped): this and later steps sum the raw series; restart the run to read the rules again",
            window.step,
            GROUP,
        )
        return self._raw.read(window, budget)

    def on_boundary(self, t: float) -> None:
        """Nothing to do: Prometheus evaluates the rules on its own schedule."""

    def close(self) -> None:
        """Nothing held."""

    def _closing_s(self) -> float:
        """How far after a final window's end the evaluation closing it may lie: the first that has stored every
        target's first scrape after the end."""
        schedule = self._reader.setup.schedule
        return schedule.interval_s + schedule.storing_delay_s + self.rules.interval_s + _CLOSING_SLACK_S

    def _rule_evaluations(self, plan: RuledWindow, budget_end: float) -> dict[str, float]:
        """The rule evaluations standing for the window's boundaries: ``{"start": t_rs, "end": t_re}``.

        A boundary is represented by the last evaluation at or before it. Prometheus stores an evaluation's samples
        when the rule is done, seconds after the time they carry on a busy server, so the bridge waits (a few rule
        intervals at most) until an evaluation after the boundary is stored: evaluations of one group run one after
        the other, so none at or before the boundary is still to come. The run's last window is closed by an
        evaluation holding every target's first scrape after its end, waited for within half the step's budget
        (``delivery.produce_timeout_s``). When a wait runs out, the last stored evaluation stands for the boundary
        (the lag says how far off it is), and the next window starts from the very evaluation this one ended with,
        so the steps still add up exactly to the run.
        """
        reader = self._reader
        schedule = reader.setup.schedule
        window = plan.window
        assert window.start is not None
        # The window that ended last at or before this start (a step's, or one of its phases').
        previous = max(((end, t) for end, t in self._ends.items() if end <= window.start), default=None)
        closing = window.end + schedule.interval_s + schedule.storing_delay_s if plan.close_at > window.end else None
        clock = reader.setup.clock  # the plan's times are the store's
        budget_end += clock.offset_s
        # The last window waits as long as the step's budget allows: nothing after it would count what it misses.
        deadline = budget_end if closing is not None else plan.close_at + _RULES_WAIT_INTERVALS * self.rules.interval_s
        deadline = min(deadline, budget_end)
        while True:
            times = plan.read_rule_times(
                reader.client.query(plan.rule_times_expression(start=True), time=max(clock.now(), plan.close_at))
            )
            latest = times.get("latest")
            if (latest is not None and latest > plan.close_at) or clock.now() >= deadline or reader.closed.is_set():
                break
            reader.closed.wait(min(_RULES_POLL_S, max(deadline - clock.now(), 0.0)) or _RULES_POLL_S)
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

    def _reconcile(self, ruled: RuledWindow, plan: WindowPlan, answer: WindowAnswer, raw: Sequence[RawSeries]) -> None:
        """The re-read targets' shares of the ruled queries taken at the evaluations, as far as they had their
        samples (the others' as :mod:`.samples` takes them)."""
        targets = {t for targets in answer.reread.values() for t in targets}
        views, unknown = ruled.rule_views(raw, targets) if ruled.ruled else ({}, set())
        for job, instance in sorted(unknown):
            self._reader.warn.warning(
                f"rule-view:{job}/{instance}",
                "step %s: could not tell which samples of %s (job %s) otel-bridge's recording rules had at the "
                "step's boundaries (their %s matches none of its sample times); its share is taken as if they had "
                "all, so a count may land in a neighbouring step",
                plan.window.step,
                instance,
                job,
                COUNTED,
            )
        for index, chosen in answer.reread.items():
            if index not in ruled.ruled:
                continue
            query = plan.queries[index]
            mine = samples.reread_series(query, raw, chosen)
            summed: Increases = {}
            for series in with_roles(query, mine):  # the sums were taken per role, as with_roles labels
                share = ruled.summed_share(index, series, answer, views.get(target_of(series.labels)))
                if share is not None:
                    summed[share[0]] = summed.get(share[0], 0.0) - share[1]
            exact: Increases = {}
            for target in sorted(chosen):
                own = [s for s in mine if target_of(s.labels) == target]
                view = views.get(target)
                if own and view is not None:
                    exact = merge_increases(exact, ruled.ruled_exact(index, own, answer, view))
            answer.increases[index] = merge_increases(answer.increases.get(index, {}), summed, exact)
        samples.reconcile(plan, answer, raw, [i for i in plan.increase_queries if i not in ruled.ruled])


def unruled(rules: RuleSet, rest: CounterParts) -> CounterParts:
    """``rest``'s parts, for the counting queries the ``rules`` do not serve (the ruled ones are written by
    :meth:`RuledWindow.at_rule_evaluations`, once the evaluations are known)."""

    def write(plan: WindowPlan, indices: Sequence[int] | None = None, /) -> None:
        chosen = plan.increase_queries if indices is None else indices
        rest(plan, [i for i in chosen if i not in rules.records])

    return write


class RuledWindow:
    """One window's union (``plan``) with the ruled queries read at the rule evaluations standing for its
    boundaries (see the module docstring)."""

    def __init__(self, plan: WindowPlan, rules: RuleSet) -> None:
        self.plan = plan
        self.ruled = [i for i in plan.increase_queries if i in rules.records]
        self._records = dict(rules.records)
        self.rule_times: dict[str, float] = {}

    @property
    def window(self) -> StepWindow:
        """The plan's window."""
        return self.plan.window

    @property
    def close_at(self) -> float:
        """The plan's :attr:`WindowPlan.close_at`."""
        return self.plan.close_at

    @property
    def queries(self) -> list[MetricQuery]:
        """The plan's queries."""
        return self.plan.queries

    @property
    def expression(self) -> str | None:
        """The plan's union."""
        return self.plan.expression

    def reread_expression(self, targets: set[Target]) -> str | None:
        """The plan's re-read (:meth:`WindowPlan.reread_expression`), reaching the evaluations' samples."""
        return self.plan.reread_expression(targets)

    def rule_times_expression(self, *, start: bool) -> str:
        """The query (evaluate it now) for the rule evaluations around this window: ``end``, the last evaluation
        stored at or before :attr:`close_at`; ``latest``, the last one stored; with ``start``, the last one stored at
        or before the window's start (read by :meth:`read_rule_times`).

        Prometheus stamps an evaluation with its scheduled time and stores the rule's samples of it together, when
        the rule is done: on a busy server seconds after the time they stand for. An evaluation's time is the
        smallest of the latest sample times of the rule's series (a part with no series at that evaluation wrote
        staleness markers, so it does not hold it back).
        """
        times: list[tuple[str, str]] = [("end", f" @ {at(self.close_at)}"), ("latest", "")]
        if start:
            assert self.window.start is not None
            times.append(("start", f" @ {at(self.window.start)}"))
        return promql.union(
            [promql.tag_series(f"min(timestamp({RECORD}{when}))", TAG_LABEL, which) for which, when in times]
        )

    @staticmethod
    def read_rule_times(result: QueryResult) -> dict[str, float]:
        """``{"end": ..., "latest": ..., "start": ...}`` from :meth:`rule_times_expression`'s answer (a time with no
        evaluation stored within Prometheus' lookback is missing)."""
        return {
            series.labels[TAG_LABEL]: series.samples[-1][1]
            for series in result.series
            if series.samples and series.labels.get(TAG_LABEL) in ("end", "latest", "start")
        }

    def at_rule_evaluations(self, times: Mapping[str, float]) -> None:
        """Read the ruled queries at the rule evaluations ``{"start": t_rs, "end": t_re}`` that stand for the window's
        boundaries; without both, the ruled queries have no answer for this window."""
        if not self.ruled or "start" not in times or "end" not in times:
            return
        self.rule_times = {"start": times["start"], "end": times["end"]}
        self.plan.reread_until = max(self.close_at, times["end"])
        self.plan.reread_from = times["start"] - LOOKBACK_S  # the re-read targets' shares reach back that far
        self.plan.reread_names = [RECORD]  # COUNTED: which of their samples each rule evaluation had (rule_views)
        for index in self.ruled:
            self._rule_increase(index, self.queries[index])
        self._rule_targets()

    def _rule_increase(self, index: int, query: MetricQuery) -> None:
        histogram = query.kind == "histogram" and query.ratio is None
        for position, (name, record) in enumerate(zip(query.series_names(), self._records[index], strict=True)):
            by = ", ".join([*query.by, *(["le"] if histogram and position == 0 else [])])
            for kind in ("end", "start"):
                expr = f"sum by ({by}) ({record} @ {at(self.rule_times[kind])})"
                self.plan.add(f"{index}/{kind}/{position}", Part(kind, index, name=name), expr)

    def _rule_targets(self) -> None:
        start, end = self.rule_times["start"], self.rule_times["end"]
        for which, t in (("start", start), ("end", end)):
            self.plan.add(f"rules/age/{which}", Part("source"), f"max({AGE} @ {at(t)})")
        # Over-flagging costs a replica's raw samples; missing a restart would cost exactness: the resets of the five
        # minutes before the start count too (a re-read target's share reaches back that far).
        resets = f"count_over_time({RESETS}[{promql.duration(end - start + LOOKBACK_S)}] @ {at(end)})"
        at_start, at_end = f"{PRESENT} @ {at(start)}", f"{PRESENT} @ {at(end)}"
        flags = f"({at_end} unless {at_start}) or ({at_start} unless {at_end}) or {resets}"
        self.plan.add("rules/reread", Part("source"), f"group by ({TARGET_BY}) ({flags})")

    def read(self, result: QueryResult) -> WindowAnswer:
        """The union's answer (:meth:`WindowPlan.read`), with the ruled queries' re-read targets and lag from the
        rules' per-target series (none of their increases without an evaluation for each boundary)."""
        answer = self.plan.read(result)
        answer.rule_times = dict(self.rule_times)
        if self.ruled:
            ages: dict[str, float] = {}
            reread: set[Target] = set()
            for series in result.series:
                tag = series.labels.get(TAG_LABEL, "")
                if not series.samples or self.plan.parts.get(tag) != Part("source"):
                    continue
                if tag.startswith("rules/age/"):
                    ages[tag.removeprefix("rules/age/")] = series.samples[-1][1]
                elif tag == "rules/reread":
                    reread.add(target_of(series.labels))
            self._read_rule_targets(answer, ages, reread)
        return answer

    def _read_rule_targets(self, answer: WindowAnswer, ages: Mapping[str, float], reread: set[Target]) -> None:
        """The ruled queries' lag (``ages``: of the oldest sample each evaluation summed) and re-read targets
        (``reread``), from the rules' per-target series."""
        times = answer.rule_times
        if "start" not in times or "end" not in times:
            # No rule evaluation stored within Prometheus' lookback of a boundary (the rules just started, or stopped):
            # the ruled queries' increases cannot be told from this window.
            for index in self.ruled:
                answer.increases.pop(index, None)
                answer.answered.discard(index)
            return
        window = self.window
        assert window.start is not None
        for which, boundary in (("start", window.start), ("end", window.end)):
            # The samples an evaluation at t summed lie in [t - age, t]: the farther end of that span from the boundary.
            oldest = times[which] - max(ages.get(which, 0.0), 0.0)
            lag = max(abs(times[which] - boundary), abs(oldest - boundary))
            answer.lag_s = max(answer.lag_s or 0.0, lag)
        if reread:
            for index in self.ruled:
                answer.reread.setdefault(index, set()).update(reread)

    def boundaries(self, index: int, answer: WindowAnswer) -> tuple[float, float]:
        """The times that stand for query ``index``'s window boundaries: the rule evaluations, or the window's own."""
        assert self.window.start is not None
        if index in self.ruled:
            return answer.rule_times["start"], answer.rule_times["end"]
        return self.window.start, self.close_at

    def summed_share(
        self, index: int, series: RawSeries, answer: WindowAnswer, view: RuleView | None = None
    ) -> tuple[tuple[str, Group], float] | None:
        """What ``series`` contributed to query ``index``'s end sum minus its start sum, from its raw samples: for a
        ruled query the last sample in the five minutes up to each boundary's rule evaluation, of those that
        evaluation had (``view``, from :meth:`rule_views`; all of them without one); the others as
        :func:`.samples.summed_share` takes it."""
        if index not in self.ruled:
            return samples.summed_share(self.plan, index, series)
        key = samples.share_key(self.queries[index], series)
        if key is None:
            return None
        t_start, t_end = self.boundaries(index, answer)
        had = view or RuleView(t_start, t_end)
        base = _last_within(series, t_start, LOOKBACK_S, had.start)
        end = _last_within(series, t_end, LOOKBACK_S, had.end)
        if base is None and end is None:
            return None
        return key, (end or 0.0) - (base or 0.0)

    def exact_window(self, index: int, answer: WindowAnswer) -> StepWindow:
        """The window whose exact increase replaces a re-read target's share for query ``index``."""
        if index in self.ruled:
            start, end = self.boundaries(index, answer)
            return StepWindow(self.window.step, start, end)
        return samples.exact_window(self.plan)

    def rule_views(self, raw: Sequence[RawSeries], targets: set[Target]) -> tuple[dict[Target, RuleView], set[Target]]:
        """Which of each re-read target's samples the rule evaluations standing for the boundaries had, and the
        targets for which that could not be told (taken to have had all).

        An evaluation at ``t`` sums the samples stored when it ran: on a busy node a scrape stamped before ``t`` may
        be stored after it (as may a remote-written sample), and is then counted from the next evaluation on. A
        target's own samples are stored in time order, so an evaluation had those up to some time ``u <= t``:
        :data:`~otel_bridge.producers.promql._internal.rules.COUNTED`, the sum of its primary counters' last samples it
        had, tells ``u`` (the latest of its sample times whose sum from the raw series matches). Its share of the rules'
        sums and its exact increase are then both taken up to ``u``, so they agree with what the rules counted, and
        the samples after ``u`` are counted by the next window, which starts there.
        """
        start, end = self.rule_times.get("start"), self.rule_times.get("end")
        if start is None or end is None:
            return {}, set()
        selections = list(primary_selections(self.queries).values())
        counted: dict[Target, RawSeries] = {}
        primary: dict[Target, list[RawSeries]] = {}
        for series in raw:
            target = target_of(series.labels)
            if target not in targets:
                continue
            if series.name == RECORD and series.labels.get(PART_LABEL) == COUNTED_PART:
                counted[target] = series
            for name, query in selections:  # once per selection it falls in, as the rule sums it
                if series.name == name and query.matches(series.labels):
                    primary.setdefault(target, []).append(series)
        views: dict[Target, RuleView] = {}
        unknown: set[Target] = set()
        for target in sorted(targets):
            sums = {t: _value_at(counted[target], t) if target in counted else None for t in (start, end)}
            had = [_had_until(primary.get(target, []), t, sums[t]) for t in (start, end)]
            if had[0] is None or had[1] is None:
                unknown.add(target)
            views[target] = RuleView(had[0] if had[0] is not None else start, had[1] if had[1] is not None else end)
        return views, unknown

    def ruled_exact(self, index: int, series: Sequence[RawSeries], answer: WindowAnswer, view: RuleView) -> Increases:
        """One re-read target's exact increase for ruled query ``index`` between what the evaluations standing for
        the window's boundaries had of it (``view``): from its last sample they had at the start (or, with none in
        their five minutes, its first sample after) to its last one they had at the end."""
        t_start, _ = self.boundaries(index, answer)
        low = t_start - LOOKBACK_S
        kept = [RawSeries(s.name, s.labels, [(t, v) for t, v in s.samples if low < t <= view.end]) for s in series]
        return (
            window_increases(self.queries[index], kept, StepWindow(self.window.step, max(view.start, low), view.end))
            or {}
        )


@dataclass(frozen=True, slots=True)
class RuleView:
    """Up to which sample time the rule evaluations standing for a window's start and end had a target's samples
    (:meth:`WindowPlan.rule_views`): the evaluation's own time when it had them all."""

    start: float
    end: float


def _last_within(series: RawSeries, t: float, lookback_s: float, until: float | None = None) -> float | None:
    # In whole milliseconds, as Prometheus compares them: (t - lookback, t], and no later than ``until``.
    last = round((t if until is None else min(t, until)) * 1000)
    values = [
        v for ts, v in series.samples if round(ts * 1000) <= last and round((t - ts) * 1000) < round(lookback_s * 1000)
    ]
    return values[-1] if values else None


def _value_at(series: RawSeries, t: float) -> float | None:
    """``series``' sample at exactly ``t`` (a rule evaluation's time), if it has one."""
    found = [v for ts, v in series.samples if round(ts * 1000) == round(t * 1000)]
    return found[-1] if found else None


def _had_until(series: Sequence[RawSeries], t: float, counted: float | None) -> float | None:
    """The latest time ``u <= t`` such that the last samples of ``series`` in ``(t - 5m, u]`` sum to ``counted``
    (``None``: none of them, i.e. ``t - 5m``); ``t`` itself when every sample was had; ``None`` when no time fits."""
    times = sorted(
        {ts for s in series for ts, _ in s.samples if 0 <= round((t - ts) * 1000) < round(LOOKBACK_S * 1000)}
    )
    for until in [t, *reversed(times[:-1])]:  # all of them, then up to each earlier sample time
        values = [_last_within(s, t, LOOKBACK_S, until) for s in series]
        had = [v for v in values if v is not None]
        if (counted is None and not had) or (
            counted is not None and had and math.isclose(math.fsum(had), counted, rel_tol=1e-12, abs_tol=1e-9)
        ):
            return until
    if counted is None:
        return t - LOOKBACK_S
    return None
