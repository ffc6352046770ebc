"""One window's instant query for Prometheus, and how to read its answer.

The bridge asks Prometheus one instant query per step (sent in several under a store's longest query:
:meth:`WindowPlan.expressions`): the union (``or``) of tagged parts, each answering one thing, so the answer's size
grows with the configured metrics and label groups, not with replicas, buckets or samples:

- a gauge statistic: ``sum by (...) (max_over_time(x[<window>]))``, as Prometheus computes it; a gauge's idle
  seconds: ``sum by (...) (<window seconds> * (1 - avg_over_time(x[<window>]) / <full scale>))``, as
  :func:`~otel_bridge.producers.statistics.idle_seconds` computes it;
- a raw PromQL expression, as written;
- a counter's (or histogram bucket's, ``_sum``'s, ``_count``'s) value at each boundary, summed per label group in
  Prometheus: ``sum by (...) (last_over_time(x[...] @ end))`` and ``... @ start``, i.e. the last sample at or before
  each boundary; their difference is the window's increase for every series whose counter did not reset;
- or, where the store has an exact increase of its own (:mod:`otel_bridge.producers.promql.store`: Prometheus'
  ``increase(x[w] anchored)``, MetricsQL's ``increase``), that increase summed per label group: resets are corrected
  per series inside the store, so nothing is re-read (not for the run's last window, closed by the sample after it);
- the targets to read sample by sample: those whose counters reset during the window (``resets(...) > 0``) or whose
  series have no sample just before the window (they appeared, or came back after being down). Their series are
  fetched raw by a second request (looking back up to :data:`REREAD_LOOKBACK_S` for their baseline); their share of
  the sums above (:meth:`WindowPlan.summed_share`) is replaced by their exact increase, so a restart costs the bytes
  of that one replica, and exactness is kept;
- the largest distance between a boundary and the sample that stood for it (``timestamp(x @ t)``);
- the targets whose scrapes failed during the window (Prometheus' own ``up``), and those whose last scrape before the
  window's end failed (``unread``: Prometheus has no reading of them at the end);
- which of the targets the bridge keeps health keys for (``watched``: those that failed before) Prometheus still
  scrapes at the window's end (``up`` there, an instant selector: a target Prometheus dropped has a staleness marker),
  so the keys of a target that left can go.

With the bridge's recording rules loaded (:mod:`otel_bridge.producers.promql.rules`), the queries they serve read
the rules' per-group sums at each boundary instead: at the time of the rule evaluation that stands for it (``t_r``,
given to :meth:`WindowPlan.at_rule_evaluations` before the union is asked, so both boundaries are read at known
evaluations: :meth:`WindowPlan.rule_times_expression` finds them); the targets to re-read and the lag come from the
rules' per-target series, and a re-read target's share is reproduced at the same evaluations, as far as they had
its samples (:meth:`WindowPlan.rule_views`).

The run's last window (:attr:`StepWindow.final`) is closed by the first sample after its end, ``closing_s`` later at
the latest (for a counter between resets that is the smallest sample after the end: ``min_over_time``).

Every part carries a label ``otel_bridge_q`` naming what it answers (``3/max``: metric 3's max; ``2/increase/0``,
``2/reread``, ``2/lag/end``, ``down``, ``present``); series with a value the plan did not issue are ignored.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from otel_bridge.errors import QueryTooLongError
from otel_bridge.producers.metric_set import ROLE_LABEL, MetricQuery
from otel_bridge.producers.promql.rules import (
    AGE,
    COUNTED,
    LOOKBACK_S,
    PRESENT,
    RESETS,
    TARGET_BY,
    RuleSet,
    primary_selections,
)
from otel_bridge.producers.statistics import Group, Increases, RawSeries, StatPoint, group_of, window_increases
from otel_bridge.prometheus import promql
from otel_bridge.prometheus.answers import QueryResult
from otel_bridge.window import IDLE_STAT, StepWindow

TAG_LABEL = "otel_bridge_q"
WINDOW_PLACEHOLDER = "$window"
TARGET_LABELS = ("job", "instance")
_OVER_TIME = {
    "last": "last_over_time",
    "min": "min_over_time",
    "max": "max_over_time",
    "mean": "avg_over_time",
}
_AGGREGATE = {"sum": "sum", "mean": "avg", "max": "max", "min": "min"}

REREAD_LOOKBACK_S = 300.0
"""How far before a window a re-read target's baseline sample may lie (Prometheus' own lookback): a target that was
down for a while is re-read when it comes back, and what it counted meanwhile lands in that step, not nowhere."""

Target = tuple[str, str]
"""``(job, instance)`` of a Prometheus target."""


def target_of(labels: Mapping[str, str]) -> Target:
    """The target a series with ``labels`` belongs to."""
    return (labels.get("job", ""), labels.get("instance", ""))


class ExactIncrease(Protocol):
    """``(selector, range length, evaluation time, present=range) -> expression``: a store's own exact increase
    (:meth:`otel_bridge.producers.promql.store.Store.exact_increase`)."""

    def __call__(self, selector: str, length: str, at: str, *, present: str | None = None) -> str: ...


@dataclass(frozen=True, slots=True)
class Part:
    """What one tagged part of the union answers."""

    kind: Literal[
        "stat",
        "promql",
        "increase",
        "end",
        "start",
        "reread",
        "lag",
        "down",
        "unread",
        "present",
        "rule_age",
        "rule_reread",
    ]
    index: int = -1
    name: str = ""
    stat: str | None = None


@dataclass
class WindowAnswer:
    """The union's answer, read: per query index, statistic points, increases and targets to re-read raw."""

    points: dict[int, list[StatPoint]] = field(default_factory=dict)
    increases: dict[int, Increases] = field(default_factory=dict)
    reread: dict[int, set[Target]] = field(default_factory=dict)
    answered: set[int] = field(default_factory=set)
    lag_s: float | None = None
    failed_scrapes: dict[Target, float] = field(default_factory=dict)
    unread: set[Target] = field(default_factory=set)
    """The targets whose last scrape at or before the window's end failed (asked with ``report_unread``)."""
    present: set[str] | None = None
    """The plan's ``watched`` instances Prometheus still scrapes at the window's end; ``None`` when none are watched."""
    rule_times: dict[str, float] = field(default_factory=dict)
    """``{"start": t_rs, "end": t_re}``: the rule evaluations that stand for the boundaries (recording rules), as
    given to :meth:`WindowPlan.at_rule_evaluations`."""
    rule_ages: dict[str, float] = field(default_factory=dict)
    rule_reread: set[Target] = field(default_factory=set)


def primary_names(query: MetricQuery) -> tuple[str, ...]:
    """The sample names whose resets or late appearance mark a target for re-reading (one series per label set)."""
    if query.ratio is not None:
        return query.ratio
    names = query.series_names()
    return names[-1:] if query.kind == "histogram" else names


def _at(t: float) -> str:
    return f"{t:.3f}"


class WindowPlan:
    """The instant union for ``window`` and the meaning of each tag (see the module docstring).

    ``increase_queries`` are the indices of the counter, histogram and ratio queries whose increases Prometheus sums
    (the others are read elsewhere, e.g. by boundary scrapes). ``pad_s`` is how far before a boundary its sample may
    lie (2 scrape intervals); ``closing_s`` how far after the end of a final window its closing sample may lie.
    ``watched`` are the instances whose presence in Prometheus the answer reports (:attr:`WindowAnswer.present`);
    ``report_unread`` asks for the targets whose last scrape before the window's end failed
    (:attr:`WindowAnswer.unread`).
    """

    def __init__(
        self,
        queries: Sequence[MetricQuery],
        window: StepWindow,
        *,
        increase_queries: Sequence[int],
        pad_s: float,
        closing_s: float,
        report_down: bool = True,
        report_unread: bool = False,
        rules: RuleSet | None = None,
        watched: Sequence[str] = (),
        exact_increase: ExactIncrease | None = None,
    ) -> None:
        self.window = window
        self.watched = sorted({instance for instance in watched if instance})
        self.queries = list(queries)
        self.pad_s = pad_s
        self.increase_queries = [i for i in increase_queries if window.start is not None]
        self.ruled = [i for i in self.increase_queries if rules is not None and i in rules.records]
        self._records = dict(rules.records) if rules is not None else {}
        self.rule_times: dict[str, float] = {}
        self.close_at = (
            window.end + closing_s if window.final and self.increase_queries and closing_s > 0 else window.end
        )
        self.reread_until = self.close_at
        """Until when a re-read target's raw samples are fetched: :attr:`close_at`, or a later closing evaluation."""
        self.parts: dict[str, Part] = {}
        self._exprs: list[str] = []
        self._tags: list[str] = []
        for index, query in enumerate(self.queries):
            if query.promql is not None:
                self._raw_promql(index, query)
            elif query.kind == "gauge" and query.ratio is None:
                self._gauge(index, query)
        for index in self.increase_queries:
            if index in self.ruled:
                continue  # read at the rule evaluations, once they are known (at_rule_evaluations)
            if exact_increase is not None and not window.final:
                self._exact_increase(index, self.queries[index], exact_increase)
            else:
                self._increase(index, self.queries[index])
        if report_down and window.start is not None:
            w = promql.duration(max(window.end - window.start, 0.001))
            self._add("down", Part("down"), f"(count_over_time(up[{w}]) - sum_over_time(up[{w}])) > 0")
        if report_unread:
            pad = promql.duration(pad_s)
            self._add("unread", Part("unread"), f"last_over_time(up[{pad}] @ {_at(window.end)}) == 0")
        if self.watched:
            watched = promql.value_alternation(self.watched)
            self._add("present", Part("present"), f"group by (instance) (up{{instance=~{watched}}})")

    @property
    def expression(self) -> str | None:
        """The union to evaluate at ``time=window.end``; ``None`` when there is nothing to ask."""
        return promql.union(self._exprs) if self._exprs else None

    def expressions(self, max_bytes: int | None, limit: str = "the store's longest query") -> list[str]:
        """The union in as few queries as a store that refuses queries longer than ``max_bytes`` takes (one without
        a limit): whole parts packed in order. A part longer than the limit alone cannot be sent: a
        :class:`QueryTooLongError` naming ``limit`` (the store's setting) and the size it would take."""
        if max_bytes is None or (self.expression is not None and len(self.expression.encode()) <= max_bytes):
            return [self.expression] if self.expression is not None else []
        size, tag = max((len(expr.encode()), tag) for expr, tag in zip(self._exprs, self._tags, strict=True))
        if size > max_bytes:
            raise QueryTooLongError(
                f"one part of step {self.window.step}'s query ({TAG_LABEL}={tag!r}) is {size} bytes, longer than "
                f"{limit} ({max_bytes} bytes), and a part cannot be split further: raise it to at least {size} "
                "bytes, or shorten that metric's matchers and label groups",
                size_bytes=size,
                limit_bytes=max_bytes,
            )
        groups: list[list[str]] = []
        for expr in self._exprs:
            if groups and len(promql.union([*groups[-1], expr]).encode()) <= max_bytes:
                groups[-1].append(expr)
            else:
                groups.append([expr])
        return [promql.union(group) for group in groups]

    def _add(self, tag: str, part: Part, expr: str) -> None:
        self.parts[tag] = part
        self._tags.append(tag)
        self._exprs.append(promql.tag_series(expr, TAG_LABEL, tag))

    def _raw_promql(self, index: int, query: MetricQuery) -> None:
        assert query.promql is not None
        window = self.window
        if WINDOW_PLACEHOLDER in query.promql and window.start is None:
            return
        length = promql.duration(max(window.seconds if window.seconds is not None else self.pad_s, 0.001))
        self._add(f"{index}/", Part("promql", index), query.promql.replace(WINDOW_PLACEHOLDER, length))

    def _gauge(self, index: int, query: MetricQuery) -> None:
        assert query.name is not None
        window = self.window
        length = promql.duration(max(window.seconds if window.seconds is not None else self.pad_s, 0.001))
        stats = query.stats if window.start is not None else tuple(s for s in query.stats if s == "last")
        name = query.name
        aggregate = _AGGREGATE[query.agg] + (f" by ({', '.join(query.by)})" if query.by else "")
        for stat in stats:
            per_series = functools.partial(
                _over_window, stat, length=length, seconds=window.seconds, full_scale=query.full_scale
            )
            expr = f"{aggregate} ({roled(query, name, per_series)})"
            self._add(f"{index}/{stat}", Part("stat", index, stat=stat), expr)

    def _end_value(self, sel: str) -> str:
        window = self.window
        assert window.start is not None
        within = f"last_over_time({sel}[{promql.duration(window.end - window.start + self.pad_s)}] @ {_at(window.end)})"
        if not window.final or self.close_at <= window.end:  # no targets known: nothing closes it later (remote write)
            return within
        after = promql.duration(self.close_at - window.end)
        return f"(min_over_time({sel}[{after}] @ {_at(self.close_at)}) or {within})"

    def _base_value(self, sel: str) -> str:
        assert self.window.start is not None
        return f"last_over_time({sel}[{promql.duration(self.pad_s)}] @ {_at(self.window.start)})"

    def _increase(self, index: int, query: MetricQuery) -> None:
        window = self.window
        assert window.start is not None
        matchers = dict(query.matchers)
        span = promql.duration(self.close_at - window.start + self.pad_s)
        flags = []
        for name in primary_names(query):
            sel = promql.selector(name, matchers, utf8=query.utf8)
            flags.append(f"(resets({sel}[{span}] @ {_at(self.close_at)}) > 0)")
            flags.append(f"({self._end_value(sel)} unless {self._base_value(sel)})")
        reread = " or ".join(flags)
        targets = ", ".join(TARGET_LABELS)
        self._add(f"{index}/reread", Part("reread", index), f"group by ({targets}) ({reread})")
        histogram = query.kind == "histogram" and query.ratio is None
        for position, name in enumerate(query.series_names()):
            by = ", ".join([*query.by, *(["le"] if histogram and position == 0 else [])])
            # Each boundary is summed on its own over every series; the re-read targets' share of these sums is taken
            # out client-side (boundary_values), so Prometheus touches every series once per boundary and evaluates
            # the re-read selection once per query (measured in bench/suite_promql_scale.py).
            end, base = roled(query, name, self._end_value), roled(query, name, self._base_value)
            self._add(f"{index}/end/{position}", Part("end", index, name=name), f"sum by ({by}) ({end})")
            self._add(f"{index}/start/{position}", Part("start", index, name=name), f"sum by ({by}) ({base})")
        self._lag(index, query)

    def _lag(self, index: int, query: MetricQuery) -> None:
        """How far from each boundary the samples standing for it lie, the largest over the query's series."""
        window = self.window
        assert window.start is not None
        primary = promql.selector(primary_names(query)[0], dict(query.matchers), utf8=query.utf8)
        end_lag = f"abs({_at(window.end)} - timestamp({primary} @ {_at(self.close_at)}))"
        if window.final and self.close_at > window.end:
            # The run's last window is closed by each series' first sample after its end (the smallest counter value
            # there), which may lie well before close_at when the window is closed by arrivals: that sample's distance,
            # found by a subquery once per run (a series with none after the end: its last one before).
            after = promql.duration(self.close_at - window.end)
            resolution = promql.duration(max(self.pad_s / 20, 0.001))
            after_end = f"(timestamp({primary}) > {_at(window.end)})[{after}:{resolution}]"
            first = f"min_over_time({after_end} @ {_at(self.close_at)})"
            end_lag = (
                f"({first} - {_at(window.end)}) or abs({_at(window.end)} - timestamp({primary} @ {_at(window.end)}))"
            )
        start_lag = f"abs({_at(window.start)} - timestamp({primary} @ {_at(window.start)}))"
        self._add(f"{index}/lag/end", Part("lag", index), f"max({end_lag})")
        self._add(f"{index}/lag/start", Part("lag", index), f"max({start_lag})")

    def _exact_increase(self, index: int, query: MetricQuery, exact_increase: ExactIncrease) -> None:
        """The store's own exact increase of every series over the window, summed per group (``anchored``: the last
        sample at or before the start to the last one in the window, resets corrected, no extrapolation), so there is
        nothing to re-read; the lag parts as for the boundary sums."""
        window = self.window
        assert window.start is not None
        # Both ends in whole milliseconds, as _at() writes them, so the range starts exactly at the start's _at().
        length = promql.duration((round(window.end * 1000) - round(window.start * 1000)) / 1000)
        histogram = query.kind == "histogram" and query.ratio is None
        # A window shorter than two scrape intervals may hold no sample of a live series (increase() then answers
        # nothing for it): those add 0, so the key stays.
        present = promql.duration(self.pad_s) if window.end - window.start < self.pad_s else None
        end = _at(window.end)
        for position, name in enumerate(query.series_names()):
            by = ", ".join([*query.by, *(["le"] if histogram and position == 0 else [])])
            increase = roled(query, name, lambda sel: exact_increase(sel, length, end, present=present))
            self._add(f"{index}/increase/{position}", Part("increase", index, name=name), f"sum by ({by}) ({increase})")
        self._lag(index, query)

    def rule_times_expression(self, *, start: bool) -> str:
        """The query (evaluate it now) for the rule evaluations around this window: ``end``, the last evaluation
        stored whole at or before :attr:`close_at`; ``latest``, the last one stored whole; with ``start``, the last
        one stored whole at or before the window's start (read by :meth:`read_rule_times`).

        An evaluation is stored whole when every rule of the group has its samples at its time: Prometheus stamps an
        evaluation with its scheduled time and stores each rule's samples when that rule is done, so on a busy server
        they land seconds after the time they stand for, one rule after the other. Its time is the smallest of the
        latest sample times of the group's series (a rule with no series at that evaluation wrote staleness markers,
        so it does not hold it back).
        """
        names = sorted({record for index in self.ruled for record in self._records[index]} | {PRESENT, COUNTED, AGE})
        times: list[tuple[str, str]] = [("end", f" @ {_at(self.close_at)}"), ("latest", "")]
        if start:
            assert self.window.start is not None
            times.append(("start", f" @ {_at(self.window.start)}"))

        def stored_whole(at: str) -> str:  # timestamp() drops the names: each record's own label keeps them apart
            each = [
                promql.tag_series(f"min(timestamp({name}{at}))", "otel_bridge_record", str(i))
                for i, name in enumerate(names)
            ]
            return f"min({promql.union(each)})"

        return promql.union([promql.tag_series(stored_whole(at), TAG_LABEL, which) for which, at in times])

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
        self.reread_until = max(self.close_at, times["end"])
        for index in self.ruled:
            self._rule_increase(index, self.queries[index])
        self._rule_targets()

    def _rule_increase(self, index: int, query: MetricQuery) -> None:
        histogram = query.kind == "histogram" and query.ratio is None
        for position, (name, record) in enumerate(zip(query.series_names(), self._records[index], strict=True)):
            by = ", ".join([*query.by, *(["le"] if histogram and position == 0 else [])])
            for kind in ("end", "start"):
                expr = f"sum by ({by}) ({record} @ {_at(self.rule_times[kind])})"
                self._add(f"{index}/{kind}/{position}", Part(kind, index, name=name), expr)

    def _rule_targets(self) -> None:
        start, end = self.rule_times["start"], self.rule_times["end"]
        for which, t in (("start", start), ("end", end)):
            self._add(f"rules/age/{which}", Part("rule_age", name=which), f"max({AGE} @ {_at(t)})")
        # Over-flagging costs a replica's raw samples; missing a restart would cost exactness: the resets of the five
        # minutes before the start count too (a re-read target's share reaches back that far).
        resets = f"count_over_time({RESETS}[{promql.duration(end - start + LOOKBACK_S)}] @ {_at(end)})"
        at_start, at_end = f"{PRESENT} @ {_at(start)}", f"{PRESENT} @ {_at(end)}"
        flags = f"({at_end} unless {at_start}) or ({at_start} unless {at_end}) or {resets}"
        self._add("rules/reread", Part("rule_reread"), f"group by ({TARGET_BY}) ({flags})")

    def read(self, result: QueryResult) -> WindowAnswer:
        """Sort the union's answer by part; series with a tag this plan did not issue are ignored."""
        answer = WindowAnswer(present=set() if self.watched else None, rule_times=dict(self.rule_times))
        for series in result.series:
            part = self.parts.get(series.labels.get(TAG_LABEL, ""))
            if part is None or not series.samples:
                continue
            labels = {k: v for k, v in series.labels.items() if k not in (TAG_LABEL, "__name__")}
            value = series.samples[-1][1]
            target = target_of(labels)
            if part.kind == "down":
                answer.failed_scrapes[target] = value
                continue
            if part.kind == "unread":
                answer.unread.add(target)
                continue
            if part.kind == "present":
                if answer.present is not None and target[1] in self.watched:
                    answer.present.add(target[1])
                continue
            if part.kind == "rule_age":
                answer.rule_ages[part.name] = value
                continue
            if part.kind == "rule_reread":
                answer.rule_reread.add(target)
                continue
            query = self.queries[part.index]
            answer.answered.add(part.index)
            if part.kind == "lag":
                if not math.isnan(value):
                    answer.lag_s = max(answer.lag_s or 0.0, value)
            elif part.kind == "reread":
                answer.reread.setdefault(part.index, set()).add(target)
            elif part.kind in ("end", "start", "increase"):
                group: Group = group_of(labels, query.by)
                if "le" in labels and part.name == query.series_names()[0] and query.kind == "histogram":
                    group = (*group, ("le", labels["le"]))
                sign = -1.0 if part.kind == "start" else 1.0
                increases = answer.increases.setdefault(part.index, {})
                increases[(part.name, group)] = increases.get((part.name, group), 0.0) + sign * value
            elif part.kind == "promql":
                answer.points.setdefault(part.index, []).append(StatPoint(None, tuple(sorted(labels.items())), value))
            elif not math.isnan(value):
                group = tuple((b, labels[b]) for b in query.by if b in labels)
                answer.points.setdefault(part.index, []).append(StatPoint(part.stat, group, value))
        if self.ruled:
            self._read_rule_targets(answer)
        return answer

    def _read_rule_targets(self, answer: WindowAnswer) -> None:
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
            oldest = times[which] - max(answer.rule_ages.get(which, 0.0), 0.0)
            lag = max(abs(times[which] - boundary), abs(oldest - boundary))
            answer.lag_s = max(answer.lag_s or 0.0, lag)
        if answer.rule_reread:
            for index in self.ruled:
                answer.reread.setdefault(index, set()).update(answer.rule_reread)

    def boundaries(self, index: int, answer: WindowAnswer) -> tuple[float, float]:
        """The times that stand for query ``index``'s window boundaries: the rule evaluations, or the window's own."""
        assert self.window.start is not None
        if index in self.ruled:
            return answer.rule_times["start"], answer.rule_times["end"]
        return self.window.start, self.close_at

    def summed_share(
        self, index: int, series: RawSeries, answer: WindowAnswer, view: RuleView | None = None
    ) -> tuple[tuple[str, Group], float] | None:
        """What ``series`` contributed to query ``index``'s end sum minus its start sum, from its raw samples.

        Mirrors the ``end``/``start`` parts exactly (``last_over_time`` ignores staleness, so raw samples determine it).
        From raw samples: the end value is the last sample in ``(start - pad, end]`` (for a final window the smallest
        sample in ``(end, close_at]`` when there is one), the start value the last sample in ``(start - pad, start]``.
        From the recording rules: the last sample in the five minutes up to each boundary's rule evaluation, of those
        that evaluation had (``view``, from :meth:`rule_views`; all of them without one).
        """
        window = self.window
        assert window.start is not None
        query = self.queries[index]
        group: Group = group_of(series.labels, query.by)
        if query.kind == "histogram" and query.ratio is None and series.name == query.series_names()[0]:
            le = series.labels.get("le")
            if le is None:
                return None
            group = (*group, ("le", le))
        if index in self.ruled:
            t_start, t_end = self.boundaries(index, answer)
            had = view or RuleView(t_start, t_end)
            base = _last_within(series, t_start, LOOKBACK_S, had.start)
            end = _last_within(series, t_end, LOOKBACK_S, had.end)
            if base is None and end is None:
                return None
            return (series.name, group), (end or 0.0) - (base or 0.0)
        low = window.start - self.pad_s
        end_values = [v for t, v in series.samples if low < t <= window.end]
        after = [v for t, v in series.samples if window.end < t <= self.close_at]
        start_values = [v for t, v in series.samples if low < t <= window.start]
        end = min(after) if window.final and after else (end_values[-1] if end_values else None)
        if end is None:
            return None
        return (series.name, group), end - (start_values[-1] if start_values else 0.0)

    def rule_views(self, raw: Sequence[RawSeries], targets: set[Target]) -> tuple[dict[Target, RuleView], set[Target]]:
        """Which of each re-read target's samples the rule evaluations standing for the boundaries had, and the
        targets for which that could not be told (taken to have had all).

        An evaluation at ``t`` sums the samples stored when it ran: on a busy node a scrape stamped before ``t`` may
        be stored after it (as may a remote-written sample), and is then counted from the next evaluation on. A
        target's own samples are stored in time order, so an evaluation had those up to some time ``u <= t``:
        :data:`~otel_bridge.producers.promql.rules.COUNTED`, the sum of its primary counters' last samples it had,
        tells ``u`` (the latest of its sample times whose sum from the raw series matches). Its share of the rules'
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
            if series.name == COUNTED:
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

    def exact_window(self, index: int, answer: WindowAnswer) -> StepWindow:
        """The window whose exact increase replaces a re-read target's share for query ``index``."""
        window = self.window
        if index in self.ruled:
            start, end = self.boundaries(index, answer)
            return StepWindow(window.step, start, end)
        return StepWindow(window.step, window.start, self.close_at) if window.final else window

    def reread_expression(self, targets: set[Target], answer: WindowAnswer) -> str | None:
        """The range-selector query returning the raw samples of ``targets`` (evaluate at :attr:`reread_until`)."""
        window = self.window
        if not targets or window.start is None:
            return None
        names = sorted({name for i in self.increase_queries for name in self.queries[i].series_names()})
        if self.ruled:
            names.append(COUNTED)  # which of their samples each rule evaluation had (rule_views)
        instances = sorted({instance for _, instance in targets})
        low = window.start - max(self.pad_s, REREAD_LOOKBACK_S)
        if self.ruled and "start" in answer.rule_times:
            low = min(low, answer.rule_times["start"] - LOOKBACK_S)
        span = promql.duration(self.reread_until - low)
        matchers = (
            f"__name__=~{promql.regex_alternation(names, utf8=True)}, instance=~{promql.value_alternation(instances)}"
        )
        return f"{{{matchers}}}[{span}]"


def _over_window(stat: str, sel: str, *, length: str, seconds: float | None, full_scale: float | None) -> str:
    """A gauge statistic of each series of ``sel`` over the window ``[length]`` (``seconds`` long)."""
    if stat == IDLE_STAT:
        assert seconds is not None
        assert full_scale is not None
        return f"{seconds!r} * (1 - avg_over_time({sel}[{length}]) / {full_scale!r})"
    return f"{_OVER_TIME[stat]}({sel}[{length}])"


def roled(query: MetricQuery, name: str, per_series: Callable[[str], str]) -> str:
    """``per_series`` over the selector of ``name`` (with the query's matchers); when ``query`` groups by role, the
    union over its roles' label sets, each series given the role it serves (``label_replace``), as
    :func:`~otel_bridge.producers.statistics.with_roles` labels raw series."""
    matchers = dict(query.matchers)
    if not query.roles:
        return per_series(promql.selector(name, matchers, utf8=query.utf8))
    role_value = promql.quote_label_value
    terms = [
        f"label_replace({per_series(promql.selector(name, {**matchers, **dict(label_set)}, utf8=query.utf8))}, "
        f'"{ROLE_LABEL}", {role_value(role)}, "", "")'
        for role, label_set in query.roles
    ]
    return promql.union(terms)


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
