"""The bridge's recording rules: what they record, how the bridge recognises them, the window plan reading them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from otel_bridge.config import MetricConfig
from otel_bridge.producers.metric_set import MetricQuery, resolve_metrics
from otel_bridge.producers.promql._internal.plan import TAG_LABEL, WindowAnswer, WindowPlan, as_served
from otel_bridge.producers.promql._internal.rules import (
    AGE,
    COUNTED,
    COUNTED_PART,
    GROUP,
    PART_LABEL,
    PRESENT,
    RECORD,
    RESETS,
    RulePart,
    RuleSet,
    find_rules,
    loaded_parts,
    part_selector,
    parts_for,
    read_as_ruled,
    rule_for,
    rules_document,
)
from otel_bridge.producers.promql._internal.sources.recording_rules import RuledWindow, RuleView, unruled
from otel_bridge.producers.promql._internal.sources.samples import boundary_sums
from otel_bridge.producers.statistics import RawSeries
from otel_bridge.prometheus import promql
from otel_bridge.prometheus.answers import PromSeries, QueryResult
from otel_bridge.window import StepWindow

GAUGE = MetricQuery(key_name="running", name="vllm:num_requests_running", kind="gauge", stats=("max",))
COUNTER = MetricQuery(
    key_name="tokens", name="vllm:generation_tokens_total", kind="counter", stats=("delta",), by=("model_name",)
)
HIST = MetricQuery(key_name="ttft", name="vllm:ttft_seconds", kind="histogram", stats=("count", "p50"))
FILTERED = MetricQuery(
    key_name="stops", name="vllm:request_success_total", kind="counter", matchers=(("finished_reason", "stop"),)
)
QUERIES = [GAUGE, COUNTER, HIST, FILTERED]
WINDOW = StepWindow(step=3, start=1000.0, end=1010.0)


TOKENS = part_selector("vllm:generation_tokens_total:last5m_sum_by_model_name")
TTFT_BUCKET, TTFT_SUM, TTFT_COUNT = (
    part_selector(f"vllm:ttft_seconds_{s}:last5m_sum") for s in ("bucket", "sum", "count")
)


def loaded(
    queries: list[MetricQuery], *, interval: float = 15.0, printed: bool = False, **changes: str
) -> list[dict[str, Any]]:
    """Prometheus' /api/v1/rules groups for the rule the bridge writes, with some parts' expressions changed (by
    selector); ``printed``: spaced as Prometheus may print it back."""
    parts = [RulePart(p.part, changes.get(p.selector, p.expr)) for p in parts_for(queries)]
    query = promql.union([p.term for p in parts])
    if printed:
        query = query.replace(", ", ",").replace("(", " ( ")
    rules = [{"name": RECORD, "query": query, "health": "ok", "type": "recording"}]
    return [{"name": GROUP, "file": "rules.yml", "interval": interval, "evaluationTime": 0.02, "rules": rules}]


def test_one_rule_holds_a_sum_per_counting_sample_name_and_four_per_target_parts() -> None:
    rules = {p.selector: p.expr for p in parts_for(QUERIES)}

    def forms(name: str) -> str:  # every form a store may hold the name under, a server under two counted once
        terms = [
            f'label_replace((last_over_time({stored}[5m])), "otel_bridge_form", "{i}", "", "")'
            for i, stored in enumerate((name, name.replace(":", "_"), "ray_" + name.replace(":", "_")))
        ]
        return f"max without (otel_bridge_form) ({' or '.join(terms)})"

    assert rules[TOKENS] == f"sum by (model_name) ({forms('vllm:generation_tokens_total')})"
    assert rules[TTFT_BUCKET] == f"sum by (le) ({forms('vllm:ttft_seconds_bucket')})"
    assert rules[TTFT_COUNT] == f"sum({forms('vllm:ttft_seconds_count')})"
    filtered = [r for r in rules if r.startswith(part_selector("vllm:request_success_total:last5m_sum_")[:-2])]
    assert len(filtered) == 1
    assert 'finished_reason="stop"' in rules[filtered[0]]
    assert not any("num_requests_running" in r for r in rules)  # gauges are read as they are
    # counter, _count, filtered counter, under each of their three forms
    assert rules[PRESENT].count("group by (job, instance) (last_over_time(") == 3 * 3
    assert "resets(vllm:ttft_seconds_count[5m]) > 0" in rules[RESETS]
    assert rules[AGE].startswith("max(max by (job, instance) (time() - timestamp(")
    # Per target, the sum of its primary counters' last samples, each selection tagged apart (COUNTED).
    assert rules[COUNTED].startswith("sum by (job, instance) (label_replace((max without (otel_bridge_form) (")
    assert rules[COUNTED].count('"otel_bridge_selector"') == 3
    assert len(rules) == 1 + 3 + 1 + 4
    # One rule, every part a term of it told by its label: one query per evaluation, one snapshot of the store.
    document = rules_document(QUERIES, 15.0)
    assert document["groups"][0]["name"] == GROUP
    assert document["groups"][0]["interval"] == "15s"
    (rule,) = document["groups"][0]["rules"]
    assert rule == {"record": RECORD, "expr": "\nor ".join(f"({p.term})" for p in parts_for(QUERIES))}
    assert f'"{PART_LABEL}", "{COUNTED_PART}", "", "")' in rule["expr"]
    assert sorted(loaded_parts(rule["expr"])) == sorted(p.part for p in parts_for(QUERIES))
    assert rule_for([GAUGE]) is None
    assert rules_document([GAUGE], 15.0)["groups"][0]["rules"] == []


def test_rules_run_unchanged_serve_every_counting_query() -> None:
    ruleset, problems = find_rules(QUERIES, loaded(QUERIES))
    assert ruleset is not None
    assert problems == ""
    assert sorted(ruleset.records) == [1, 2, 3]
    assert ruleset.records[2] == (TTFT_BUCKET, TTFT_SUM, TTFT_COUNT)
    assert (ruleset.interval_s, ruleset.evaluation_s) == (15.0, 0.02)
    # Prometheus prints expressions its own way (spacing): only a different meaning makes a part unusable.
    assert find_rules(QUERIES, loaded(QUERIES, printed=True))[0] == ruleset


def test_changed_or_missing_parts_are_named_and_their_queries_read_raw() -> None:
    ruleset, problems = find_rules(QUERIES, loaded(QUERIES, **{TTFT_SUM: "sum(vllm:ttft_seconds_sum)"}))
    assert ruleset is not None
    assert sorted(ruleset.records) == [1, 3]
    assert TTFT_SUM in problems
    assert find_rules(QUERIES, []) == (None, f"Prometheus has no rule group {GROUP!r}")
    ruleset, problems = find_rules(QUERIES, loaded(QUERIES, **{PRESENT: "up"}))
    assert ruleset is None
    assert PRESENT in problems
    fewer = find_rules(QUERIES, loaded([GAUGE, COUNTER]))  # a rule written for another config
    assert fewer[0] is None
    assert PRESENT in fewer[1]


def test_a_group_of_an_earlier_version_or_an_edited_rule_is_not_read() -> None:
    """The rules of an earlier otel-bridge (one per sum: their evaluations' parts were not one snapshot), a rule
    that is not a union of parts, or one whose evaluation fails: every query is read raw, and the reason says so."""
    earlier = [
        {"name": f"otel_bridge:{name}", "query": "sum(x)", "health": "ok", "type": "recording"}
        for name in ("vllm:generation_tokens_total:last5m_sum", "target:present_5m", "target:counted_5m", "a", "b")
    ]
    group = {"name": GROUP, "interval": 15.0, "evaluationTime": 0.02}
    ruleset, problems = find_rules(QUERIES, [{**group, "rules": earlier}])
    assert ruleset is None
    assert f"has no rule {RECORD}" in problems
    assert "otel_bridge:a, otel_bridge:b, otel_bridge:target:counted_5m, ... are an earlier version's" in problems
    (rule,) = loaded(QUERIES)[0]["rules"]
    for query in (f"sum({rule['query']})", f"{rule['query']} or up", "up"):
        ruleset, problems = find_rules(QUERIES, [{**group, "rules": [{**rule, "query": query}]}])
        assert ruleset is None
        assert f"{RECORD} is not a union of otel-bridge's parts" in problems
    failing = {**rule, "health": "err", "lastError": "query timed out"}
    assert find_rules(QUERIES, [{**group, "rules": [failing]}]) == (None, f"{RECORD} is err: query timed out")


def ruled_plan(window: StepWindow = WINDOW, times: dict[str, float] | None = None) -> RuledWindow:
    """A plan over :data:`QUERIES` read through the rules at the evaluations ``times`` (by default each boundary's
    own time); ``{}``: before they are known."""
    ruleset, _ = find_rules(QUERIES, loaded(QUERIES, interval=5.0))
    assert ruleset is not None
    counters = unruled(ruleset, boundary_sums)
    plan = RuledWindow(
        WindowPlan(QUERIES, window, increase_queries=[1, 2, 3], pad_s=2.0, closing_s=5.5, counters=counters), ruleset
    )
    assert window.start is not None
    plan.at_rule_evaluations({"start": window.start, "end": plan.close_at} if times is None else times)
    return plan


def tagged(tag: str, value: float, **labels: str) -> PromSeries:
    return PromSeries(labels={TAG_LABEL: tag, **labels}, samples=((1010.0, value),))


def test_a_ruled_window_reads_the_rules_at_both_boundaries_and_no_raw_series() -> None:
    expr = ruled_plan().expression
    assert expr is not None
    assert f"sum by (model_name) ({TOKENS} @ 1010.000)" in expr
    assert f"sum by (le) ({TTFT_BUCKET} @ 1000.000)" in expr
    assert f"{PRESENT} @ 1000.000" in expr
    assert f"max({AGE} @ 1010.000)" in expr
    assert f"count_over_time({RESETS}[310s] @ 1010.000)" in expr  # the window and the 5 minutes before it
    assert "last_over_time(vllm:" not in expr
    assert "resets(vllm:" not in expr
    assert "max_over_time(vllm:num_requests_running[10s])" in expr  # gauges as before
    final = ruled_plan(StepWindow(step=3, start=1000.0, end=1010.0, final=True))
    assert final.close_at == 1015.5  # closed by the first evaluation after the end
    assert f"{TTFT_COUNT} @ 1015.500" in (final.expression or "")


def test_a_ruled_window_is_read_at_the_evaluations_it_is_given_and_unanswered_without() -> None:
    plan = ruled_plan(times={"start": 997.25, "end": 1008.5})
    expr = plan.expression or ""
    assert f"{TOKENS} @ 1008.500" in expr
    assert f"{TOKENS} @ 997.250" in expr
    assert f"count_over_time({RESETS}[311250ms] @ 1008.500)" in expr
    unknown = ruled_plan(times={"end": 1008.5})
    assert RECORD not in (unknown.expression or "")
    answer = unknown.read(QueryResult("vector", (tagged("1/end/0", 130.0),)))
    assert 1 not in answer.answered


def test_the_rule_evaluations_asked_for_are_those_stored() -> None:
    plan = ruled_plan(times={})
    expr = plan.rule_times_expression(start=True)
    # The smallest of the rule's latest sample times at each boundary, and the latest stored (whenever it stands for).
    assert expr.count("min(timestamp(") == 3
    assert f"min(timestamp({RECORD} @ 1010.000))" in expr
    assert f"min(timestamp({RECORD} @ 1000.000))" in expr
    assert f"min(timestamp({RECORD}))" in expr
    times = plan.read_rule_times(
        QueryResult("vector", (tagged("end", 1008.0), tagged("latest", 1013.0), tagged("1/end/0", 5.0)))
    )
    assert times == {"end": 1008.0, "latest": 1013.0}
    assert "start" not in plan.rule_times_expression(start=False)


def test_reading_a_ruled_answer_takes_the_lag_and_rereads_from_the_rule_series() -> None:
    plan = ruled_plan(times={"start": 997.0, "end": 1008.0})
    target = {"job": "rollout", "instance": "10.0.0.7:8000"}
    answer = plan.read(
        QueryResult(
            "vector",
            (
                tagged("1/end/0", 130.0, model_name="m"),
                tagged("1/start/0", 100.0, model_name="m"),
                tagged("rules/age/end", 1.5),
                tagged("rules/age/start", 0.5),
                tagged("rules/reread", 1.0, **target),
            ),
        )
    )
    assert answer.increases[1] == {("vllm:generation_tokens_total", (("model_name", "m"),)): 30.0}
    assert answer.lag_s == 3.0 + 0.5  # the start boundary: 3 s to its evaluation, whose oldest sample was 0.5 s old
    assert answer.reread == {i: {("rollout", "10.0.0.7:8000")} for i in (1, 2, 3)}
    assert plan.boundaries(1, answer) == (997.0, 1008.0)
    assert plan.exact_window(1, answer) == StepWindow(3, 997.0, 1008.0)
    reread = plan.reread_expression({("rollout", "10.0.0.7:8000")})
    assert reread is not None
    assert reread.endswith("[313s]")


def test_a_reread_series_share_in_the_rules_is_its_last_sample_in_five_minutes_before_each_evaluation() -> None:
    plan = ruled_plan()
    answer = WindowAnswer(rule_times={"start": 997.0, "end": 1008.0})
    samples = [(690.0, 50.0), (996.0, 12.0), (1004.0, 2.0), (1008.0, 5.0), (1009.0, 6.0)]
    raw = RawSeries("vllm:generation_tokens_total", {"model_name": "m"}, samples)
    assert plan.summed_share(1, raw, answer) == (("vllm:generation_tokens_total", (("model_name", "m"),)), 5.0 - 12.0)
    gone = RawSeries("vllm:generation_tokens_total", {}, [(698.0, 40.0), (700.0, 41.0)])  # > 5 min before the end
    assert plan.summed_share(1, gone, answer) == (("vllm:generation_tokens_total", ()), 0.0 - 41.0)
    older = RawSeries("vllm:generation_tokens_total", {}, [(697.0, 40.0)])  # exactly 5 minutes: outside (t - 5m, t]
    assert plan.summed_share(1, older, answer) is None


def test_without_a_rule_evaluation_near_a_boundary_the_ruled_queries_are_not_answered() -> None:
    plan = ruled_plan(times={"end": 1008.0})
    answer = plan.read(QueryResult("vector", (tagged("1/end/0", 130.0),)))
    assert 1 not in answer.answered
    assert 1 not in answer.increases


def test_a_ruleset_covering_some_queries_leaves_the_others_on_raw_series() -> None:
    ruleset = RuleSet({1: (TOKENS,)}, 5.0, 0.0)
    counters = unruled(ruleset, boundary_sums)
    plan = RuledWindow(
        WindowPlan(QUERIES, WINDOW, increase_queries=[1, 2], pad_s=2.0, closing_s=1.0, counters=counters), ruleset
    )
    plan.at_rule_evaluations({"start": 1000.0, "end": 1010.0})
    expr = plan.expression or ""
    assert f"{TOKENS} @ 1010.000" in expr
    assert "last_over_time(vllm:ttft_seconds_bucket[12s] @ 1010.000)" in expr
    assert plan.ruled == [1]


def test_the_vllm_preset_rules_cover_the_preset() -> None:
    queries = resolve_metrics([MetricConfig(preset="vllm")])
    counting = [q for q in queries if q.promql is None and (q.kind != "gauge" or q.ratio is not None)]
    ruleset, problems = find_rules(queries, loaded(queries))
    assert ruleset is not None
    assert problems == ""
    assert len(ruleset.records) == len(counting)


def test_a_reread_target_is_taken_as_far_as_the_rule_evaluations_had_its_samples() -> None:
    """The evaluation at 1008 ran before the 1007 scrape was stored (a busy node): its COUNTED for the target is the
    1004 sample's 20, so the target's share of the sums and its exact increase both end at 1004, and the 1007 sample
    is left to the next window, which starts there. The evaluation at 997 had everything."""
    plan = ruled_plan(times={"start": 997.0, "end": 1008.0})
    labels = {"job": "rollout", "instance": "a", "model_name": "m"}
    tokens = RawSeries(
        "vllm:generation_tokens_total",
        labels,
        [(990.0, 100.0), (996.0, 110.0), (999.0, 5.0), (1004.0, 20.0), (1007.0, 30.0)],
    )
    part = {PART_LABEL: COUNTED_PART}
    counted = RawSeries(RECORD, {"job": "rollout", "instance": "a", **part}, [(997.0, 110.0), (1008.0, 20.0)])
    newcomer = RawSeries("vllm:generation_tokens_total", {**labels, "instance": "b"}, [(999.0, 7.0), (1006.0, 9.0)])
    counted_b = RawSeries(RECORD, {"job": "rollout", "instance": "b", **part}, [(1008.0, 9.0)])  # none at 997: none had
    odd = RawSeries("vllm:generation_tokens_total", {**labels, "instance": "c"}, [(1001.0, 3.0)])
    counted_c = RawSeries(
        RECORD, {"job": "rollout", "instance": "c", **part}, [(1008.0, 4.0)]
    )  # matches no sample time
    present = RawSeries(RECORD, {"job": "rollout", "instance": "a", PART_LABEL: "target:present"}, [(1008.0, 1.0)])
    targets = {("rollout", "a"), ("rollout", "b"), ("rollout", "c")}
    views, unknown = plan.rule_views([tokens, counted, present, newcomer, counted_b, odd, counted_c], targets)
    assert views[("rollout", "a")] == RuleView(997.0, 1004.0)
    assert views[("rollout", "b")] == RuleView(997.0, 1008.0)  # nothing of it at 997 to have had
    assert unknown == {("rollout", "c")}
    assert views[("rollout", "c")] == RuleView(997.0, 1008.0)  # taken as having had all (and logged)
    answer = WindowAnswer(rule_times={"start": 997.0, "end": 1008.0})
    key = ("vllm:generation_tokens_total", (("model_name", "m"),))
    assert plan.summed_share(1, tokens, answer, views[("rollout", "a")]) == (key, 20.0 - 110.0)
    assert plan.ruled_exact(1, [tokens], answer, views[("rollout", "a")]) == {key: 5.0 + 15.0}  # the reset counted
    assert plan.summed_share(1, newcomer, answer, views[("rollout", "b")]) == (key, 9.0)
    assert plan.ruled_exact(1, [newcomer], answer, views[("rollout", "b")]) == {key: 2.0}  # its first sample, its base


def test_the_rules_expected_are_the_offline_file_whatever_form_the_store_holds() -> None:
    """The rules the bridge looks for do not depend on the forms found at start-up (issue 35, point 3): the file
    `otel-bridge prometheus-rules` writes offline (no store: every query as served) is the one a store holding the
    families escaped (``vllm_x``: a Prometheus 2.x scraping a negotiating exporter), or under two names at once,
    must run; so every rule selects every name a family may be stored under."""
    offline = rule_for(QUERIES)
    for forms in (("escaped",), ("served", "escaped"), ("ray",)):
        held = [replace(q, forms=forms) for q in QUERIES]
        assert rule_for(held) == offline
        ruleset, problems = find_rules(held, loaded(QUERIES))
        assert ruleset is not None, problems
        assert sorted(ruleset.records) == [1, 2, 3]
    rules = {p.selector: p.expr for p in parts_for(QUERIES)}
    counter = rules[TOKENS]
    for name in ("vllm:generation_tokens_total", "vllm_generation_tokens_total", "ray_vllm_generation_tokens_total"):
        assert f"last_over_time({name}[5m])" in counter
        assert f"resets({name}[5m]) > 0" in rules[RESETS]
    # A server held under two names at once counts once, by its larger value (a counter's latest), as the samples
    # plan reads it: continuous when its name changes within the five minutes.
    assert counter.startswith("sum by (model_name) (max without (otel_bridge_form) (label_replace((last_over_time(")


def test_the_queries_the_rules_serve_are_reread_under_every_form_they_select() -> None:
    """A store found holding the families as served alone: the rules still sum ``vllm_x`` and ``ray_vllm_x``, so a
    re-read target's raw series are asked under those names too and read as served (``as_served``), its share then
    being what the rules summed; a server whose name changed within the five minutes is one series, its counter
    going on across the change, whose last sample is the larger value the rules counted it by."""
    found = [replace(q, forms=("served",)) for q in QUERIES]
    ruleset, _ = find_rules(found, loaded(QUERIES, interval=5.0))
    assert ruleset is not None
    read = read_as_ruled(found, ruleset)
    assert [q.forms for q in read] == [("served",), *[("served", "escaped", "ray")] * 3]  # the gauge as found
    plan = RuledWindow(
        WindowPlan(read, WINDOW, increase_queries=[1, 2, 3], pad_s=2.0, closing_s=5.5, counters=boundary_sums), ruleset
    )
    plan.at_rule_evaluations({"start": 997.0, "end": 1008.0})
    reread = plan.reread_expression({("rollout", "a")}) or ""
    for name in ("vllm:generation_tokens_total", "vllm_generation_tokens_total", "ray_vllm_generation_tokens_total"):
        assert f"|{name}|" in reread.replace('"', "|").replace("=~", "|")
    labels = {"job": "rollout", "instance": "a", "model_name": "m"}
    before = RawSeries("vllm:generation_tokens_total", labels, [(990.0, 100.0), (996.0, 110.0)])
    after = RawSeries("vllm_generation_tokens_total", labels, [(999.0, 115.0), (1004.0, 120.0)])
    merged = as_served(read, [before, after])
    assert len(merged) == 1
    answer = WindowAnswer(rule_times={"start": 997.0, "end": 1008.0})
    key = ("vllm:generation_tokens_total", (("model_name", "m"),))
    # The rules' max over the two names: 110 at 997, max(110, 120) = 120 at 1008.
    assert plan.summed_share(1, merged[0], answer) == (key, 120.0 - 110.0)
