"""Requests per step: how many HTTP requests reach Prometheus per training step, for 1, 20 and 100 metrics.

Same stack as the boundary suite (real Prometheus, two simulated vLLM servers); the counting proxy adds no latency.
Requests are counted at the proxy from the first step to the delivery of the last one (start-up checks excluded),
and divided by the number of steps. 100 metrics = the 20 of ``TWENTY_METRICS`` plus four aliased copies of each.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from bench.common import DelayProxy, prometheus_stack, pyplot, save_figure, write_result
from otel_bridge import Bridge
from tests.helpers.metric_sets import TWENTY_METRICS

NAME = "requests"
COUNTS = (1, 20, 100)
STEP_S = 1.1  # longer than the 1 s scrape interval, so every gauge has a sample in each window
_log = logging.getLogger(__name__)


def metric_set(count: int) -> list[dict[str, Any]]:
    """``count`` metric configurations: TWENTY_METRICS, then aliased copies of them."""
    out: list[dict[str, Any]] = []
    copy = 0
    while len(out) < count:
        for metric in TWENTY_METRICS:
            if len(out) == count:
                break
            out.append(metric if copy == 0 else {**metric, "alias": f"copy{copy}_{metric['name'].split(':', 1)[1]}"})
        copy += 1
    return out


def run(quick: bool, workdir: Path) -> dict[str, Any]:
    """Run the suite; write ``results/requests.json`` and ``.png``; return the rows for the README table."""
    steps = 3 if quick else 8
    rows = []
    runs: dict[str, Any] = {}
    with prometheus_stack(workdir / "requests") as prometheus_url, DelayProxy(prometheus_url, 0.0) as proxy:
        for count in COUNTS:
            metrics = metric_set(count)
            config = {
                "prometheus": {"url": proxy.url, "scrape_interval_s": 1.0},
                "metrics": metrics,
                "trackers": [{"type": "jsonl"}],
                "run": {"name": f"requests-{count}", "dir": str(workdir / "runs")},
            }
            at_build = proxy.count
            with Bridge.from_config(config) as bridge:
                at_start = proxy.count
                per_step: list[int] = []
                answered: list[int] = []
                missing: list[float] = []
                for step in range(steps):
                    before = proxy.count
                    with bridge.step(step):
                        time.sleep(STEP_S)
                    record = bridge.collect(step)
                    per_step.append(proxy.count - before)
                    missing.append(record.get("otel_bridge/missing_metrics", float("nan")))
                    answered.append(sum(1 for k in record if k.startswith(("rollout/vllm/", "rollout/copy"))))
                total = proxy.count - at_start
            runs[str(count)] = {
                "metrics": metrics,
                "startup_requests": at_start - at_build,
                "requests_per_step_samples": per_step,
                "record_infra_keys": answered,
                "missing_metrics": missing,
                "steps": steps,
                "requests_total": total,
            }
            rows.append({
                "metrics": count,
                "requests_per_step": total / steps,
                "max_in_one_step": max(per_step),
                "startup_requests": at_start - at_build,
                "missing_metrics_max": max(missing),
                "target_le_2": max(per_step) <= 2,
            })  # fmt: skip
            _log.info("requests: %d metrics -> %.2f requests/step", count, total / steps)
    write_result(NAME, {"configuration": {"steps": steps, "step_s": STEP_S, "counts": list(COUNTS)}, "runs": runs,
                        "rows": rows})  # fmt: skip
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.bar([str(r["metrics"]) for r in rows], [r["requests_per_step"] for r in rows], label="otel-bridge")
    ax.plot([str(r["metrics"]) for r in rows], list(COUNTS), "o--", color="grey", label="one query per metric")
    ax.axhline(2, color="red", linestyle=":", label="target <= 2")
    ax.set_xlabel("configured metrics")
    ax.set_ylabel("HTTP requests to Prometheus per step")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    save_figure(fig, NAME)
    return {"rows": rows}
