"""Phase boundaries cost what step boundaries cost: both timed on the training thread in the same run.

A bridge with the scrape producer (two simulated vLLM servers, each its own process, the ``vllm`` metrics of the
window-truth suites), 100 OTel counters and a JSONL tracker. Each step is ``with bridge.step(n)`` holding two phases
(``gen``, ``update``) and a short sleep in each, so the worker keeps up and no queue wait is timed. Timed, per
boundary: ``begin_step``/``end_step`` (a step boundary: timestamp, the producers' ``on_boundary``, the instrument
snapshot, the job) and ``begin_phase``/``end_phase`` (a phase boundary: timestamp, ``on_boundary``, a list append).
The ratio is the phase boundary's median (and mean) over the step boundary's; the acceptance bound is 2, and the row
says whether both ratios hold it (``within_bound``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench.common import simulated_vllm, summary, write_result
from otel_bridge import Bridge

NAME = "phases"
COUNTERS = 100
PHASE_S = 0.002
BOUND = 2.0


def run(quick: bool, workdir: Path) -> dict[str, Any]:
    """Run the suite; write ``results/phases.json``; return the row for the README table."""
    steps = 150 if quick else 1000
    step_s: list[float] = []
    phase_s: list[float] = []
    with simulated_vllm(2) as targets:
        config = {
            "trackers": [{"type": "jsonl"}],
            "run": {"name": NAME, "dir": str(workdir)},
            "scrape": {"targets": targets, "sample_interval_s": 1.0},
            "metrics": [
                {"name": "vllm:generation_tokens_total", "type": "counter"},
                {"name": "vllm:kv_cache_usage_perc", "type": "gauge"},
                {"name": "vllm:time_to_first_token_seconds", "type": "histogram"},
            ],
            "delivery": {"queue_size": 10_000},
        }
        with Bridge.from_config(config) as bridge:
            meter = bridge.meter("bench")
            counters = [meter.create_counter(f"bench.counter_{i}") for i in range(COUNTERS)]
            for step in range(steps):
                for counter in counters:
                    counter.add(1)
                t0 = time.perf_counter()
                bridge.begin_step(step)
                step_s.append(time.perf_counter() - t0)
                for name in ("gen", "update"):
                    t0 = time.perf_counter()
                    bridge.begin_phase(name)
                    phase_s.append(time.perf_counter() - t0)
                    time.sleep(PHASE_S)
                    t0 = time.perf_counter()
                    bridge.end_phase(name)
                    phase_s.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                bridge.end_step(step)
                step_s.append(time.perf_counter() - t0)
            delivered = bridge.collect(steps - 1)
    s_step, s_phase = summary(step_s), summary(phase_s)
    row = {
        "step_boundary_us": {k: s_step[k] * 1e6 for k in ("p50", "p99", "mean")},
        "phase_boundary_us": {k: s_phase[k] * 1e6 for k in ("p50", "p99", "mean")},
        "ratio_p50": s_phase["p50"] / s_step["p50"],
        "ratio_mean": s_phase["mean"] / s_step["mean"],
        "bound": BOUND,
        "within_bound": s_phase["p50"] <= BOUND * s_step["p50"] and s_phase["mean"] <= BOUND * s_step["mean"],
        "phase_keys_in_last_record": sum(1 for key in delivered if key.startswith("phase/")),
    }
    configuration = {"steps": steps, "counters": COUNTERS, "phase_sleep_s": PHASE_S, "config": config}
    write_result(NAME, {"configuration": configuration, "samples_s": {"step": step_s, "phase": phase_s}, "rows": [row]})
    return {"rows": [row]}
