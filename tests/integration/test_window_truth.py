"""Window statistics against a scripted truth, through both producers, with a vLLM restart mid-step.

Two simulated replicas follow a script; the test keeps the truth (tokens generated, requests finished,
time-to-first-token observations, gauge timeline) per step. A real Prometheus scrapes every 1 s; the scrape path
samples every 0.25 s.

Tolerances and why:
- counter delta/rate, histogram count/mean, gauge last/max: exact. Every change happens at one instant with quiet
  periods of 1.5 s (> the 1 s scrape interval) on both sides, so both paths sample every state the script goes through,
  and deltas use samples, not extrapolation (Prometheus' increase() would extrapolate).
- histogram quantiles: a histogram only knows bucket counts, so the estimate must lie in the bucket holding the true
  quantile of the raw observations, and both paths must agree exactly (same bucket increases, same algorithm).
- gauge mean: the mean of the samples inside the window. With evenly spaced samples each phase of the script gets
  its share of samples within one sample, i.e. within (max - min) * phases * interval / window length of the
  time-weighted truth; on a loaded machine samples come late (jitter up to about one interval), so the bound used is
  twice that: |mean - truth| <= 2 * (max - min) * phases * interval / window length.
- The restart of replica 0 happens after its counters passed values the new process will not reach in the same window,
  so the reset is visible to both paths (a restart that climbs past the old value between two samples is not; see
  docs/step-numbers.md).
"""

from __future__ import annotations

import bisect
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from otel_bridge import Bridge
from tests.conftest import Replica
from tests.helpers.prometheus_server import PrometheusServer

pytestmark = pytest.mark.sleeps(
    14,
    reason="QUIET_S of quiet (more than the scrape interval) around each change: Prometheus sees every state",
)

QUIET_S = 1.5
TTFT_BOUNDS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0)


@dataclass
class Truth:
    """What the script did during one step."""

    tokens: int = 0
    requests: int = 0
    ttft: list[float] = field(default_factory=list)
    running: list[tuple[float, float]] = field(default_factory=list)  # (time set, summed value)


def finish(replica: Replica, truth: Truth, tokens: int, ttft: float) -> None:
    replica.sim.complete_request(
        prompt_tokens=32, generation_tokens=tokens, ttft_s=ttft, e2e_s=ttft + 0.3, queue_s=0.001, itl_s=0.01
    )
    truth.tokens += tokens
    truth.requests += 1
    truth.ttft.append(ttft)


def set_running(replicas: list[Replica], truth: Truth, values: tuple[int, int]) -> None:
    for replica, value in zip(replicas, values, strict=True):
        replica.sim.set_running(value)
    truth.running.append((time.time(), float(sum(values))))


def script(step: int, replicas: list[Replica], truth: Truth) -> None:
    time.sleep(QUIET_S)
    for k in range(4):
        finish(replicas[0], truth, 30 + step + k, 0.03 + 0.01 * k)
        finish(replicas[1], truth, 20 + k, 0.015 + 0.005 * k)
    set_running(replicas, truth, (3 + step, 1 + 2 * step))
    time.sleep(QUIET_S)
    if step == 1:
        replicas[0].sim.restart()  # vLLM restarted mid-step: counters and histograms start again from zero
        set_running(replicas, truth, (0, 1 + 2 * step))
        finish(replicas[0], truth, 5, 0.09)  # 5 tokens and one slow request: below every pre-restart value
        set_running(replicas, truth, (2, 1 + 2 * step))
        time.sleep(QUIET_S)


def time_weighted_mean(timeline: list[tuple[float, float]], start: float, end: float) -> float:
    area = 0.0
    for (t, value), nxt in zip(timeline, [*timeline[1:], (end, math.nan)], strict=True):
        lo, hi = max(t, start), min(nxt[0], end)
        if hi > lo:
            area += value * (hi - lo)
    return area / (end - start)


def bucket_of(value: float) -> tuple[float, float]:
    index = bisect.bisect_left(TTFT_BOUNDS, value)
    return (TTFT_BOUNDS[index - 1] if index else 0.0), (TTFT_BOUNDS[index] if index < len(TTFT_BOUNDS) else math.inf)


def true_quantile(q: float, values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def check_against_truth(record: dict[str, Any], truth: Truth, interval_s: float, prior: float) -> None:
    start, end = record["window_start"], record["time"]
    window_s = end - start
    assert record["rollout/vllm/generation_tokens_total/delta"] == truth.tokens
    assert record["rollout/vllm/generation_tokens_total/rate"] == pytest.approx(truth.tokens / window_s, rel=1e-9)
    assert record["rollout/vllm/request_success_total/delta"] == truth.requests
    assert record["rollout/vllm/time_to_first_token_seconds/count"] == len(truth.ttft)
    assert record["rollout/vllm/time_to_first_token_seconds/mean"] == pytest.approx(
        math.fsum(truth.ttft) / len(truth.ttft), rel=1e-9
    )
    for stat, q in (("p50", 0.5), ("p99", 0.99)):
        lo, hi = bucket_of(true_quantile(q, truth.ttft))
        assert lo <= record[f"rollout/vllm/time_to_first_token_seconds/{stat}"] <= hi, stat
    timeline = [(start, prior), *truth.running]
    values = [v for _, v in timeline]
    assert record["rollout/vllm/num_requests_running/last"] == values[-1]
    assert record["rollout/vllm/num_requests_running/max"] == max(values)
    allowed = 2 * (max(values) - min(values)) * len(timeline) * interval_s / window_s
    truth_mean = time_weighted_mean(timeline, start, end)
    assert abs(record["rollout/vllm/num_requests_running/mean"] - truth_mean) <= allowed + 1e-9


@pytest.mark.integration
def test_both_producers_follow_the_scripted_truth_through_a_restart(
    tmp_path: Path, replicas: list[Replica], prometheus: PrometheusServer
) -> None:
    metrics: list[dict[str, Any]] = [
        {"name": "vllm:generation_tokens_total", "type": "counter"},
        {"name": "vllm:request_success_total", "type": "counter"},
        {"name": "vllm:time_to_first_token_seconds", "type": "histogram", "stats": ["count", "mean", "p50", "p99"]},
        {"name": "vllm:num_requests_running", "type": "gauge", "stats": ["last", "max", "mean"]},
    ]

    def config(name: str, **source: Any) -> dict[str, Any]:
        return {"metrics": metrics, "run": {"name": name, "dir": str(tmp_path)}, **source}

    truths = [Truth() for _ in range(3)]
    with (
        Bridge.from_config(config("promql", prometheus={"url": prometheus.url, "scrape_interval_s": 1})) as via_promql,
        Bridge.from_config(
            config("scrape", scrape={"targets": [r.url for r in replicas], "sample_interval_s": 0.25})
        ) as via_scrape,
    ):
        for step, truth in enumerate(truths):
            with via_promql.step(step), via_scrape.step(step):
                script(step, replicas, truth)
    promql_records = [via_promql.record(s) for s in range(3)]  # close() delivered every step
    scrape_records = [via_scrape.record(s) for s in range(3)]

    prior = 0.0
    for step, truth in enumerate(truths):
        p, s = promql_records[step], scrape_records[step]
        assert p is not None
        assert s is not None
        p_values = {**p.values, "time": p.time, "window_start": p.window_start}
        s_values = {**s.values, "time": s.time, "window_start": s.window_start}
        check_against_truth(p_values, truth, 1.0, prior)
        check_against_truth(s_values, truth, 0.25, prior)
        for key, value in p.values.items():
            if key.startswith("rollout/") and not key.endswith(("/mean", "/rate")):
                assert s.values[key] == value, (step, key)
        prior = truth.running[-1][1]
