"""Quantiles bounded by what the histogram proves (docs/step-numbers.md, "Window statistics"), through both real paths.

Simulated vLLM servers, a real Prometheus scraping them every second, and two bridges on the same replicas: one on the
scrape path, one on the PromQL path. Each step is quiet for 1.5 s (more than the scrape interval) around the requests,
so both paths read the same boundary samples. Every queue time is far below vLLM's lowest
``request_queue_time_seconds`` bucket (``le=0.3``), where Prometheus' ``histogram_quantile`` reads ~0.3 s.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from otel_bridge import Bridge
from tests.conftest import Replica
from tests.helpers.prometheus_server import PrometheusServer

pytestmark = pytest.mark.sleeps(
    8, reason="each step quiet for QUIET_S (longer than the scrape interval) around its requests"
)

QUIET_S = 1.5
KEY = "rollout/vllm/request_queue_time_seconds"


def complete(replica: Replica, queue_s: float) -> None:
    replica.sim.complete_request(
        prompt_tokens=10, generation_tokens=4, ttft_s=queue_s + 0.01, e2e_s=queue_s + 0.05, queue_s=queue_s, itl_s=0.01
    )


def drive_step(replicas: list[Replica], step: int) -> None:
    time.sleep(QUIET_S)
    for replica in replicas:
        for _ in range(100):
            complete(replica, 1e-5)  # 200 requests in all, each queued 10 us
    if step == 1:
        complete(replicas[0], 0.4)  # and one in the second bucket, (0.3, 0.5]
    time.sleep(QUIET_S)


@pytest.mark.integration
def test_p99_of_tiny_queue_times_is_bounded_by_the_sum_on_both_paths(
    tmp_path: Path, replicas: list[Replica], prometheus: PrometheusServer
) -> None:
    metrics = [
        {"name": "vllm:request_queue_time_seconds", "type": "histogram", "stats": ["count", "sum", "p50", "p99"]}
    ]

    def config(name: str, **source: Any) -> dict[str, Any]:
        return {
            "metrics": metrics,
            "trackers": [{"type": "jsonl"}],
            "run": {"name": name, "dir": str(tmp_path)},
            **source,
        }

    scrape = config("scrape", scrape={"targets": [r.url for r in replicas], "sample_interval_s": 0.25})
    promql = config("promql", prometheus={"url": prometheus.url, "scrape_interval_s": 1.0})
    with Bridge.from_config(scrape) as via_scrape, Bridge.from_config(promql) as via_promql:
        for step in range(2):
            with via_scrape.step(step), via_promql.step(step):
                drive_step(replicas, step)
    runs = [via_scrape.run_dir / "metrics.jsonl", via_promql.run_dir / "metrics.jsonl"]
    for path in runs:
        first, second = (json.loads(line) for line in path.read_text().splitlines())
        # step 0: 200 queue times of 1e-5 s, all in le=0.3; Prometheus' p99 would be 0.3 * 0.99 = 0.297 s
        assert first[f"{KEY}/count"] == 200
        total = first[f"{KEY}/sum"]
        assert total == pytest.approx(0.002, rel=1e-9)
        # k = 198: the 3 largest are each >= p99 and all are >= 0, so p99 <= sum / 3; p50 (k = 100) <= sum / 101
        assert first[f"{KEY}/p99"] == pytest.approx(total / 3, rel=1e-12), path
        assert first[f"{KEY}/p50"] == pytest.approx(total / 101, rel=1e-12), path
        assert first[f"{KEY}/p99"] < 0.001
        # step 1: 200 of 1e-5 s plus one of 0.4 s; k = ceil(0.99 * 201) = 199 is in le=0.3 (C = 200): the 2 ranked
        # 199..200 are each >= p99, the 0.4 s one is > 0.3, so p99 <= (sum - 0.3) / 2 (Prometheus: 0.3 * 198.99 / 200)
        assert second[f"{KEY}/count"] == 201
        total = second[f"{KEY}/sum"]
        assert total == pytest.approx(0.402, rel=1e-9)
        assert second[f"{KEY}/p99"] == pytest.approx((total - 0.3) / 2, rel=1e-9), path
        assert second[f"{KEY}/p99"] == pytest.approx(0.051, rel=1e-6)  # not 0.2985 s
