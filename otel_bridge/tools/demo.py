"""The demo run: simulated vLLM rollout servers and GPUs, a small training loop, records in TensorBoard and JSONL.

No server needs to be installed: two local endpoints serve vLLM 0.32's exact metric names, types and labels, driven by
a seeded workload, and two simulated dcgm-exporters serve the GPUs of a rollout node and a trainer node (busy during
``gen`` and ``update`` respectively); the bridge reads them straight from ``/metrics`` (the embedded default). With a
Prometheus URL it uses the PromQL path instead (that Prometheus must scrape the simulated servers' ports). With
``start_prometheus`` it starts a real Prometheus itself (:mod:`otel_bridge.tools.local_prometheus`), configured by the
same code as ``otel-bridge prometheus-config`` to scrape the simulated servers, runs the PromQL path through it, and
stops it.
"""

from __future__ import annotations

import functools
import logging
import math
import random
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from otel_bridge.bridge import Bridge
from otel_bridge.errors import ConfigError
from otel_bridge.exporters import StepRecord
from otel_bridge.producers import PRESETS
from otel_bridge.tools.local_prometheus import LocalPrometheus, find_prometheus_binary
from otel_bridge.tools.prometheus_files import prometheus_config, write_prometheus_config
from otel_bridge.tools.simulation.gpus import GPUFleet
from otel_bridge.tools.simulation.http import MetricsHTTPServer
from otel_bridge.tools.simulation.vllm import SimulatedWorkload, VLLMSimulator

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DemoResult:
    """Where the demo wrote its records, and the last ones."""

    run_dir: Path
    jsonl: Path
    records: list[StepRecord]


@contextmanager
def simulated_rollout_servers(
    replicas: int = 2, *, first_port: int = 0, seed: int = 0, requests_per_s: float = 20.0
) -> Iterator[list[tuple[VLLMSimulator, SimulatedWorkload, MetricsHTTPServer]]]:
    """Start ``replicas`` simulated vLLM servers with a background workload each; stop them on exit."""
    with ExitStack() as stack:
        servers = []
        for index in range(replicas):
            sim = VLLMSimulator(model_name="tiny", engine="0")
            port = first_port + index if first_port else 0
            server = MetricsHTTPServer(sim.exposition, port=port)
            server.start()
            stack.callback(server.stop)
            workload = SimulatedWorkload(sim, rng_seed=seed + index, requests_per_s=requests_per_s)
            workload.start()
            stack.callback(workload.stop)
            servers.append((sim, workload, server))
        yield servers


GPU_LAYOUT: dict[str, list[str]] = {"rollout-node": ["rollout"] * 2, "trainer-node": ["trainer"] * 2}
"""The demo's GPUs: a separated placement, so the host (dcgm-exporter's ``Hostname``) tells the role."""
IDLE_UTILIZATION = 3.0
"""A GPU's utilization (%) while its role waits."""


@contextmanager
def simulated_gpus(*, first_port: int = 0) -> Iterator[tuple[GPUFleet, list[MetricsHTTPServer]]]:
    """The demo's GPUs, one simulated dcgm-exporter per host; stopped on exit."""
    fleet = GPUFleet(GPU_LAYOUT)
    for role in ("rollout", "trainer"):
        fleet.set_utilization(role, IDLE_UTILIZATION)
    with ExitStack() as stack:
        servers = []
        for index, host in enumerate(fleet.hosts):
            server = MetricsHTTPServer(
                functools.partial(fleet.dcgm_exposition, host), port=first_port + index if first_port else 0
            )
            server.start()
            stack.callback(server.stop)
            servers.append(server)
        yield fleet, servers


DEMO_GPU_METRICS: list[dict[str, Any]] = [
    {**entry, "by": ["Hostname"]}
    for entry in PRESETS["dcgm"]
    if entry.get("alias") in ("DCGM_FI_DEV_GPU_UTIL:gpus", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION:joules")
    or (entry["name"] == "DCGM_FI_DEV_GPU_UTIL" and "alias" not in entry)
]
"""The ``dcgm`` preset's utilization, idle GPU-seconds and joules, per host (the whole preset is ``preset: dcgm``)."""


def demo_config(
    targets: list[str], out: Path, run_name: str, prometheus_url: str | None, scrape_interval_s: float
) -> dict[str, Any]:
    """The bridge configuration the demo runs with."""
    config: dict[str, Any] = {
        "metrics": [{"preset": "vllm"}, *DEMO_GPU_METRICS],
        "trackers": [{"type": "jsonl"}, {"type": "tensorboard"}],
        "run": {"name": run_name, "dir": str(out)},
    }
    if prometheus_url is not None:
        config["prometheus"] = {"url": prometheus_url, "scrape_interval_s": scrape_interval_s}
    else:
        config["scrape"] = {"targets": targets, "sample_interval_s": 0.1}  # several GPU samples in every phase
    return config


GEN_SHARE = 0.6
"""The part of each demo step spent in the ``gen`` phase (rollout servers busy); the rest is ``update``."""
UPDATE_SHARE = 1.0 - GEN_SHARE


def rollout_utilization(requests_per_s: float) -> float:
    """The rollout GPUs' utilization (%) under the vLLM workload's request rate: the more requests, the busier."""
    return min(100.0, 30.0 + 1.5 * requests_per_s)


def default_scrape_interval(step_seconds: float) -> float:
    """The demo's Prometheus scrape interval: half of its shorter phase, so that every phase's window holds a sample
    of every gauge even when a scrape comes a little late (a window shorter than the interval may hold none)."""
    return step_seconds * min(GEN_SHARE, UPDATE_SHARE) / 2


def run_demo(
    *,
    steps: int = 20,
    out: Path = Path("runs"),
    run_name: str | None = None,
    prometheus_url: str | None = None,
    start_prometheus: bool = False,
    prometheus_port: int = 0,
    step_seconds: float = 1.0,
    sim_port: int = 0,
    scrape_interval_s: float | None = None,
    on_step: Callable[[int], None] | None = None,
    on_event: Callable[[str], None] | None = None,
) -> DemoResult:
    """Run the demo training loop for ``steps`` steps and return where the records went.

    ``start_prometheus`` starts a local Prometheus (``$PROMETHEUS_BIN``, else ``/usr/bin/prometheus``, else ``PATH``)
    scraping the simulated servers every ``scrape_interval_s`` (default: :func:`default_scrape_interval`), reads the
    infrastructure through it, and stops it by PID at the end, also on errors and Ctrl-C. ``on_event`` receives one
    line per thing started or stopped.
    """
    if start_prometheus and prometheus_url is not None:
        raise ConfigError("use either --prometheus (start a local Prometheus) or --prometheus-url URL, not both")
    name = run_name or time.strftime("demo-%Y%m%d-%H%M%S")
    interval_s = default_scrape_interval(step_seconds) if scrape_interval_s is None else scrape_interval_s
    say = on_event or _log.info
    binary = find_prometheus_binary() if start_prometheus else None  # fail before starting anything
    with ExitStack() as stack:
        stack.enter_context(_sigterm_exits())  # so that a SIGTERM still stops the Prometheus process started below
        servers = stack.enter_context(simulated_rollout_servers(2, first_port=sim_port))
        targets = [f"127.0.0.1:{server.port}" for _, _, server in servers]
        say(f"simulated vLLM servers: {', '.join(f'http://{t}/metrics' for t in targets)}")
        stack.callback(say, "stopped the simulated vLLM servers")
        fleet, exporters = stack.enter_context(simulated_gpus(first_port=sim_port + len(servers) if sim_port else 0))
        gpu_targets = [f"127.0.0.1:{server.port}" for server in exporters]
        say(f"simulated dcgm-exporters: {', '.join(f'http://{t}/metrics' for t in gpu_targets)}")
        stack.callback(say, "stopped the simulated dcgm-exporters")
        targets += gpu_targets
        if binary is not None:
            prometheus = stack.enter_context(_local_prometheus(binary, targets, interval_s, prometheus_port))
            say(
                f"prometheus: {binary} (pid {prometheus.pid}) at {prometheus.url}, scraping {', '.join(targets)} "
                f"every {interval_s:g}s"
            )
            stack.callback(say, f"stopped prometheus (pid {prometheus.pid})")
            prometheus.wait_for_targets(len(targets))
            prometheus_url = prometheus.url
        return _train(servers, fleet, targets, steps, out, name, prometheus_url, step_seconds, interval_s, on_step)


@contextmanager
def _sigterm_exits() -> Iterator[None]:
    """While inside: SIGTERM raises ``SystemExit(143)`` (cleanup runs) if it had its default action on the main
    thread; the previous handler is restored afterwards."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def exit_143(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, exit_143)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextmanager
def _local_prometheus(
    binary: Path, targets: list[str], scrape_interval_s: float, port: int
) -> Iterator[LocalPrometheus]:
    """A Prometheus scraping ``targets``: config and data in a temporary directory, removed with it."""
    with tempfile.TemporaryDirectory(prefix="otel-bridge-prometheus-") as workdir:
        config_file = Path(workdir) / "prometheus.yml"
        write_prometheus_config(
            config_file, prometheus_config(rollout_targets=targets, scrape_interval_s=scrape_interval_s)
        )
        with LocalPrometheus(binary, config_file, Path(workdir), port=port) as prometheus:
            yield prometheus


def _train(
    servers: list[tuple[VLLMSimulator, SimulatedWorkload, MetricsHTTPServer]],
    fleet: GPUFleet,
    targets: list[str],
    steps: int,
    out: Path,
    name: str,
    prometheus_url: str | None,
    step_seconds: float,
    scrape_interval_s: float,
    on_step: Callable[[int], None] | None,
) -> DemoResult:
    rng = random.Random(0)
    urls = [f"http://{target}/metrics" for target in targets]
    bridge = Bridge.from_config(demo_config(urls, out, name, prometheus_url, scrape_interval_s))
    with bridge:
        meter = bridge.meter("demo.trainer")
        samples = meter.create_counter("trainer.samples", unit="1", description="Samples trained on")
        update_time = meter.create_histogram("trainer.update_seconds", unit="s")
        for step in range(steps):
            rate = 10.0 + 30.0 * (0.5 + 0.5 * math.sin(step / 3.0))
            with bridge.step(step):
                with bridge.phase("gen"):  # rollouts: the vLLM servers and their GPUs are busy, the trainer's wait
                    for _, workload, _ in servers:
                        workload.requests_per_s = rate
                    fleet.set_utilization("rollout", rollout_utilization(rate))
                    fleet.set_utilization("trainer", IDLE_UTILIZATION)
                    time.sleep(step_seconds * GEN_SHARE)
                with bridge.phase("update"):  # the policy update: rollout servers nearly idle, trainer GPUs busy
                    for _, workload, _ in servers:
                        workload.requests_per_s = 2.0
                    fleet.set_utilization("rollout", IDLE_UTILIZATION)
                    fleet.set_utilization("trainer", 90.0)
                    time.sleep(step_seconds * UPDATE_SHARE)
                samples.add(256)
                update_time.record(step_seconds * (0.4 + 0.2 * rng.random()))
                loss = 2.0 * math.exp(-step / 10.0) + 0.05 * rng.random()
                bridge.log(
                    {
                        "actor/loss": loss,
                        "actor/grad_norm": 1.0 + rng.random(),
                        "critic/score/mean": 1.0 - loss / 2.0,
                    },
                    step=step,
                )
            if on_step is not None:
                on_step(step)
    records = [r for s in range(max(0, steps - 5), steps) if (r := bridge.record(s)) is not None]
    jsonl = bridge.run_dir / "metrics.jsonl"
    return DemoResult(run_dir=bridge.run_dir, jsonl=jsonl, records=records)
