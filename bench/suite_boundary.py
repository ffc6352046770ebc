"""Step-boundary cost: what ``with bridge.step(n)`` and ``bridge.log(...)`` cost the training thread.

20 configured metrics (``TWENTY_METRICS``, PromQL path), a real Prometheus scraping two simulated vLLM servers (each
its own process, with a seeded request workload), behind a real HTTP proxy on 127.0.0.1 adding 0, 20 or 200 ms to
every request. Per step the suite times, on the training thread: entering ``with bridge.step(n)`` (which commits the
previous step to the delivery queue), ``bridge.log(<10 keys>, step=n)`` and leaving the block. The step's "work" is a
``time.sleep(STEP_S)``.

Baseline in the same run, same proxy: :class:`bench.baselines.sequential_client.SequentialPrometheusClient` (one
blocking instant query per metric, 10 s cache), called once per step on the training thread.

Configuration (documented in bench/README.md): steps are compressed to ``STEP_S`` = 5 ms, i.e. 200 steps/s, far more
than any RL trainer. The bridge's worker needs at least two round trips (2 x latency) per step, so at 20 and 200 ms it
falls behind by design. ``delivery.queue_size`` is set to ``QUEUE_SIZE`` (>= steps) so that the whole run fits in the
queue: the measurement is then the boundary's own cost, not the backpressure of a full queue (with the default
``queue_size: 100`` and ``max_block_s: 0.5`` the 101st waiting step would block up to 0.5 s and then drop the oldest
step's infrastructure readings, which is the documented policy; a real step lasting seconds never fills it).
``close()`` is then given ``CLOSE_S`` seconds; the steps still unassembled are reported, not waited for.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.baselines.sequential_client import SequentialPrometheusClient, instant_query_names
from bench.common import DelayProxy, prometheus_stack, pyplot, save_figure, summary, write_result
from otel_bridge import Bridge
from tests.helpers.metric_sets import TWENTY_METRICS

NAME = "boundary"
LATENCIES_MS = (0, 20, 200)
STEP_S = 0.005
QUEUE_SIZE = 4096
CLOSE_S = 5.0
_log = logging.getLogger(__name__)


def _bridge_run(proxy: DelayProxy, steps: int, run_dir: Path, latency_ms: int) -> dict[str, Any]:
    config: dict[str, Any] = {
        "prometheus": {"url": proxy.url, "scrape_interval_s": 1.0},
        "metrics": TWENTY_METRICS,
        "trackers": [{"type": "jsonl"}],
        "run": {"name": f"boundary-{latency_ms}ms", "dir": str(run_dir)},
        "delivery": {"queue_size": QUEUE_SIZE, "max_block_s": 0.5},
    }
    trainer = {f"actor/metric_{i}": float(i) for i in range(10)}
    enter: list[float] = []
    exit_: list[float] = []
    log: list[float] = []
    bridge = Bridge.from_config(config)
    requests_at_start = proxy.count
    started = time.perf_counter()
    for step in range(steps):
        block = bridge.step(step)
        t0 = time.perf_counter()
        block.__enter__()
        t1 = time.perf_counter()
        time.sleep(STEP_S)
        t2 = time.perf_counter()
        bridge.log(trainer, step=step)
        t3 = time.perf_counter()
        block.__exit__(None, None, None)
        t4 = time.perf_counter()
        enter.append(t1 - t0)
        log.append(t3 - t2)
        exit_.append(t4 - t3)
    loop_s = time.perf_counter() - started
    requests_in_loop = proxy.count - requests_at_start
    report = bridge.close(timeout_s=CLOSE_S)
    dropped = bridge.health.counter("otel_bridge/dropped_infra_steps")
    total = [a + b + c for a, b, c in zip(enter, log, exit_, strict=True)]
    return {
        "config": config,
        "loop_s": loop_s,
        "requests_during_loop": requests_in_loop,
        "unassembled_at_close": len(report.unassembled_steps),
        "delivered": [
            asdict(b) | {"failed_steps": len(b.failed_steps), "pending_steps": len(b.pending_steps)}
            for b in report.backends
        ],
        "dropped_infra_steps": dropped,
        "summary_s": {
            "boundary": summary(total),
            "enter": summary(enter),
            "exit": summary(exit_),
            "log": summary(log),
        },
        "samples_s": {"enter": enter, "log": log, "exit": exit_},
    }


def _baseline_run(proxy: DelayProxy, steps: int) -> dict[str, Any]:
    names = instant_query_names(TWENTY_METRICS)
    client = SequentialPrometheusClient(proxy.url, names, cache_ttl_s=10.0)
    trainer = {f"actor/metric_{i}": float(i) for i in range(10)}
    samples: list[float] = []
    record: dict[str, float] = {}
    started = time.perf_counter()
    try:
        for _step in range(steps):
            time.sleep(STEP_S)
            t0 = time.perf_counter()
            values = client.metrics_for_step()
            record.clear()
            record.update(trainer)
            record.update(values)
            samples.append(time.perf_counter() - t0)
    finally:
        client.close()
    return {
        "label": "BASELINE: per-metric sequential client (bench/baselines/sequential_client.py), not otel-bridge",
        "config": {"metrics": names, "cache_ttl_s": 10.0, "steps": steps},
        "loop_s": time.perf_counter() - started,
        "requests": client.requests_sent,
        "summary_s": {"boundary": summary(samples)},
        "samples_s": {"boundary": samples},
    }


def run(quick: bool, workdir: Path) -> dict[str, Any]:
    """Run the suite; write ``results/boundary.json`` and ``.png``; return the rows for the README table."""
    steps = 300 if quick else 2000
    runs: dict[str, Any] = {}
    with prometheus_stack(workdir / "boundary") as prometheus_url:
        for latency_ms in LATENCIES_MS:
            with DelayProxy(prometheus_url, latency_ms / 1000) as proxy:
                _log.info("boundary: %d ms, otel-bridge, %d steps", latency_ms, steps)
                bridge = _bridge_run(proxy, steps, workdir / "boundary" / "runs", latency_ms)
                time.sleep(1.0)  # let the worker's in-flight step finish before the proxy goes away
                _log.info("boundary: %d ms, baseline, %d steps", latency_ms, steps)
                baseline = _baseline_run(proxy, steps)
            runs[f"{latency_ms}ms"] = {"latency_ms": latency_ms, "otel_bridge": bridge, "baseline": baseline}
    rows = []
    for key, result in runs.items():
        ours = result["otel_bridge"]["summary_s"]["boundary"]
        base = result["baseline"]["summary_s"]["boundary"]
        result["ratios"] = {
            "baseline_p99_over_bridge_p99": base["p99"] / ours["p99"],
            "baseline_max_over_bridge_max": base["max"] / ours["max"],
            "baseline_mean_over_bridge_mean": base["mean"] / ours["mean"],
        }
        rows.append({
            "latency": key,
            "bridge_ms": {k: ours[k] * 1e3 for k in ("p50", "p99", "max", "mean")},
            "baseline_ms": {k: base[k] * 1e3 for k in ("p50", "p99", "max", "mean")},
            "ratios": result["ratios"],
            "target_p99_le_1ms": ours["p99"] <= 1e-3,
            "unassembled_at_close": result["otel_bridge"]["unassembled_at_close"],
        })  # fmt: skip
    payload = {
        "configuration": {
            "steps": steps,
            "step_work_s": STEP_S,
            "latencies_ms": list(LATENCIES_MS),
            "queue_size": QUEUE_SIZE,
            "close_timeout_s": CLOSE_S,
            "metrics": TWENTY_METRICS,
            "prometheus": "real Prometheus, scrape_interval 1s, 2 simulated vLLM servers (own processes, 10 req/s)",
        },
        "runs": runs,
        "rows": rows,
    }
    write_result(NAME, payload)
    _plot(runs)
    return {"rows": rows}


def _plot(runs: dict[str, Any]) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, len(runs), figsize=(5 * len(runs), 4), sharey=True)
    for ax, (key, result) in zip(axes, runs.items(), strict=True):
        samples = result["otel_bridge"]["samples_s"]
        ours = sorted(
            (a + b + c) * 1e3 for a, b, c in zip(samples["enter"], samples["log"], samples["exit"], strict=True)
        )
        base = sorted(s * 1e3 for s in result["baseline"]["samples_s"]["boundary"])
        for values, label in ((ours, "otel-bridge"), (base, "baseline (sequential client)")):
            ax.plot(values, [i / len(values) for i in range(len(values))], label=label)
        ax.set_xscale("log")
        ax.axvline(1.0, color="grey", linestyle=":", label="1 ms target")
        ax.set_title(f"proxy latency {key}")
        ax.set_xlabel("boundary time per step (ms, log)")
    axes[0].set_ylabel("fraction of steps")
    axes[0].legend(loc="lower right", fontsize=8)
    fig.suptitle("Step-boundary cost on the training thread (CDF)")
    save_figure(fig, NAME)
