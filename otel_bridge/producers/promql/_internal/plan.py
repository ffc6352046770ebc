"""One window's instant query for the store (the union), and how to read its answer.

The bridge asks the store one instant query per step (sent in several under a store's longest query:
:meth:`WindowPlan.expressions`): the union (``or``) of tagged parts, each answering one thing, so the answer's size
grows with the configured metrics and label groups, not with replicas, buckets or samples. The parts every window
source shares are written here:

- a gauge statistic: ``sum by (...) (max_over_time(x[<window>]))``, as Prometheus computes it; a gauge's idle
  seconds: ``sum by (...) (<window seconds> * (1 - avg_over_time(x[<window>]) / <full scale>))`` (for a count with
  ``busy_at``, ``clamp(x, 0, <busy_at>)[<window>:<scrape interval>]``, each value held to it): the figure of
  :func:`~otel_bridge.producers.statistics.idle_seconds` with every sample weighed alike (docs/step-numbers.md, idle
  rollout servers, says how far the two may differ);
- a raw PromQL expression, as written;
- the targets whose scrapes failed during the window (Prometheus' own ``up``), and those whose last scrape before the
  window's end failed (``unread``: Prometheus has no reading of them at the end);
- which of the targets the bridge keeps health keys for (``watched``: those that failed before) Prometheus still
  scrapes at the window's end (``up`` there, an instant selector: a target Prometheus dropped has a staleness marker),
  so the keys of a target that left can go.

The counting queries' parts (counters, histograms, ratios) are the window source's own (``counters``: its module in
``sources/`` says what they ask): boundary values summed per group and the targets to re-read raw
(``sources/samples.py``), the store's exact increase (``sources/exact_increase.py``), or the recording rules' sums at
known evaluations (``sources/recording_rules.py``). :meth:`WindowPlan.read` sorts the answer by part kind; the
source reconciles what it asked for (:meth:`WindowPlan.reread_expression` fetches the re-read targets' raw samples).

The run's last window (:attr:`StepWindow.final`) is closed by the first sample after its end, ``closing_s`` later at
the latest (:attr:`WindowPlan.close_at`); for series read by arrival, by the first after
:attr:`WindowPlan.closing_from`.

Every part carries a label ``otel_bridge_q`` naming what it answers (``3/max``: metric 3's max; ``2/increase/0``,
``2/reread``, ``2/lag/end``, ``down``, ``present``); series with a value the plan did not issue are ignored.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from otel_bridge.errors import PrometheusResponseError, QueryTooLongError
from otel_bridge.producers.metric_set import ROLE_LABEL, MetricQuery
from otel_bridge.producers.statistics import Group, Increases, RawSeries, StatPoint, group_of, native_increases
from otel_bridge.prometheus import promql
from otel_bridge.prometheus.answers import PromSeries, QueryResult
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
    (:meth:`otel_bridge.producers.promql._internal.store.Store.exact_increase`)."""

    def __call__(self, selector: str, length: str, at: str, *, present: str | None = None) -> str: ...


@dataclass(frozen=True, slots=True)
class Part:
    """What one tagged part of the union answers (``source``: a part its window source reads itself, from the
    answer's series tagged ``name``; :meth:`WindowPlan.read` leaves it out)."""

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
        "impossible",
        "source",
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
    """``{"start": t_rs, "end": t_re}``: the rule evaluations that stood for the boundaries (the recording rules'
    window source fills it in)."""
    impossible: dict[int, int] = field(default_factory=dict)
    """Per gauge query with a ``full_scale``: how many of its series had a value outside ``[0, full_scale]`` in the
    window and were left out of its statistics (the plan's ``impossible`` part)."""


class CounterParts(Protocol):
    """Writes the parts of a plan's counting queries ``indices`` (default: all of :attr:`WindowPlan.increase_queries`)
    into its union: a window source's own way of reading them."""

    def __call__(self, plan: WindowPlan, indices: Sequence[int] | None = None, /) -> None: ...


def primary_names(query: MetricQuery) -> tuple[str, ...]:
    """The sample names whose resets or late appearance mark a target for re-reading (one series per label set)."""
    if query.ratio is not None:
        return query.ratio
    names = query.series_names()
    if query.kind != "histogram":
        return names
    return (*(names[-1:] if query.stored_as != "native" else ()), *((query.native_name,) if query.native_name else ()))


def stored_names(query: MetricQuery) -> tuple[str, ...]:
    """The sample names a window's sums read for counting query ``query``: its series names, a histogram held natively
    by its native name instead, or by both names when the store holds both (:func:`native_only` keeps them apart)."""
    if query.native_name is None:
        return query.series_names()
    return (query.native_name,) if query.stored_as == "native" else (*query.series_names(), query.native_name)


def native_only(query: MetricQuery, name: str, per_series: Callable[[str], str]) -> Callable[[str], str]:
    """``per_series``; for the native series of a histogram the store holds both ways, only those without a classic
    ``_count`` series of the same labels (Prometheus' ``always_scrape_classic_histograms`` stores both of one
    histogram: it is read once, as classic). Under each stored form (:attr:`MetricQuery.forms`) against the
    ``_count`` of the same form: the selector :func:`roled` gives is one form's."""
    if name != query.native_name or query.stored_as != "both":
        return per_series
    pairs = list(zip(query.stored(name), query.stored(query.series_names()[-1]), strict=True))

    def only(sel: str) -> str:
        for native, count in pairs:
            quoted = "{" + promql.quote_label_value(native)
            if sel == native or sel.startswith(native + "{"):
                classic = count + sel[len(native) :]
            elif sel.startswith(quoted):
                classic = "{" + promql.quote_label_value(count) + sel[len(quoted) :]
            else:
                continue
            return f"({per_series(sel)} unless {per_series(classic)})"
        raise AssertionError(f"{sel!r} is not a selector of {name} under {query.forms}")

    return only


def at(t: float) -> str:
    """``t`` as the union writes a time: seconds with whole milliseconds."""
    return f"{t:.3f}"


class WindowPlan:
    """The instant union for ``window`` and the meaning of each tag (see the module docstring).

    ``increase_queries`` are the indices of the counter, histogram and ratio queries whose increases Prometheus sums
    (the others are read elsewhere, e.g. by boundary scrapes); ``counters`` writes their parts (the window source's
    way of reading them, after the gauges' and raw PromQL's parts). ``pad_s`` is how far before a boundary its sample
    may lie (2 scrape intervals); ``closing_s`` how far after the end of a final window its closing sample may lie,
    ``closing_from`` after when (default: the end).
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
        closing_from: float | None = None,
        counters: CounterParts | None = None,
        report_down: bool = True,
        report_unread: bool = False,
        watched: Sequence[str] = (),
        first_over_time: bool = True,
    ) -> None:
        self.window = window
        self.first_over_time = first_over_time
        """Whether the store evaluates ``first_over_time``: the run's last window of a native histogram is closed by
        its first sample after the end, else by its last one up to :attr:`close_at`."""
        self.watched = sorted({instance for instance in watched if instance})
        self.queries = list(queries)
        self.pad_s = pad_s
        self.increase_queries = [i for i in increase_queries if window.start is not None]
        self.close_at = (
            window.end + closing_s if window.final and self.increase_queries and closing_s > 0 else window.end
        )
        self.closing_from = window.end if closing_from is None else min(max(closing_from, window.end), self.close_at)
        """After when a sample may close the run's last window: its end, or (:mod:`.arrivals`) the latest of the
        series' first arrivals after it, which may hold what their sender read before the end."""
        self.reread_until = self.close_at
        """Until when a re-read target's raw samples are fetched: :attr:`close_at`, or a later closing evaluation."""
        self.reread_from: float | None = None
        """How far back a re-read reaches besides its own lookback (a window source's own baseline)."""
        self.reread_names: list[str] = []
        """Series a re-read fetches besides the counting queries' own (what a window source reconciles with)."""
        self.parts: dict[str, Part] = {}
        self._exprs: list[str] = []
        self._tags: list[str] = []
        for index, query in enumerate(self.queries):
            if query.promql is not None:
                self._raw_promql(index, query)
            elif query.kind == "gauge" and query.ratio is None:
                self._gauge(index, query)
        if counters is not None and self.increase_queries:
            counters(self)
        if report_down and window.start is not None:
            w = promql.duration(max(window.end - window.start, 0.001))
            self.add("down", Part("down"), f"(count_over_time(up[{w}]) - sum_over_time(up[{w}])) > 0")
        if report_unread:
            pad = promql.duration(pad_s)
            self.add("unread", Part("unread"), f"last_over_time(up[{pad}] @ {at(window.end)}) == 0")
        if self.watched:
            watched = promql.value_alternation(self.watched)
            self.add("present", Part("present"), f"group by (instance) (up{{instance=~{watched}}})")

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
        return promql.packed_unions(self._exprs, max_bytes)

    def add(self, tag: str, part: Part, expr: str) -> None:
        """Add ``expr`` to the union, its answer tagged ``tag`` and read as ``part``."""
        self.parts[tag] = part
        self._tags.append(tag)
        self._exprs.append(promql.tag_series(expr, TAG_LABEL, tag))

    def _raw_promql(self, index: int, query: MetricQuery) -> None:
        assert query.promql is not None
        window = self.window
        if WINDOW_PLACEHOLDER in query.promql and window.start is None:
            return
        length = promql.duration(max(window.seconds if window.seconds is not None else self.pad_s, 0.001))
        self.add(f"{index}/", Part("promql", index), query.promql.replace(WINDOW_PLACEHOLDER, length))

    def _gauge(self, index: int, query: MetricQuery) -> None:
        assert query.name is not None
        window = self.window
        length = promql.duration(max(window.seconds if window.seconds is not None else self.pad_s, 0.001))
        stats = query.stats if window.start is not None else tuple(s for s in query.stats if s == "last")
        name = query.name
        aggregate = _AGGREGATE[query.agg] + (f" by ({', '.join(query.by)})" if query.by else "")
        full_scale = query.full_scale
        if full_scale is not None and stats:
            impossible = functools.partial(_out_of_range, length=length, full_scale=full_scale)
            self.add(f"{index}/impossible", Part("impossible", index), f"count ({roled(query, name, impossible)})")
        for stat in stats:
            per_series: Callable[[str], str] = functools.partial(
                _over_window,
                stat,
                length=length,
                seconds=window.seconds,
                full_scale=query.idle_scale,
                held_at=promql.duration(self.pad_s / 2.0) if query.busy_at is not None else None,
            )
            if full_scale is not None:
                per_series = functools.partial(_possible, per_series, length=length, full_scale=full_scale)
            expr = f"{aggregate} ({roled(query, name, per_series)})"
            self.add(f"{index}/{stat}", Part("stat", index, stat=stat), expr)

    def read(self, result: QueryResult) -> WindowAnswer:
        """Sort the union's answer by part; series with a tag this plan did not issue are ignored."""
        answer = WindowAnswer(present=set() if self.watched else None)
        for series in result.series:
            part = self.parts.get(series.labels.get(TAG_LABEL, ""))
            if part is not None and series.histograms:
                self._read_native(answer, part, series)
                continue
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
            if part.kind == "source":
                continue
            query = self.queries[part.index]
            answer.answered.add(part.index)
            if part.kind == "impossible":
                if math.isfinite(value) and value > 0:
                    answer.impossible[part.index] = int(value)
            elif part.kind == "lag":
                if not math.isnan(value):
                    answer.lag_s = max(answer.lag_s or 0.0, value)
            elif part.kind == "reread":
                answer.reread.setdefault(part.index, set()).add(target)
            elif part.kind in ("end", "start", "increase"):
                group: Group = group_of(labels, query.by)
                if "le" in labels and part.name in query.bucket_names:
                    group = (*group, ("le", labels["le"]))
                sign = -1.0 if part.kind == "start" else 1.0
                increases = answer.increases.setdefault(part.index, {})
                increases[(part.name, group)] = increases.get((part.name, group), 0.0) + sign * value
            elif part.kind == "promql":
                answer.points.setdefault(part.index, []).append(StatPoint(None, tuple(sorted(labels.items())), value))
            elif not math.isnan(value):
                group = tuple((b, labels[b]) for b in query.by if b in labels)
                answer.points.setdefault(part.index, []).append(StatPoint(part.stat, group, value))
        return answer

    def _read_native(self, answer: WindowAnswer, part: Part, series: PromSeries) -> None:
        """A native histogram in the answer: a boundary's or the window's increase of a histogram query held natively
        (its buckets, sum and count, :func:`~otel_bridge.producers.statistics.native_increases`); in any other part
        (raw PromQL) a :class:`PrometheusResponseError`, as the answer would have been without native histograms."""
        query = self.queries[part.index] if part.index >= 0 else None
        if query is None or query.native_name is None or part.kind not in ("end", "start", "increase"):
            raise PrometheusResponseError(
                f"step {self.window.step}: {query.entry if query else 'a part of the query'} returned native-histogram "
                "samples, which otel-bridge does not read there; wrap the expression in histogram_quantile(), "
                "histogram_sum() or histogram_count()"
            )
        labels = {k: v for k, v in series.labels.items() if k not in (TAG_LABEL, "__name__")}
        sign = -1.0 if part.kind == "start" else 1.0
        increases = answer.increases.setdefault(part.index, {})
        for key, value in native_increases(
            query.native_name, group_of(labels, query.by), series.histograms[-1][1]
        ).items():
            increases[key] = increases.get(key, 0.0) + sign * value
        answer.answered.add(part.index)

    def reread_expression(self, targets: set[Target]) -> str | None:
        """The range-selector query returning the raw samples of ``targets`` (evaluate at :attr:`reread_until`): the
        counting queries' series and :attr:`reread_names`, from their lookback (and :attr:`reread_from`) on."""
        window = self.window
        if not targets or window.start is None:
            return None
        names = sorted(
            {
                stored
                for i in self.increase_queries
                for n in self.queries[i].read_names()
                for stored in self.queries[i].stored(n)
            }
        )
        names.extend(self.reread_names)
        instances = sorted({instance for _, instance in targets})
        low = window.start - max(self.pad_s, REREAD_LOOKBACK_S)
        if self.reread_from is not None:
            low = min(low, self.reread_from)
        span = promql.duration(self.reread_until - low)
        matchers = (
            f"__name__=~{promql.regex_alternation(names, utf8=True)}, instance=~{promql.value_alternation(instances)}"
        )
        return f"{{{matchers}}}[{span}]"


def as_served(queries: Sequence[MetricQuery], raw: Sequence[RawSeries]) -> list[RawSeries]:
    """``raw`` with every series named as served (a stored form's name replaced by the query's own:
    :meth:`MetricQuery.served_name`, a native histogram's parts included), and a server's series under two forms
    merged into one, its samples in time order: a counter that changed names mid-run continues, counted once."""
    served = {stored: name for q in queries for name in q.read_names() for stored in q.stored(name)}
    merged: dict[tuple[str, tuple[tuple[str, str], ...]], RawSeries] = {}
    for series in raw:
        name = served.get(series.name, series.name)
        key = (name, tuple(sorted(series.labels.items())))
        known = merged.get(key)
        if known is None:
            merged[key] = replace(series, name=name)
        else:
            samples = sorted([*known.samples, *series.samples])
            merged[key] = RawSeries(name, series.labels, samples, native=known.native or series.native)
    return list(merged.values())


def _over_window(
    stat: str,
    sel: str,
    *,
    length: str,
    seconds: float | None,
    full_scale: float | None,
    held_at: str | None = None,
) -> str:
    """A gauge statistic of each series of ``sel`` over the window ``[length]`` (``seconds`` long).

    With ``held_at`` (a count with ``busy_at``: a server is busy from one running request on), idle seconds hold each
    value to ``[0, full_scale]`` first, as :func:`~otel_bridge.producers.statistics.idle_seconds` does: ``clamp``
    takes an instant vector, so the window is then a subquery at ``held_at``, the scrape interval."""
    if stat == IDLE_STAT:
        assert seconds is not None
        assert full_scale is not None
        values = f"clamp({sel}, 0, {full_scale!r})[{length}:{held_at}]" if held_at else f"{sel}[{length}]"
        return f"{seconds!r} * (1 - avg_over_time({values}) / {full_scale!r})"
    return f"{_OVER_TIME[stat]}({sel}[{length}])"


def _out_of_range(sel: str, *, length: str, full_scale: float) -> str:
    """The series of ``sel`` with a value outside ``[0, full_scale]`` in the window ``[length]`` (no device reads a
    utilization of 150 or -50), as :func:`~otel_bridge.producers.statistics.out_of_range` finds them."""
    return f"(max_over_time({sel}[{length}]) > {full_scale!r} or min_over_time({sel}[{length}]) < 0)"


def _possible(per_series: Callable[[str], str], sel: str, *, length: str, full_scale: float) -> str:
    """``per_series`` of the series of ``sel`` without those :func:`_out_of_range` finds: left out of the window's
    statistics, as :func:`~otel_bridge.producers.statistics.compute_stats` leaves them out."""
    return f"({per_series(sel)}) unless {_out_of_range(sel, length=length, full_scale=full_scale)}"


FORM_LABEL = "otel_bridge_form"
"""The label that keeps a family's stored forms apart while :func:`roled` combines them (aggregated away)."""

AcrossForms = Literal["first", "max"]


def roled(query: MetricQuery, name: str, per_series: Callable[[str], str], across: AcrossForms = "first") -> str:
    """``per_series`` over the selector of ``name`` (with the query's matchers); when ``query`` groups by role, the
    union over its roles' label sets, each series given the role it serves (``label_replace``), as
    :func:`~otel_bridge.producers.statistics.with_roles` labels raw series.

    A family read under several stored forms (:attr:`MetricQuery.forms`) gets ``per_series`` of each form's selector,
    so a server whose series is under two names within the range is one series per form, never one selector with two
    series of the same labels; ``across`` combines a server's values: ``first`` the first form that has one (``or``),
    ``max`` the largest (a counter's latest); different servers' series stay apart either way. A native histogram's
    name is combined by ``first`` whatever ``across`` says: PromQL's ``max`` drops histogram samples, so a server
    whose native series changed names within the range is read under the first form holding it (said at start-up by
    :mod:`.histogram_storage`, documented in docs/compatibility.md)."""
    terms = [_roled(query, stored, per_series) for stored in query.stored(name)]
    if len(terms) == 1 or across == "first" or name == query.native_name:
        return promql.union(terms) if len(terms) > 1 else terms[0]
    kept = [f'label_replace({term}, "{FORM_LABEL}", "{i}", "", "")' for i, term in enumerate(terms)]
    return f"{across} without ({FORM_LABEL}) ({promql.union(kept)})"


def _roled(query: MetricQuery, name: str, per_series: Callable[[str], str]) -> str:
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
