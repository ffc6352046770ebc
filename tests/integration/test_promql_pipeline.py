"""End to end through a real Prometheus: PromQL path, scrape path, trackers read back.

The workload is scripted so that both paths must see identical samples: every step is quiet for 1.5 s (more than
the 1 s scrape interval), then requests complete and gauges change at once, then it is quiet for 1.5 s again. So
Prometheus' last sample before a boundary equals the state at the boundary, exactly what the scrape path reads.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from otel_bridge import Bridge
from otel_bridge.producers.statistics import quantile_bounds
from otel_bridge.prometheus.promql import duration
from tests.conftest import Replica
from tests.helpers.http_servers import forwarding_proxy
from tests.helpers.metric_sets import TWENTY_METRICS
from tests.helpers.prometheus_server import PrometheusServer, either_name

pytestmark = pytest.mark.sleeps(
    16,
    reason="each step is quiet for QUIET_S (more than the 1 s scrape interval) before and after its workload",
)

QUIET_S = 1.5
STEPS = 4
SAMPLE_GAP = "otel_bridge/sample_gap_s"  # the longest stretch of a window without one of the scrape path's samples
GAUGE_SAMPLE_STATISTICS = ("/last", "/max", "/min")  # a gauge's statistics over the samples in the window


def drive_step(replicas: list[Replica], step: int) -> None:
    """The scripted workload of one step (see the module docstring)."""
    time.sleep(QUIET_S)
    for index, replica in enumerate(replicas):
        for k in range(3 + step + index):
            replica.sim.complete_request(
                prompt_tokens=100 + 10 * k,
                generation_tokens=40 + step + k,
                ttft_s=0.02 * (k + 1) + 0.01 * step,
                e2e_s=0.5 + 0.1 * k,
                queue_s=0.005 * (k + 1),
                itl_s=0.01 + 0.002 * k,
                cached_prompt_tokens=20 * index,
            )
        replica.sim.set_running(2 + step + index)
        replica.sim.set_waiting(step)
        replica.sim.set_kv_cache_usage(0.1 * (step + 1) + 0.05 * index)
    time.sleep(QUIET_S)


def bridge_config(tmp_path: Path, name: str, **source: Any) -> dict[str, Any]:
    return {
        "metrics": [{"preset": "vllm"}],
        "trackers": [{"type": "jsonl"}, {"type": "tensorboard"}],
        "run": {"name": name, "dir": str(tmp_path / "runs")},
        **source,
    }


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def read_tensorboard(logdir: Path) -> dict[str, dict[int, float]]:
    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def scalar(prometheus: PrometheusServer, expr: str, at: float) -> float:
    result = prometheus.query(expr, at=at)
    assert len(result) == 1, f"{expr} at {at}: {result}"
    return float(result[0]["value"][1])


def expected_from_prometheus(prometheus: PrometheusServer, record: dict[str, Any]) -> dict[str, float]:
    """What Prometheus itself answers, one query per statistic, at the record's time= and window length.

    A quantile is Prometheus' ``histogram_quantile`` moved into the interval that Prometheus' own bucket and ``_sum``
    increases prove (docs/step-numbers.md, "Window statistics"), as both paths report it.
    """
    end = round(record["time"], 3)
    length = duration(record["time"] - record["window_start"])

    def delta(name: str) -> str:
        return f"sum({either_name(name)}) - sum({either_name(name)} offset {length})"

    def bucket_increases(name: str) -> str:
        buckets = either_name(f"{name}_bucket")
        return f"sum by (le) ({buckets}) - sum by (le) ({buckets} offset {length})"

    def quantile(q: float, name: str) -> str:
        return f"histogram_quantile({q}, {bucket_increases(name)})"

    ttft = "vllm:time_to_first_token_seconds"
    running, kv = either_name("vllm:num_requests_running"), either_name("vllm:kv_cache_usage_perc")
    queries = {
        "rollout/vllm/generation_tokens_total/delta": delta("vllm:generation_tokens_total"),
        "rollout/vllm/prompt_tokens_total/delta": delta("vllm:prompt_tokens_total"),
        "rollout/vllm/request_success_total/delta": delta("vllm:request_success_total"),
        "rollout/vllm/num_requests_running/last": f"sum(last_over_time({running}[{length}]))",
        "rollout/vllm/num_requests_running/max": f"sum(max_over_time({running}[{length}]))",
        "rollout/vllm/kv_cache_usage_perc/max": f"max(max_over_time({kv}[{length}]))",
        "rollout/vllm/kv_cache_usage_perc/mean": f"max(avg_over_time({kv}[{length}]))",
        "rollout/vllm/prefix_cache_hit_rate": (
            f"({delta('vllm:prefix_cache_hits_total')}) / ({delta('vllm:prefix_cache_queries_total')})"
        ),
        "rollout/vllm/time_to_first_token_seconds/count": delta(f"{ttft}_count"),
        "rollout/vllm/time_to_first_token_seconds/mean": f"({delta(f'{ttft}_sum')}) / ({delta(f'{ttft}_count')})",
    }

    def proven_quantile(q: float, name: str) -> float:
        estimate = scalar(prometheus, quantile(q, name), end)
        increases = bucket_increases(name)
        buckets = [(float(row["metric"]["le"]), float(row["value"][1])) for row in prometheus.query(increases, at=end)]
        bounds = quantile_bounds(q, buckets, scalar(prometheus, delta(f"{name}_sum"), end))
        return estimate if bounds is None else min(max(estimate, bounds[0]), bounds[1])

    expected = {key: scalar(prometheus, expr, end) for key, expr in queries.items()}
    expected["rollout/vllm/time_to_first_token_seconds/p50"] = proven_quantile(0.5, ttft)
    expected["rollout/vllm/time_to_first_token_seconds/p99"] = proven_quantile(0.99, ttft)
    return expected


@pytest.mark.integration
def test_promql_and_scrape_paths_agree_with_prometheus(
    tmp_path: Path, replicas: list[Replica], prometheus: PrometheusServer
) -> None:
    promql_source = {"prometheus": {"url": prometheus.url, "scrape_interval_s": 1.0}}
    scrape_source = {"scrape": {"targets": [r.url for r in replicas], "sample_interval_s": 0.25}}
    with (
        Bridge.from_config(bridge_config(tmp_path, "promql", **promql_source)) as via_promql,
        Bridge.from_config(bridge_config(tmp_path, "scrape", **scrape_source)) as via_scrape,
    ):
        for step in range(STEPS):
            with via_promql.step(step), via_scrape.step(step):
                drive_step(replicas, step)
                via_promql.log({"actor/loss": 1.0 / (step + 1)}, step=step)
                via_scrape.log({"actor/loss": 1.0 / (step + 1)}, step=step)

    promql_records = read_jsonl(via_promql.run_dir / "metrics.jsonl")
    scrape_records = read_jsonl(via_scrape.run_dir / "metrics.jsonl")
    assert [r["step"] for r in promql_records] == list(range(STEPS))
    assert [r["step"] for r in scrape_records] == list(range(STEPS))

    # 1. The PromQL path reports what Prometheus answers for the same statistic at the same time=.
    for record in promql_records:
        expected = expected_from_prometheus(prometheus, record)
        for key, value in expected.items():
            assert record[key] == pytest.approx(value, rel=1e-9, abs=1e-12), (record["step"], key)

    # 2. The scripted truth: tokens generated during each step, over both replicas.
    for record in promql_records:
        step = record["step"]
        generated = sum(40 + step + k for index in range(2) for k in range(3 + step + index))
        assert record["rollout/vllm/generation_tokens_total/delta"] == generated
        assert record["rollout/vllm/request_success_total/delta"] == (3 + step) + (4 + step)
        assert record["rollout/vllm/num_requests_running/last"] == (2 + step) + (3 + step)
        assert record["actor/loss"] == pytest.approx(1.0 / (step + 1))

    # 3. The scrape path gives the same values (each rate divides by its own bridge's window; a gauge's mean and its
    #    idle seconds, a time average, depend on where each path sampled, so they are not compared). A gauge's other
    #    statistics are its samples in the window, and a sample counts when it was answered by the window's end: the
    #    one that sees the step's gauges is taken in the quiet spell after they changed, which a saturated machine can
    #    leave without a sample answered in time. The record says so (its longest stretch without a sample): then each
    #    replica's last sample holds its gauge of this step or of the one before, nothing else.
    previous: dict[str, Any] = {}
    for via_p, via_s in zip(promql_records, scrape_records, strict=True):
        sampled_after_the_change = via_s[SAMPLE_GAP] < QUIET_S
        compared = [
            k
            for k in via_p
            if k.startswith("rollout/")
            and k != "rollout/vllm/kv_cache_usage_perc/mean"
            and not k.endswith("/idle_seconds")
        ]
        assert len(compared) >= 15
        for key in compared:
            if key.endswith("/rate"):  # each bridge divides by its own window: compare the implied deltas
                p_seconds = via_p["time"] - via_p["window_start"]
                s_seconds = via_s["time"] - via_s["window_start"]
                assert via_s[key] * s_seconds == pytest.approx(via_p[key] * p_seconds, rel=1e-9), key
            elif key.endswith(GAUGE_SAMPLE_STATISTICS) and not sampled_after_the_change:
                low, high = sorted((previous.get(key, 0.0), via_p[key]))  # the simulators start at 0
                assert low - 1e-9 <= via_s[key] <= high + 1e-9, (via_p["step"], key, via_s[SAMPLE_GAP])
            else:
                assert via_s[key] == pytest.approx(via_p[key], rel=1e-9), (via_p["step"], key, via_s[SAMPLE_GAP])
        previous = via_p

    # 4. TensorBoard holds the same numbers as the JSONL (float32).
    for run_dir, records in ((via_promql.run_dir, promql_records), (via_scrape.run_dir, scrape_records)):
        scalars = read_tensorboard(run_dir / "tensorboard")
        for record in records:
            for key, value in record.items():
                if key in ("step", "time", "window_start", "_notes"):
                    continue
                assert scalars[key][record["step"]] == pytest.approx(value, rel=1e-6, abs=1e-6), key


@pytest.mark.integration
def test_twenty_metrics_cost_at_most_two_requests_per_step(
    tmp_path: Path, replicas: list[Replica], prometheus: PrometheusServer
) -> None:
    assert len(TWENTY_METRICS) == 20
    steps = 3
    with forwarding_proxy(prometheus.url) as proxy:
        config = {
            "prometheus": {"url": proxy.url, "scrape_interval_s": 1.0},
            "metrics": TWENTY_METRICS,
            "trackers": [{"type": "jsonl"}],
            "run": {"name": "count", "dir": str(tmp_path / "runs")},
        }
        with Bridge.from_config(config) as bridge:
            at_start = len(proxy.requests)
            for step in range(steps):
                with bridge.step(step):
                    drive_step(replicas, step)
            records = [bridge.collect(step) for step in range(steps)]
            per_step = len(proxy.requests) - at_start
    assert per_step <= 2 * steps, [r.path for r in proxy.requests]
    for record in records:
        answered = {key.split("/")[2] for key in record if key.startswith("rollout/vllm/")}
        assert len(answered) == 20, sorted(answered)
        assert record["otel_bridge/missing_metrics"] == 0
        assert not math.isnan(record["rollout/vllm/time_to_first_token_seconds/p99"])
