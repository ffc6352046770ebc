"""Soak test: 20,000 fast training steps with faults injected periodically, watching resources and delivery.

Run it (not part of ``make test``)::

    python -m soak.soak [--steps 20000] [--step-sleep-s 0.004] [--out soak/results]

Set-up: two simulated vLLM replicas, a real Prometheus scraping them every second (PromQL path), and three tracker
backends: JSONL, an in-memory counting backend (healthy) and a flaky backend that fails every 5th write attempt (its
retries recover). Faults injected on a fixed schedule:

- every 2,000 steps a replica restarts (counter reset);
- from step 1,000, every 5,000 steps replica 1's endpoint is down for 300 steps;
- from step 3,000, every 5,000 steps Prometheus is stopped for 500 steps and started again on the same port.

Every 500 steps it samples RSS, thread count and open file descriptors. At the end it writes
``<out>/soak-<UTC time>.json`` with the samples, the delivery per backend (delivered vs expected records, and records
whose trainer metric was wrong), the health counters, and a verdict: resources flat (after warm-up: RSS growth below
``--rss-tolerance-mb``, threads and fds back to their warm-up level) and every healthy backend complete. Exits 1 when
the verdict fails.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from otel_bridge import Bridge
from otel_bridge.exporters.record import StepRecord
from otel_bridge.health import BACKEND_ERRORS, DROPPED_INFRA, NONFINITE_VALUES, QUERY_ERRORS
from otel_bridge.simulation.http import MetricsHTTPServer
from otel_bridge.simulation.vllm import VLLMSimulator
from tests.helpers.http_servers import free_port
from tests.helpers.prometheus_server import PrometheusServer

_log = logging.getLogger("soak")
TRAINER_KEY = "trainer/step_value"


class CountingBackend:
    """A healthy backend that only counts (so its own memory stays flat) and checks the trainer metric."""

    name = "counting"

    def __init__(self) -> None:
        self.delivered = 0
        self.wrong = 0
        self.infra_unavailable = 0
        self.with_infra = 0

    def write(self, record: StepRecord) -> None:
        """Count ``record`` and check that it carries its step's trainer value."""
        self.delivered += 1
        if record.values.get(TRAINER_KEY) != float(record.step):
            self.wrong += 1
        if record.values.get("otel_bridge/infra_unavailable", 0.0) > 0:
            self.infra_unavailable += 1
        if any(key.startswith("rollout/") for key in record.values):
            self.with_infra += 1

    def flush(self) -> None:
        """Nothing buffered."""

    def close(self) -> None:
        """Nothing to release."""


class FlakyBackend(CountingBackend):
    """Fails every ``every``-th write attempt (a tracker service with transient errors)."""

    name = "flaky"

    def __init__(self, every: int = 5) -> None:
        super().__init__()
        self.every = every
        self.attempts = 0

    def write(self, record: StepRecord) -> None:
        """Fail every ``every``-th attempt, else count."""
        self.attempts += 1
        if self.attempts % self.every == 0:
            raise ConnectionError("tracker service: 503 (soak fault)")
        super().write(record)


class Replica:
    """A simulated vLLM server and the HTTP endpoint serving it (stoppable and restartable on its port)."""

    def __init__(self) -> None:
        self.sim = VLLMSimulator(model_name="soak")
        self.server = MetricsHTTPServer(self.sim.exposition).start()
        self.up = True

    @property
    def hostport(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    def set_up(self, up: bool) -> None:
        if up and not self.up:
            self.server.start()
        elif not up and self.up:
            self.server.stop()
        self.up = up


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


def run(steps: int, step_sleep_s: float, out: Path, rss_tolerance_mb: float) -> dict[str, Any]:
    """Run the soak and return its results (also written under ``out``)."""
    replicas = [Replica(), Replica()]
    counting, flaky = CountingBackend(), FlakyBackend()
    schedule: list[str] = []
    with tempfile.TemporaryDirectory(prefix="otel-bridge-soak-") as tmp:
        prometheus = PrometheusServer(Path(tmp) / "prom", [r.hostport for r in replicas], port=free_port())
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
                "run": {"name": "soak", "dir": tmp},
                "delivery": {"backend_retries": 3, "backend_backoff_s": 0, "max_block_s": 0.05},
            }
            bridge = Bridge.from_config(config, backends=[counting, flaky])
            started = time.monotonic()
            samples = [sample(0, started)]
            prometheus_down_until = replica_down_until = -1
            for step in range(steps):
                if step and step % 2000 == 0:
                    replicas[step // 2000 % 2].sim.restart()
                    schedule.append(f"{step}: replica {step // 2000 % 2} restarted")
                if step % 5000 == 1000:
                    replicas[1].set_up(False)
                    replica_down_until = step + 300
                    schedule.append(f"{step}-{replica_down_until}: replica 1 endpoint down")
                if step == replica_down_until:
                    replicas[1].set_up(True)
                if step % 5000 == 3000:
                    prometheus.stop()
                    prometheus_down_until = step + 500
                    schedule.append(f"{step}-{prometheus_down_until}: Prometheus down")
                if step == prometheus_down_until:
                    prometheus.start()
                with bridge.step(step):
                    for replica in replicas:
                        replica.sim.complete_request(
                            prompt_tokens=16, generation_tokens=4, ttft_s=0.02, e2e_s=0.05, queue_s=0.001, itl_s=0.002
                        )
                    replica.sim.set_running(step % 7)
                    if step_sleep_s > 0:
                        time.sleep(step_sleep_s)
                    bridge.log({TRAINER_KEY: float(step), "trainer/loss": 1.0 / (1 + step)}, step=step)
                if (step + 1) % 500 == 0:
                    samples.append(sample(step + 1, started))
                    last = samples[-1]
                    _log.info(
                        "step %d: rss %.1f MB, %d threads, %d fds", step + 1, last.rss_mb, last.os_threads, last.fds
                    )
            report = bridge.close()
            elapsed = time.monotonic() - started
            samples.append(sample(steps, started))
            health = {
                "query_errors": bridge.health.counter(QUERY_ERRORS),
                "dropped_infra_steps": bridge.health.counter(DROPPED_INFRA),
                "nonfinite_values": bridge.health.counter(NONFINITE_VALUES),
                "backend_errors.flaky": bridge.health.counter(BACKEND_ERRORS, {"backend": "flaky"}),
            }
            jsonl_lines = (Path(tmp) / "soak" / "metrics.jsonl").read_text().count("\n")
        finally:
            prometheus.stop()
            for replica in replicas:
                replica.set_up(False)
    delivery = {
        status.backend: {
            "expected": steps,
            "delivered": status.delivered,
            "failed": len(status.failed_steps),
            "pending": len(status.pending_steps),
        }
        for status in report.backends
    }
    delivery["jsonl"]["lines_in_file"] = jsonl_lines
    for backend in (counting, flaky):
        delivery[backend.name]["wrong_trainer_value"] = backend.wrong
    healthy_complete = (
        all(
            delivery[name]["delivered"] == steps and delivery[name].get("wrong_trainer_value", 0) == 0
            for name in ("jsonl", "counting", "flaky")
        )
        and jsonl_lines == steps
    )
    flat = flatness(samples[1:], rss_tolerance_mb)
    results: dict[str, Any] = {
        "steps": steps,
        "step_sleep_s": step_sleep_s,
        "elapsed_s": round(elapsed, 1),
        "faults": schedule,
        "delivery": delivery,
        "unassembled_steps": len(report.unassembled_steps),
        "records_with_infra_unavailable": counting.infra_unavailable,
        "records_with_infra_keys": counting.with_infra,
        "health": health,
        "resources": [asdict(s) for s in samples],
        "flatness": flat,
        "passed": healthy_complete and flat["flat"] and not report.unassembled_steps,
    }
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"soak-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(results, indent=2) + "\n")
    results["path"] = str(path)
    return results


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--step-sleep-s", type=float, default=0.004, help="simulated work per step")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--rss-tolerance-mb", type=float, default=20.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("otel_bridge.prometheus.transport").setLevel(logging.WARNING)  # per-request failure lines
    results = run(args.steps, args.step_sleep_s, args.out, args.rss_tolerance_mb)
    summary = {k: results[k] for k in ("elapsed_s", "delivery", "flatness", "health", "passed", "path")}
    sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    return 0 if results["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
