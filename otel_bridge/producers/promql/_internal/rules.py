"""The recording rule that sums each boundary's samples in Prometheus ahead of time (``prometheus.recording_rules``).

Without it, each step's reading makes Prometheus touch every counter, bucket, ``_sum`` and ``_count`` series of
every replica at both boundaries: about 10 us per series, 2 s per step at 1,024 vLLM replicas on a small machine
(``bench/suite_promql_scale.py``). With this rule group loaded, Prometheus does that work once per evaluation, off the
bridge's path, and a step reads a few series per label group.

The group holds one recording rule, :data:`RECORD`, whose series are told apart by :data:`PART_LABEL` (a
:class:`RulePart` each):

- per counting sample name (a counter, a histogram's ``_bucket``/``_sum``/``_count``, a ratio's two counters) and
  label group: ``sum by (<by>) (last_over_time(x[5m]))``, the sum of every series' last sample, like the bridge's
  own boundary sums, under every name the family may be stored under (:func:`_selectors`), so the rule is the same
  whatever the store holds;
- per target (``job``, ``instance``): whether it has a counting sample in the last 5 minutes
  (:data:`PRESENT`), whether any of its counters reset in the last 5 minutes (:data:`RESETS`), and the sum of its
  primary counters' last samples (:data:`COUNTED`: which of its samples an evaluation had, see below);
- the age of the oldest latest sample at evaluation time (:data:`AGE`), for ``otel_bridge/boundary_lag_s``.

One rule, not one per part: Prometheus evaluates each rule of a group as a query of its own, over the samples stored
when that query starts, so samples stored while the group runs (a scrape ending on a busy node, a remote-write batch)
would be in some of an evaluation's parts and not in others, and a re-read target's share, told from :data:`COUNTED`,
would not be what the sums held: the difference counted in two steps. One query reads one snapshot of the store, and
Prometheus stores one rule's samples of an evaluation together.

A boundary is then represented by the rule's last evaluation at or before it, stored, and the next window starts
from the evaluation the previous one ended with
(:mod:`~otel_bridge.producers.promql._internal.sources.recording_rules`, the window source reading them), so the
steps' deltas still add up to the run's increase exactly however late Prometheus stores its evaluations, and a target
that restarted, appeared or disappeared is still re-read raw and its share replaced by its exact increase, both taken
as far as the evaluation had its samples (:data:`COUNTED`: a scrape stamped before an evaluation may be stored after
it ran, on a busy node or by remote write). The cost in exactness: a boundary lags by up to one rule interval more
than with raw samples, more when samples or evaluations are stored late (reported in ``otel_bridge/boundary_lag_s``).

``otel-bridge prometheus-rules`` writes this group for a config; the bridge checks at start-up that Prometheus runs
it unchanged (the record, no labels added, each part's expression) and otherwise reads raw samples and says why.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeGuard

from otel_bridge.errors import ConfigError
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.promql._internal.plan import FORM_LABEL
from otel_bridge.prometheus import promql
from otel_bridge.prometheus_names import is_classic_name, stored_name

_log = logging.getLogger(__name__)

GROUP = "otel-bridge"
RECORD = "otel_bridge:parts_5m"
PART_LABEL = "otel_bridge_part"
LOOKBACK = "5m"
LOOKBACK_S = 300.0
TARGET_BY = "job, instance"


def part_selector(part: str) -> str:
    """The selector of one part's series of :data:`RECORD`."""
    return f"{RECORD}{{{PART_LABEL}={promql.quote_label_value(part)}}}"


PRESENT = part_selector("target:present")
COUNTED_PART = "target:counted"
COUNTED = part_selector(COUNTED_PART)
RESETS = part_selector("target:resets")
AGE = part_selector("target:sample_age_seconds:max")


@dataclass(frozen=True, slots=True)
class RulePart:
    """One part of :data:`RECORD`: the value of :data:`PART_LABEL` on its series and the PromQL computing them."""

    part: str
    expr: str

    @property
    def selector(self) -> str:
        """The selector of this part's series."""
        return part_selector(self.part)

    @property
    def term(self) -> str:
        """This part as a term of the rule's expression (:func:`rule_for`)."""
        return promql.tag_series(self.expr, PART_LABEL, self.part)


@dataclass(frozen=True, slots=True)
class Rule:
    """One recording rule: the series it records and its PromQL, as Prometheus prints it back."""

    record: str
    expr: str


@dataclass(frozen=True, slots=True)
class RuleSet:
    """The rule Prometheus runs for this bridge: per counting query index, the selector of each sample name's part."""

    records: Mapping[int, tuple[str, ...]]
    interval_s: float
    evaluation_s: float


def counting(query: MetricQuery) -> bool:
    """Whether ``query`` sums counter increases (counter, histogram, ratio), i.e. may be served by these rules."""
    return query.promql is None and (query.kind != "gauge" or query.ratio is not None) and bool(query.series_names())


def _selectors(name: str, query: MetricQuery) -> tuple[str, ...]:
    """The selectors of ``name`` under every form a store may hold it (:attr:`MetricQuery.candidate_forms`:
    ``vllm:x``, ``vllm_x``, ``ray_vllm_x``), whatever the store holds now (:attr:`MetricQuery.forms`): the rules
    `otel-bridge prometheus-rules` writes offline are the ones the bridge expects, and they serve a family held under
    any form, or under several (servers reached two ways, a migration)."""
    matchers = dict(query.matchers)
    return tuple(promql.selector(stored_name(name, form), matchers, utf8=query.utf8) for form in query.candidate_forms)


def _last_samples(selectors: Sequence[str]) -> str:
    """Each series' last sample in the last :data:`LOOKBACK` under ``selectors`` (the forms of one sample name); a
    server held under several at once (same labels but the name) counts once, by its largest value: a counter's
    latest, so a sum stays continuous when a server's name changes within the lookback (the old name's last value is
    where the new one goes on from), as the samples plan reads it (:func:`~.plan.roled`, ``max``)."""
    terms = [f"last_over_time({s}[{LOOKBACK}])" for s in selectors]
    if len(terms) == 1:
        return terms[0]
    kept = " or ".join(promql.tag_series(term, FORM_LABEL, str(i)) for i, term in enumerate(terms))
    return f"max without ({FORM_LABEL}) ({kept})"


def _record_part(name: str) -> str:
    """``name`` as part of a part's name: a UTF-8 name (``trainer.tokens_total``) has every other character made ``_``
    and a hash of itself added, so parts stay plain ASCII and two names that differ only there do not share one."""
    if is_classic_name(name):
        return name
    escaped = "".join(c if c.isascii() and (c.isalnum() or c in "_:") else "_" for c in name)
    return f"{escaped}_{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def sum_part(query: MetricQuery, position: int) -> RulePart:
    """The part summing sample name ``query.series_names()[position]`` per label group (``le`` kept for buckets)."""
    name = query.series_names()[position]
    bucket = query.kind == "histogram" and query.ratio is None and position == 0
    by = [*query.by, *(["le"] if bucket else [])]
    part = f"{_record_part(name)}:last{LOOKBACK}_sum"
    if query.by:
        part += "_by_" + "_".join(query.by)
    if query.matchers:
        part += "_" + hashlib.sha256(repr(query.matchers).encode()).hexdigest()[:8]
    grouping = f" by ({', '.join(by)}) " if by else ""
    return RulePart(part, f"sum{grouping}({_last_samples(_selectors(name, query))})")


def primary_selections(queries: Sequence[MetricQuery]) -> dict[tuple[str, ...], tuple[str, MetricQuery]]:
    """The counting queries' primary sample names (a counter, a histogram's ``_count``, a ratio's two counters) as
    the per-target parts select them: ``{selectors (one per form: :func:`_selectors`): (name, the query whose
    matchers it carries)}``, each selection once."""
    out: dict[tuple[str, ...], tuple[str, MetricQuery]] = {}
    for query in queries:
        if not counting(query):
            continue
        names = query.ratio if query.ratio is not None else query.series_names()[-1:]
        for name in names:
            out.setdefault(_selectors(name, query), (name, query))
    return out


def target_parts(queries: Sequence[MetricQuery]) -> list[RulePart]:
    """:data:`PRESENT`, :data:`RESETS`, :data:`COUNTED` and :data:`AGE` over the counting queries' primary sample
    names, under every form."""
    selections = list(primary_selections(queries))
    if not selections:
        return []
    sels = [s for selectors in selections for s in selectors]
    present = " or ".join(f"group by ({TARGET_BY}) (last_over_time({s}[{LOOKBACK}]))" for s in sels)
    resets = " or ".join(f"group by ({TARGET_BY}) (resets({s}[{LOOKBACK}]) > 0)" for s in sels)
    # Each selection's series tagged apart (a series matching two selections counts twice, as the bridge sums it); a
    # server under two forms of one selection once, as the sums count it.
    counted = " or ".join(
        promql.tag_series(_last_samples(selectors), "otel_bridge_selector", str(i))
        for i, selectors in enumerate(selections)
    )
    age = " or ".join(f"max by ({TARGET_BY}) (time() - timestamp({s}))" for s in sels)
    return [
        RulePart("target:present", present),
        RulePart("target:resets", resets),
        RulePart(COUNTED_PART, f"sum by ({TARGET_BY}) ({counted})"),
        RulePart("target:sample_age_seconds:max", f"max({age})"),
    ]


def parts_for(queries: Sequence[MetricQuery]) -> list[RulePart]:
    """Every part of the rule the bridge can use for ``queries`` (types resolved), in the order they are written."""
    parts: list[RulePart] = []
    for query in queries:
        if counting(query):
            for position in range(len(query.series_names())):
                part = sum_part(query, position)
                if part not in parts:
                    parts.append(part)
    return [*parts, *target_parts(queries)]


def rule_for(queries: Sequence[MetricQuery]) -> Rule | None:
    """The rule for ``queries``: :data:`RECORD`, every part of :func:`parts_for` in one expression, a part a line
    (``None``: no counting query, nothing to record)."""
    parts = parts_for(queries)
    return Rule(RECORD, "\nor ".join(f"({p.term})" for p in parts)) if parts else None


def rules_document(queries: Sequence[MetricQuery], interval_s: float) -> dict[str, Any]:
    """A Prometheus rule file (``rule_files:``) holding the group, evaluated every ``interval_s`` seconds."""
    rule = rule_for(queries)
    rules = [{"record": rule.record, "expr": rule.expr}] if rule is not None else []
    return {"groups": [{"name": GROUP, "interval": promql.duration(interval_s), "rules": rules}]}


def _canonical(expr: object) -> str:
    return "".join(str(expr).split())


_PART_END = re.compile(r',"' + PART_LABEL + r'","([^"]*)","",""\)\)')


def loaded_parts(query: object) -> dict[str, str]:
    """The parts of a loaded :data:`RECORD` rule's ``query`` (as Prometheus prints it back): ``{part: its term}``,
    whitespace dropped; empty when the query is not a union of parts as :func:`rule_for` writes them."""
    canonical, parts, position = _canonical(query), {}, 0
    while True:
        end = _PART_END.search(canonical, position)
        if end is None or not canonical.startswith("(label_replace(", position):
            return {}
        parts[end.group(1)] = canonical[position : end.end()]
        position = end.end()
        if position == len(canonical):
            return parts
        if not canonical.startswith("or", position):
            return {}
        position += 2


def find_rules(queries: Sequence[MetricQuery], groups: Sequence[Mapping[str, Any]]) -> tuple[RuleSet | None, str]:
    """Which counting queries Prometheus' loaded rule ``groups`` serve, or ``None`` and the reason they cannot.

    The rule :data:`RECORD` must sit in the group named :data:`GROUP`, with the per-target parts :func:`parts_for`
    writes for ``queries``; queries whose sum parts are missing or differ are read from raw samples. A group of that
    name whose rules add ``labels`` records other series than the bridge's (an ``instance`` label folds every target
    into one): it is not the bridge's, as if it were missing.
    """
    group = next((g for g in groups if g.get("name") == GROUP), None)
    if group is None:
        return None, f"Prometheus has no rule group {GROUP!r}"
    rules = [r for r in group.get("rules") or [] if isinstance(r, dict)]
    labelled = [f"{r.get('name')} adds labels {r.get('labels')}" for r in rules if r.get("labels")]
    if labelled:
        return None, (
            f"rule group {GROUP!r} is not otel-bridge's: {'; '.join(labelled)}, so its series are not the ones the "
            "bridge reads"
        )
    found = next((r for r in rules if r.get("name") == RECORD), None)
    if found is None:
        earlier = sorted(str(r.get("name")) for r in rules if str(r.get("name")).startswith("otel_bridge:"))
        why = f"rule group {GROUP!r} has no rule {RECORD}"
        if earlier:  # one rule per sum, as otel-bridge wrote them before one rule held every part
            more = ", ..." if len(earlier) > 3 else ""
            why += f" (its rules {', '.join(earlier[:3])}{more} are an earlier version's)"
        return None, why
    if found.get("health") not in (None, "ok", "unknown"):
        return None, f"{RECORD} is {found.get('health')}: {found.get('lastError', '')}"
    loaded = loaded_parts(found.get("query"))
    if not loaded:
        return None, f"{RECORD} is not a union of otel-bridge's parts: `{str(found.get('query'))[:300]}`"
    problems: list[str] = []

    def usable(part: RulePart) -> bool:
        term = loaded.get(part.part)
        if term is None:
            problems.append(f"{part.selector} is missing")
            return False
        if term != _canonical(f"({part.term})"):
            problems.append(f"{part.selector} is not `{part.expr}`")
            return False
        return True

    if not all([usable(part) for part in target_parts(queries)]):
        return None, "; ".join(problems)
    records: dict[int, tuple[str, ...]] = {}
    for index, query in enumerate(queries):
        if counting(query) and query.native_name is not None:
            problems.append(
                f"{query.key_name} is stored as a native histogram, and the rules sum its classic series only: it is "
                "read from the samples beside them"
            )
        elif counting(query) and not query.roles:  # the rules sum by labels; roles are the bridge's own grouping
            parts = [sum_part(query, p) for p in range(len(query.series_names()))]
            if all([usable(part) for part in parts]):
                records[index] = tuple(part.selector for part in parts)
    interval = group.get("interval")
    evaluation = group.get("evaluationTime", 0.0)
    if not _seconds(interval) or interval <= 0:
        return None, f"rule group {GROUP!r} has no usable interval ({interval!r} is not a number of seconds above 0)"
    if not _seconds(evaluation) or evaluation < 0:
        return None, f"rule group {GROUP!r} has no usable evaluationTime ({evaluation!r} is not a number of seconds)"
    if not records:
        return None, "; ".join(problems)
    return RuleSet(records, float(interval), float(evaluation)), "; ".join(problems)


def read_as_ruled(queries: Sequence[MetricQuery], ruleset: RuleSet) -> tuple[MetricQuery, ...]:
    """``queries`` with those ``ruleset`` serves read under every form their names may be stored under
    (:attr:`MetricQuery.candidate_forms`), as the rules select them: a re-read target's raw series are then the very
    series the rules summed (named as served: :func:`~.plan.as_served`), whatever forms were found at start-up."""
    return tuple(replace(q, forms=q.candidate_forms) if i in ruleset.records else q for i, q in enumerate(queries))


def _seconds(value: object) -> TypeGuard[int | float]:
    """Whether ``value`` from ``/api/v1/rules`` is a finite number (not a bool: JSON ``true`` is no duration)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def rules_in_use(
    groups: Sequence[Mapping[str, Any]], queries: Sequence[MetricQuery], *, required: bool
) -> RuleSet | None:
    """The rules to read through, from Prometheus' loaded ``groups`` (``prometheus.recording_rules``).

    With ``required``, a counting query without its rules is a :class:`ConfigError`; otherwise why rules are not used
    is logged once.
    """
    ruleset, problems = find_rules(queries, groups)
    uncovered = [
        q.key_name for i, q in enumerate(queries) if counting(q) and (ruleset is None or i not in ruleset.records)
    ]
    if uncovered and required:
        raise ConfigError(
            f"prometheus.recording_rules: required, but Prometheus does not run them for {', '.join(uncovered)} "
            f"({problems}); add the file `otel-bridge prometheus-rules --config <your config>` writes to "
            "Prometheus' rule_files and reload it, or set prometheus.recording_rules: auto"
        )
    if uncovered and ruleset is not None:
        _log.info("recording rules not used for %s: %s", ", ".join(uncovered), problems)
    elif ruleset is None and any(g.get("name") == GROUP for g in groups):
        _log.warning(
            "Prometheus runs a rule group %r that otel-bridge cannot read (%s): each step sums the raw series; "
            "replace the group with the file `otel-bridge prometheus-rules --config <your config>` writes, unchanged",
            GROUP,
            problems,
        )
    elif ruleset is None:
        _log.info(
            "otel-bridge's recording rules are not loaded in Prometheus (%s): each step sums the raw series "
            "(`otel-bridge prometheus-rules` writes the rules; they make a step's reading independent of replicas)",
            problems,
        )
    return ruleset
