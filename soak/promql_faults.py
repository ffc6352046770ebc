"""Soak part 1: many fast steps on the PromQL path with periodic faults, watching resources.

Two simulated vLLM replicas, a real Prometheus scraping them every second (the Debian ``prometheus`` binary, or
``$PROMETHEUS_BIN``), and three backends: JSONL, a counting backend (healthy) and a flaky one failing every 5th write
attempt (its retries recover). Faults on a fixed schedule, scaled to the run (:class:`Schedule`; at 20,000 steps):

- every 2,000 steps a replica restarts (counter reset);
- from step 1,000, every 5,000 steps replica 1's endpoint is down for 300 steps;
- from step 3,000, every 5,000 steps Prometheus is stopped for 500 steps and started again on the same port.

A shorter run keeps every fault: at 2,000 steps a restart every 200 steps, the endpoint down for 100 steps from step
100 every 500, Prometheus down for 150 steps from step 300 every 500.

Every 500 steps it samples RSS, thread count and open file descriptors: after warm-up, RSS must grow less than
``rss_tolerance_mb`` and threads and fds must come back to their warm-up level.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from otel_bridge import Bridge
from otel_bridge.health import BACKEND_ERRORS, DROPPED_INFRA, NONFINITE_VALUES, QUERY_ERRORS
from soak.accounting import TRAINER_KEY, CountingBackend, FlakyBackend, complete, jsonl_copies, tally, windows_steps
from soak.servers import Replica, generate
from tests.helpers.http_servers import free_port
from tests.helpers.prometheus_server import PrometheusServer

_log = logging.getLogger("soak.promql")
RESTART_WINDOW = 50  # steps after a replica restart counted as its window
AFTER_WINDOW = 100  # steps after a fault's window within which infrastructure readings should be back


@dataclass(frozen=True)
class Schedule:
    """When the faults of a run of ``steps`` steps happen (the 20,000-step schedule, scaled, with minimum lengths)."""

    steps: int

    @property
    def restart_every(self) -> int:
        return max(200, self.steps // 10)

    @property
    def period(self) -> int:
        return max(500, self.steps // 4)

    @property
    def endpoint_down(self) -> tuple[int, int]:
        """(first step, length) of replica 1's endpoint being down, every :attr:`period` steps."""
        return max(100, self.steps // 20), max(100, self.steps * 3 // 200)

    @property
    def prometheus_down(self) -> tuple[int, int]:
        """(first step, length) of Prometheus being down, every :attr:`period` steps."""
        return max(300, self.steps * 3 // 20), max(150, self.steps // 40)


@dataclass
class Sample:
    """Resources at one step."""

    step: int
    elapsed_s: float
    rss_mb: float
    threads: int
    os_threads: int
    fds: int


def _status_field(name: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {name}")


def sample(step: int, started: float) -> Sample:
    """RSS, Python and OS thread counts, open file descriptors now."""
    return Sample(
        step=step,
        elapsed_s=round(time.monotonic() - started, 2),
        rss_mb=round(_status_field("VmRSS") / 1024, 1),
        threads=threading.active_count(),
        os_threads=_status_field("Threads"),
        fds=len(os.listdir("/proc/self/fd")),
    )


def flatness(samples: list[Sample], rss_tolerance_mb: float) -> dict[str, Any]:
    """Compare the last quarter of the run with the samples just after warm-up (the first 10%)."""
    warm = [s for s in samples if s.step >= samples[-1].step * 0.1][:3] or samples[:1]
    tail = samples[-max(1, len(samples) // 4) :]
    rss_growth = max(s.rss_mb for s in tail) - max(s.rss_mb for s in warm)
    threads_growth = max(s.os_threads for s in tail) - max(s.os_threads for s in warm)
    fds_growth = max(s.fds for s in tail) - max(s.fds for s in warm)
    return {
        "rss_growth_mb": round(rss_growth, 1),
        "os_threads_growth": threads_growth,
        "fds_growth": fds_growth,
        "flat": rss_growth <= rss_tolerance_mb and threads_growth <= 0 and fds_growth <= 0,
    }


def run_promql_faults(steps: int, step_sleep_s: float, tmp: Path, rss_tolerance_mb: float) -> dict[str, Any]:
    """Run part 1; returns ``{"faults": {name: entry}, "resources": [...], "schedule": [...]}``."""
    replicas = [Replica(), Replica()]
    counting, flaky = CountingBackend(steps), FlakyBackend(steps)
    schedule: list[str] = []
    windows: dict[str, list[tuple[int, int]]] = {
        "replica_restart": [],
        "replica_endpoint_down": [],
        "prometheus_down": [],
    }
    prometheus = PrometheusServer(tmp / "prom", [r.hostport for r in replicas], port=free_port())
    try:
        prometheus.start()
        prometheus.wait_for_samples("vllm:generation_tokens_total", count=2)
        config = {
            "startup": "degrade",
            "prometheus": {"url": prometheus.url, "scrape_interval_s": 1, "retries": 0, "timeout_s": 2},
            "metrics": [
                {"name": "vllm:generation_tokens_total", "type": "counter"},
                {"name": "vllm:num_requests_running", "type": "gauge"},
                {"name": "vllm:time_to_first_token_seconds", "type": "histogram", "stats": ["p99", "count"]},
            ],
            "run": {"name": "soak", "dir": str(tmp)},
            "delivery": {"backend_retries": 3, "backend_backoff_s": 0, "max_block_s": 0.05},
        }
        bridge = Bridge.from_config(config, backends=[counting, flaky])
        started = time.monotonic()
        samples = [sample(0, started)]
        prometheus_down_until = replica_down_until = -1
        plan = Schedule(steps)
        for step in range(steps):
            if step and step % plan.restart_every == 0:
                which = step // plan.restart_every % 2
                replicas[which].sim.restart()
                schedule.append(f"{step}: replica {which} restarted")
                windows["replica_restart"].append((step, min(steps, step + RESTART_WINDOW)))
            if step % plan.period == plan.endpoint_down[0]:
                replicas[1].set_up(False)
                replica_down_until = step + plan.endpoint_down[1]
                schedule.append(f"{step}-{replica_down_until}: replica 1 endpoint down")
                windows["replica_endpoint_down"].append((step, min(steps, replica_down_until)))
            if step == replica_down_until:
                replicas[1].set_up(True)
            if step % plan.period == plan.prometheus_down[0]:
                prometheus.stop()
                prometheus_down_until = step + plan.prometheus_down[1]
                schedule.append(f"{step}-{prometheus_down_until}: Prometheus down")
                windows["prometheus_down"].append((step, min(steps, prometheus_down_until)))
            if step == prometheus_down_until:
                prometheus.start()
            with bridge.step(step):
                for replica in replicas:
                    generate(replica.sim, step)
                if step_sleep_s > 0:
                    time.sleep(step_sleep_s)
                bridge.log({TRAINER_KEY: float(step), "trainer/loss": 1.0 / (1 + step)}, step=step)
            if (step + 1) % 500 == 0:
                samples.append(sample(step + 1, started))
                last = samples[-1]
                _log.info("step %d: rss %.1f MB, %d threads, %d fds", step + 1, last.rss_mb, last.os_threads, last.fds)
        report = bridge.close()
        elapsed = time.monotonic() - started
        samples.append(sample(steps, started))
        health = {
            "query_errors": bridge.health.counter(QUERY_ERRORS),
            "dropped_infra_steps": bridge.health.counter(DROPPED_INFRA),
            "nonfinite_values": bridge.health.counter(NONFINITE_VALUES),
            "backend_errors.flaky": bridge.health.counter(BACKEND_ERRORS, {"backend": "flaky"}),
        }
    finally:
        prometheus.stop()
        for replica in replicas:
            replica.set_up(False)
    jsonl = jsonl_copies(tmp / "soak" / "metrics.jsonl", steps)
    copies = {"jsonl": jsonl.copies, "counting": counting.copies, "flaky": flaky.copies}
    trainer_right = counting.wrong == flaky.wrong == jsonl.wrong == 0
    faults: dict[str, dict[str, Any]] = {}
    for name, spans in windows.items():
        if not spans:
            faults[name] = {"segment": "promql", "windows": [], "skipped": f"no such window in {steps} steps"}
            continue
        delivery = {b: tally(c, windows_steps(spans)) for b, c in copies.items()}
        faults[name] = {
            "segment": "promql",
            "windows": [list(span) for span in spans],
            "delivery": delivery,
            "figures": {"records_marked_infra_missing": sum(counting.infra_missing[s] for s in windows_steps(spans))},
            "checks": {
                "delivered_equals_expected_no_duplicates": complete(delivery, copies),
                "trainer_values_right": trainer_right,
            },
            "observations": {
                f"infra_back_within_{AFTER_WINDOW}_steps_after_each_window": all(
                    any(counting.with_infra[s] for s in range(end, min(steps, end + AFTER_WINDOW)))
                    for _, end in spans
                    if end < steps
                )
            },
        }
    whole = {b: tally(c, range(steps)) for b, c in copies.items()}
    flat = flatness(samples[1:], rss_tolerance_mb)
    statuses = {status.backend: status for status in report.backends}
    faults["flaky_backend"] = {
        "segment": "promql",
        "windows": [[0, steps]],
        "delivery": whole,
        "figures": {
            "elapsed_s": round(elapsed, 1),
            "failed_write_attempts": flaky.attempts - sum(flaky.copies),
            "records_with_infra_unavailable": sum(counting.infra_missing),
            "records_with_infra_keys": sum(counting.with_infra),
            "health": health,
            "flatness": flat,
        },
        "checks": {
            "delivered_equals_expected_no_duplicates": complete(whole, copies),
            "trainer_values_right": trainer_right,
            "report_complete": report.complete,
            "jsonl_valid_in_step_order": jsonl.invalid == jsonl.out_of_order == 0 and jsonl.ends_with_newline,
            "report_matches_jsonl": statuses["jsonl"].delivered == jsonl.lines,
            "resources_flat": bool(flat["flat"]),
        },
        "observations": {"infra_readings_in_most_records": sum(counting.with_infra) >= steps / 2},
    }
    _log.info("PromQL part: %d steps in %.1f s", steps, elapsed)
    return {"faults": faults, "resources": [asdict(s) for s in samples], "schedule": schedule}
