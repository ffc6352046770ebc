"""WindowPlan: the tagged instant union for one window, and reading its answer back (only tags it issued)."""

from __future__ import annotations

import pytest

from otel_bridge.errors import ConfigError
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.promql._internal.plan import TAG_LABEL, WindowAnswer, WindowPlan
from otel_bridge.producers.promql._internal.sources.samples import boundary_sums, reconcile, summed_share
from otel_bridge.producers.statistics import RawSeries
from otel_bridge.prometheus.answers import PromSeries, QueryResult
from otel_bridge.prometheus.promql import parse_duration, value_alternation
from otel_bridge.window import StepWindow

GAUGE = MetricQuery(key_name="running", name="vllm:num_requests_running", kind="gauge", stats=("last", "max"))
COUNTER = MetricQuery(key_name="tokens", name="vllm:generation_tokens_total", kind="counter", stats=("delta",))
HIST = MetricQuery(key_name="ttft", name="vllm:ttft_seconds", kind="histogram", stats=("count", "p50"))
QUERIES = [GAUGE, COUNTER, HIST]
WINDOW = StepWindow(step=3, start=1000.0, end=1010.0)


def plan(window: StepWindow = WINDOW, *, closing_s: float = 1.5, closing_from: float | None = None) -> WindowPlan:
    return WindowPlan(
        QUERIES,
        window,
        increase_queries=[1, 2],
        pad_s=2.0,
        closing_s=closing_s,
        closing_from=closing_from,
        counters=boundary_sums,
    )


def series(tag: str, value: float, **labels: str) -> PromSeries:
    return PromSeries(labels={TAG_LABEL: tag, **labels}, samples=((1010.0, value),))


def test_every_part_is_evaluated_at_the_window_boundaries() -> None:
    expr = plan().expression
    assert expr is not None
    assert (
        "last_over_time(vllm:generation_tokens_total[12s] @ 1010.000)" in expr
    )  # end: last sample in (start-pad, end]
    assert (
        "last_over_time(vllm:generation_tokens_total[2s] @ 1000.000)" in expr
    )  # start: last sample in (start-pad, start]
    assert "resets(vllm:ttft_seconds_count[12s] @ 1010.000)" in expr  # a histogram's restarts are seen on _count
    assert "sum by (le) (last_over_time(vllm:ttft_seconds_bucket[12s] @ 1010.000))" in expr  # summed per bound
    assert " unless on(" not in expr  # re-read targets are taken out of the sums client-side, not in Prometheus
    assert "(count_over_time(up[10s]) - sum_over_time(up[10s])) > 0" in expr
    assert "min_over_time" not in expr


def test_the_last_window_is_closed_by_the_first_sample_after_its_end() -> None:
    final = plan(StepWindow(step=3, start=1000.0, end=1010.0, final=True))
    expr = final.expression
    assert expr is not None
    assert final.close_at == 1011.5
    assert "min_over_time(vllm:generation_tokens_total[1500ms] @ 1011.500)" in expr
    reread = final.reread_expression({("rollout", "127.0.0.1:8000")})
    assert reread == (
        '{__name__=~"vllm:generation_tokens_total|vllm:ttft_seconds_bucket|vllm:ttft_seconds_count|'
        'vllm:ttft_seconds_sum", instance=~"127\\\\.0\\\\.0\\\\.1:8000"}[311500ms]'
    )


def test_a_last_window_read_by_arrival_is_closed_after_the_series_first_arrivals() -> None:
    """Read by arrival, a series' first sample after the end may hold what its sender read before the end: the last
    window is closed by the first sample after ``closing_from`` (the latest of those first arrivals), and by the first
    after the end only for a series with none later; the lag is measured to the sample used."""
    final = plan(StepWindow(3, 1000.0, 1010.0, final=True), closing_from=1010.5)
    assert final.expression is not None
    assert (
        "(min_over_time(vllm:generation_tokens_total[1s] @ 1011.500) or "
        "min_over_time(vllm:generation_tokens_total[1500ms] @ 1011.500) or "
        "last_over_time(vllm:generation_tokens_total[12s] @ 1010.000))"
    ) in final.expression
    assert "(timestamp(vllm:generation_tokens_total) > 1010.500)[1s:" in final.expression
    samples = [(999.0, 12.0), (1009.0, 5.0), (1010.2, 6.0), (1011.0, 7.0)]
    raw = RawSeries("vllm:generation_tokens_total", {"instance": "a"}, samples)
    assert summed_share(final, 1, raw) == (("vllm:generation_tokens_total", ()), 7.0 - 12.0)
    one_after = RawSeries("vllm:generation_tokens_total", {"instance": "b"}, samples[:3])
    assert summed_share(final, 1, one_after) == (("vllm:generation_tokens_total", ()), 6.0 - 12.0)
    # A target re-read (it restarted in the window): its exact increase runs to the same closing sample.
    restarted = RawSeries(
        "vllm:generation_tokens_total",
        {"job": "push", "instance": "a"},
        [(999.0, 12.0), (1004.0, 2.0), (1009.0, 5.0), (1010.2, 6.0), (1011.0, 7.0)],
    )
    answer = WindowAnswer(
        increases={1: {("vllm:generation_tokens_total", ()): 7.0 - 12.0}}, reread={1: {("push", "a")}}
    )
    reconcile(final, answer, [restarted])
    assert sum(answer.increases[1].values()) == 2.0 + 3.0 + 1.0 + 1.0


def test_the_last_window_without_known_targets_ends_at_its_end() -> None:
    """Series that arrive by remote write (no scrape target: closing_s 0) have no later sample to wait for: the last
    window is read at its end, as the others (it used to ask for a 0 s range, which PromQL refuses)."""
    final = plan(StepWindow(3, 1000.0, 1010.0, final=True), closing_s=0)
    assert final.close_at == 1010.0
    assert final.expression is not None
    assert "last_over_time(vllm:generation_tokens_total[12s] @ 1010.000)" in final.expression
    assert "min_over_time" not in final.expression


def test_a_first_window_asks_only_for_gauge_last() -> None:
    first = plan(StepWindow(step=0, start=None, end=1010.0))
    assert set(first.parts) == {"0/last"}


def test_answer_is_read_by_part_and_foreign_tags_are_ignored() -> None:
    result = QueryResult(
        result_type="vector",
        series=(
            series("0/last", 3.0),
            series("0/max", 5.0),
            series("1/end/0", 140.0),
            series("1/start/0", 100.0),
            series("1/reread", 1.0, job="rollout", instance="127.0.0.1:8001"),
            series("2/end/0", 12.0, le="0.1"),
            series("2/start/0", 10.0, le="0.1"),
            series("2/end/0", 3.0, le="+Inf"),
            series("2/end/2", 3.0),
            series("1/lag/end", 0.4),
            series("1/lag/start", 0.9),
            series("down", 2.0, job="rollout", instance="127.0.0.1:8002"),
            series("-1/last", 99.0),  # never issued: a hostile or foreign label
            series("0/../../x", 99.0),
            series("7/last", 99.0),
        ),
    )
    answer = plan().read(result)
    assert sorted(answer.points) == [0]
    assert [(p.stat, p.value) for p in answer.points[0]] == [("last", 3.0), ("max", 5.0)]
    assert answer.increases[1] == {("vllm:generation_tokens_total", ()): 40.0}
    assert answer.increases[2] == {
        ("vllm:ttft_seconds_bucket", (("le", "0.1"),)): 2.0,
        ("vllm:ttft_seconds_bucket", (("le", "+Inf"),)): 3.0,
        ("vllm:ttft_seconds_count", ()): 3.0,
    }
    assert answer.reread == {1: {("rollout", "127.0.0.1:8001")}}
    assert answer.lag_s == 0.9
    assert answer.failed_scrapes == {("rollout", "127.0.0.1:8002"): 2.0}
    assert answer.answered == {0, 1, 2}


def test_watched_instances_are_asked_whether_prometheus_still_scrapes_them() -> None:
    """Issue 14 finding 21: the instances with a scrape_errors key from ``up`` are checked at the window's end (an
    instant ``up``, which a target Prometheus dropped no longer has), so the producer can forget the ones that left."""
    assert "present" not in plan().parts
    assert plan().read(QueryResult(result_type="vector", series=())).present is None
    watching = WindowPlan(
        QUERIES,
        WINDOW,
        increase_queries=[1, 2],
        pad_s=2.0,
        closing_s=1.5,
        counters=boundary_sums,
        watched=["127.0.0.1:8002", "a|b", ""],
    )
    assert watching.watched == ["127.0.0.1:8002", "a|b"]
    assert watching.expression is not None
    assert 'group by (instance) (up{instance=~"127\\\\.0\\\\.0\\\\.1:8002|a\\\\|b"})' in watching.expression
    answer = watching.read(
        QueryResult(
            result_type="vector",
            series=(
                series("present", 1.0, instance="127.0.0.1:8002"),
                series("present", 1.0, instance="127.0.0.1:9999"),  # not watched: ignored
            ),
        )
    )
    assert answer.present == {"127.0.0.1:8002"}
    assert watching.read(QueryResult(result_type="vector", series=())).present == set()


@pytest.mark.parametrize(
    ("text", "seconds"), [("15s", 15.0), ("1m30s", 90.0), ("500ms", 0.5), ("1h", 3600.0), ("2d", 172800.0)]
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "15", "s", "1m x", "-1s", "1.5.5s"])
def test_parse_duration_refuses_what_is_not_a_duration(text: str) -> None:
    with pytest.raises(ConfigError, match="not a Prometheus duration"):
        parse_duration(text)


def test_value_alternation_escapes_every_regex_character() -> None:
    assert value_alternation(["10.0.0.1:80", "a|b", "x(y)"]) == '"10\\\\.0\\\\.0\\\\.1:80|a\\\\|b|x\\\\(y\\\\)"'
    with pytest.raises(ConfigError):
        value_alternation([])


def test_a_reread_series_share_of_the_sums_mirrors_the_parts() -> None:
    """The client reproduces what Prometheus summed for a re-read series: last sample in (start - pad, end] minus last
    sample in (start - pad, start]; for a final window the smallest sample in (end, close_at] closes it."""
    samples = [(997.0, 10.0), (999.0, 12.0), (1004.0, 2.0), (1009.0, 5.0), (1010.5, 6.0), (1011.0, 7.0)]
    raw = RawSeries("vllm:generation_tokens_total", {"instance": "a"}, samples)
    assert summed_share(plan(), 1, raw) == (("vllm:generation_tokens_total", ()), 5.0 - 12.0)
    final = plan(StepWindow(step=3, start=1000.0, end=1010.0, final=True))
    assert summed_share(final, 1, raw) == (("vllm:generation_tokens_total", ()), 6.0 - 12.0)
    late = RawSeries("vllm:generation_tokens_total", {"instance": "b"}, [(1005.0, 3.0), (1009.0, 4.0)])
    assert summed_share(plan(), 1, late) == (("vllm:generation_tokens_total", ()), 4.0)
