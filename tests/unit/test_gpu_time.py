"""Where a step's GPU time went: idle GPU-seconds from a utilization gauge, energy in joules from a millijoule counter,
tokens per joule as a ratio of two deltas, the same numbers from the scrape path's samples and the PromQL plan."""

from __future__ import annotations

from dataclasses import replace

import pytest

from otel_bridge.config import BridgeConfig, MetricConfig
from otel_bridge.errors import ConfigError
from otel_bridge.producers.metric_set import MetricQuery, resolve_metrics
from otel_bridge.producers.promql._internal.plan import TAG_LABEL, WindowPlan
from otel_bridge.producers.promql._internal.sources.samples import boundary_sums
from otel_bridge.producers.statistics import RawSeries, compute_stats, idle_seconds, to_metric
from otel_bridge.prometheus.answers import PromSeries, QueryResult
from otel_bridge.window import StepWindow

WINDOW = StepWindow(step=4, start=1000.0, end=1010.0)
UTIL = MetricQuery(
    key_name="DCGM_FI_DEV_GPU_UTIL:gpus",
    name="DCGM_FI_DEV_GPU_UTIL",
    kind="gauge",
    stats=("idle_seconds",),
    agg="sum",
    full_scale=100.0,
)


def gpu(index: str, host: str, values: list[float]) -> RawSeries:
    """A GPU's utilization sampled every 2 s from t=1000 (the sample at the window's start is outside it)."""
    samples = [(1000.0 + 2 * i, v) for i, v in enumerate(values)]
    return RawSeries("DCGM_FI_DEV_GPU_UTIL", {"gpu": index, "Hostname": host}, samples)


def test_idle_seconds_is_the_window_times_the_share_of_in_window_samples_not_busy() -> None:
    # In-window samples: 100, 100, 0, 0, 50 -> mean 50 % -> 5 of the 10 seconds idle; the 0 at t=1000 is outside.
    samples = [(1000.0, 0.0), (1002.0, 100.0), (1004.0, 100.0), (1006.0, 0.0), (1008.0, 0.0), (1010.0, 50.0)]
    assert idle_seconds(samples, WINDOW, 100.0) == pytest.approx(5.0)
    assert idle_seconds(samples, StepWindow(step=0, start=None, end=1010.0), 100.0) is None
    assert idle_seconds([(999.0, 10.0)], WINDOW, 100.0) is None  # no sample inside: nothing is known


def test_idle_gpu_seconds_are_summed_over_gpus_and_kept_apart_by_node() -> None:
    series = [
        gpu("0", "node-a", [0, 100, 100, 100, 100, 100]),  # busy: 0 idle
        gpu("1", "node-a", [0, 0, 0, 0, 0, 0]),  # idle all window: 10
        gpu("0", "node-b", [0, 50, 50, 50, 50, 50]),  # half: 5
    ]
    points = compute_stats(UTIL, series, WINDOW)
    assert points is not None
    assert [(p.group, p.value) for p in points] == [((), pytest.approx(15.0))]
    per_node = compute_stats(MetricQuery(**{**_fields(UTIL), "by": ("Hostname",)}), series, WINDOW)
    assert per_node is not None
    assert {p.group: p.value for p in per_node} == {
        (("Hostname", "node-a"),): pytest.approx(10.0),
        (("Hostname", "node-b"),): pytest.approx(5.0),
    }


def test_scale_turns_a_millijoule_counter_into_joules_per_window() -> None:
    energy = MetricQuery(
        key_name="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION:joules",
        name="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        kind="counter",
        stats=("delta",),
        scale=0.001,
    )
    series = [RawSeries(energy.name or "", {"gpu": "0"}, [(999.0, 5_000_000.0), (1010.0, 5_700_000.0)])]
    points = compute_stats(energy, series, WINDOW)
    assert points is not None
    metric = to_metric(energy, points, WINDOW)
    values = [point.value for point in metric.data.data_points]  # type: ignore[union-attr]
    assert values == [pytest.approx(700.0)]  # 700,000 mJ


def test_tokens_per_joule_is_a_scaled_ratio_of_two_deltas() -> None:
    (query,) = resolve_metrics(
        [
            MetricConfig.model_validate(
                {
                    "ratio": {"numerator": "vllm:generation_tokens_total", "denominator": "energy_mj"},
                    "alias": "tokens_per_joule",
                    "scale": 1000,
                }
            )
        ]
    )
    series = [
        RawSeries("vllm:generation_tokens_total", {}, [(999.0, 100.0), (1010.0, 4100.0)]),
        RawSeries("energy_mj", {}, [(999.0, 0.0), (1010.0, 2_000_000.0)]),
    ]
    points = compute_stats(query, series, WINDOW)
    assert points is not None
    metric = to_metric(query, points, WINDOW)
    assert [p.value for p in metric.data.data_points] == [pytest.approx(2.0)]  # type: ignore[union-attr]


def test_the_promql_plan_asks_prometheus_for_the_same_idle_seconds() -> None:
    plan = WindowPlan([UTIL], WINDOW, increase_queries=[], pad_s=2.0, closing_s=0.0, report_down=False)
    expr = plan.expression
    assert expr is not None
    # a GPU with a value outside [0, 100] in the window is left out, and counted, as compute_stats does
    out_of_range = "(max_over_time(DCGM_FI_DEV_GPU_UTIL[10s]) > 100.0 or min_over_time(DCGM_FI_DEV_GPU_UTIL[10s]) < 0)"
    assert f"sum ((10.0 * (1 - avg_over_time(DCGM_FI_DEV_GPU_UTIL[10s]) / 100.0)) unless {out_of_range})" in expr
    assert f"count ({out_of_range})" in expr
    answer = plan.read(
        QueryResult(
            result_type="vector",
            series=(PromSeries(labels={TAG_LABEL: "0/idle_seconds"}, samples=((1010.0, 15.0),)),),
        )
    )
    assert [(p.stat, p.value) for p in answer.points[0]] == [("idle_seconds", 15.0)]


def test_a_first_window_has_no_idle_seconds_in_either_path() -> None:
    first = StepWindow(step=0, start=None, end=1010.0)
    assert compute_stats(UTIL, [gpu("0", "a", [0, 0])], first) == []
    plan = WindowPlan([UTIL], first, increase_queries=[], pad_s=2.0, closing_s=0.0, report_down=False)
    assert plan.expression is None


def test_idle_seconds_without_full_scale_says_what_to_set() -> None:
    with pytest.raises(ConfigError) as info:
        BridgeConfig.from_dict(
            {
                "prometheus": {"url": "http://127.0.0.1:9090"},
                "metrics": [{"name": "DCGM_FI_PROF_SM_ACTIVE", "type": "gauge", "stats": ["idle_seconds"]}],
            }
        )
    message = str(info.value)
    assert "metrics[0]" in message
    assert "full_scale" in message


def _fields(query: MetricQuery) -> dict[str, object]:
    return {name: getattr(query, name) for name in query.__dataclass_fields__}


ROLES = {
    "rollout": [{"Hostname": "node-a"}, {"Hostname": "node-b", "gpu": "0"}],
    "trainer": [{"Hostname": "node-b"}],  # colocated on node-b: its GPU 0 serves both roles
}


def role_query(kind: str = "gauge") -> MetricQuery:
    (query,) = [
        q
        for q in resolve_metrics([MetricConfig(preset="dcgm", by=["role"])], ROLES)
        if q.key_name
        == ("DCGM_FI_DEV_GPU_UTIL:gpus" if kind == "gauge" else "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION:joules")
    ]
    return query


def test_roles_group_gpus_by_what_they_serve_named_once_by_host_and_gpu_index() -> None:
    series = [
        gpu("0", "node-a", [0, 100, 100, 100, 100, 100]),  # rollout: 0 idle
        gpu("1", "node-a", [0, 0, 0, 0, 0, 0]),  # rollout: 10 idle
        gpu("0", "node-b", [0, 50, 50, 50, 50, 50]),  # rollout and trainer: 5 idle in each
        gpu("1", "node-b", [0, 100, 100, 100, 100, 100]),  # trainer: 0 idle
        gpu("0", "node-c", [0, 0, 0, 0, 0, 0]),  # in no role: left out
    ]
    points = compute_stats(role_query(), series, WINDOW)
    assert points is not None
    assert {p.group: p.value for p in points} == {
        (("role", "rollout"),): pytest.approx(15.0),
        (("role", "trainer"),): pytest.approx(5.0),
    }


def test_the_promql_plan_gives_each_series_its_roles_as_the_scrape_path_does() -> None:
    gauge, counter = role_query(), role_query("counter")
    plan = WindowPlan(
        [gauge, counter],
        WINDOW,
        increase_queries=[1],
        pad_s=2.0,
        closing_s=0.0,
        counters=boundary_sums,
        report_down=False,
    )
    expr = plan.expression
    assert expr is not None

    def idle(matchers: str) -> str:
        sel = f"DCGM_FI_DEV_GPU_UTIL{{{matchers}}}[10s]"
        out_of_range = f"(max_over_time({sel}) > 100.0 or min_over_time({sel}) < 0)"
        return f"(10.0 * (1 - avg_over_time({sel}) / 100.0)) unless {out_of_range}"

    node_a, node_b_gpu0, node_b = 'Hostname="node-a"', 'Hostname="node-b",gpu="0"', 'Hostname="node-b"'
    assert (
        f'sum by (role) ((label_replace({idle(node_a)}, "role", "rollout", "", "")) or '
        f'(label_replace({idle(node_b_gpu0)}, "role", "rollout", "", "")) or '
        f'(label_replace({idle(node_b)}, "role", "trainer", "", "")))'
    ) in expr
    end = 'last_over_time(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{Hostname="node-b"}[12s] @ 1010.000)'
    assert f'label_replace({end}, "role", "trainer", "", "")' in expr


def test_roles_name_real_labels() -> None:
    with pytest.raises(ConfigError) as info:
        BridgeConfig.from_dict({"prometheus": {"url": "http://127.0.0.1:9090"}, "roles": {"rollout": [{}]}})
    assert "roles" in str(info.value)
    assert "label set" in str(info.value)


def test_a_request_count_with_busy_at_1_is_idle_for_the_share_of_its_samples_at_zero() -> None:
    """Issue 39: a rollout server is busy while it runs at least one request; ``vllm:num_requests_running`` with
    ``busy_at: 1`` gives the seconds it ran none (a sample of 7 running requests is as busy as one of 1, and no
    impossible value: that is ``full_scale``'s)."""
    running = replace(
        UTIL,
        key_name="vllm:num_requests_running:servers",
        name="vllm:num_requests_running",
        full_scale=None,
        busy_at=1,
    )
    # in-window samples 7, 0, 3, 0, 0 -> 3 of 5 at zero -> 6 of the 10 seconds idle (the 0 at t=1000 is outside)
    busy = [(1000.0, 0.0), (1002.0, 7.0), (1004.0, 0.0), (1006.0, 3.0), (1008.0, 0.0), (1010.0, 0.0)]
    assert idle_seconds(busy, WINDOW, 1.0) == pytest.approx(6.0)
    idle = [(1000.0 + 2 * i, 0.0) for i in range(6)]
    points = compute_stats(
        running,
        [
            RawSeries("vllm:num_requests_running", {"instance": "a"}, busy),
            RawSeries("vllm:num_requests_running", {"instance": "b"}, idle),
        ],
        WINDOW,
        impossible=lambda *_: pytest.fail("a count above busy_at is no impossible value"),
    )
    assert points is not None
    assert [p.value for p in points] == [pytest.approx(16.0)]  # server-seconds: 6 + 10
    # a utilization above its full scale (a rounding exporter) is fully busy, never negative idle time
    assert idle_seconds([(1002.0, 104.0), (1004.0, 100.0)], WINDOW, 100.0) == 0.0


def test_each_sample_stands_for_the_time_since_the_previous_one() -> None:
    """Issue 39: the scrape path reads at every phase boundary, so a busy stretch full of short phases has many
    samples and an idle one (a weight sync) few: a plain mean of the samples would let the busy stretch outweigh the
    idle one. 1.3 s busy (four samples), then 8.7 s idle (one sample): 8.7 idle seconds, not 10 x 1/5 = 2."""
    bunched = [(1001.0, 1.0), (1001.1, 1.0), (1001.2, 1.0), (1001.3, 1.0), (1010.0, 0.0)]
    assert idle_seconds(bunched, WINDOW, 1.0) == pytest.approx(8.7)
    # the last sample also stands for the time up to the window's end
    assert idle_seconds([(1002.0, 0.0), (1004.0, 1.0)], WINDOW, 1.0) == pytest.approx(2.0)


def test_the_promql_plan_holds_a_count_to_busy_at_as_the_scrape_path_does() -> None:
    """A count's idle seconds on the PromQL path: each value held to ``[0, busy_at]`` (a subquery at the scrape
    interval, since ``clamp`` takes an instant vector), so 7 running requests count as busy, not as -6 idle."""
    running = replace(UTIL, name="vllm:num_requests_running", full_scale=None, busy_at=1.0)
    plan = WindowPlan([running], WINDOW, increase_queries=[], pad_s=2.0, closing_s=0.0, report_down=False)
    assert plan.expression is not None
    assert "10.0 * (1 - avg_over_time(clamp(vllm:num_requests_running, 0, 1.0)[10s:1s]) / 1.0)" in plan.expression
