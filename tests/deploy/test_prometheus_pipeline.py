"""collector/prometheus.yml for real: a Prometheus started with it (scrape interval, ports and paths substituted)
scrapes the real local Ray cluster's service-discovery file, a rollout server and a trainer, evaluates the recording
rules, and otel-bridge's PromQL path reads the rollout and the Ray metrics back, one record per step.

Ray lists its metrics ports under this machine's non-loopback address; the test sends traffic to 127.0.0.1 only, so
Prometheus reads a copy of Ray's ``prom_metrics_service_discovery.json`` with the hosts rewritten to 127.0.0.1 (Ray's
agents listen on all interfaces). The copy also lists a simulated vLLM server, as verl's rollout workers appear
through Ray's metrics.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from otel_bridge import Bridge
from otel_bridge.tools.simulation.http import MetricsHTTPServer
from tests.conftest import Replica
from tests.deploy.support import COLLECTOR_DIR, PROMETHEUS_CONFIG, load_yaml
from tests.helpers.prometheus_server import PrometheusServer

SCRAPE_INTERVAL_S = 1.0
WAIT_S = 30.0
STEPS = 2
TOKENS = "sum(vllm:generation_tokens_total)"
SCRAPED_AT = "min(timestamp(vllm:generation_tokens_total))"
RECORDED = 'count(vllm:generation_tokens:rate1m{model_name="tiny"})'


def local_config(sd_file: Path, rollout: str, trainer: str) -> dict[str, Any]:
    """collector/prometheus.yml with its deployment-specific values replaced by this test's."""
    config: dict[str, Any] = load_yaml(PROMETHEUS_CONFIG)
    interval = f"{int(SCRAPE_INTERVAL_S * 1000)}ms"
    config["global"].update(scrape_interval=interval, scrape_timeout=interval, evaluation_interval=interval)
    config["rule_files"] = [str(COLLECTOR_DIR / path) for path in config["rule_files"]]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"ray", "rollout", "trainer"}, "a new job in prometheus.yml: substitute its targets here"
    jobs["ray"]["file_sd_configs"] = [{"files": [str(sd_file)], "refresh_interval": interval}]
    jobs["rollout"]["static_configs"] = [{"targets": [rollout]}]
    jobs["trainer"]["static_configs"] = [{"targets": [trainer]}]
    return config


class ConfiguredPrometheus(PrometheusServer):
    """The test helper's Prometheus (free loopback port, stopped by PID), running a given configuration."""

    def __init__(self, workdir: Path, config: dict[str, Any]) -> None:
        super().__init__(workdir, scrape_interval_s=SCRAPE_INTERVAL_S)
        self._config = config

    def config(self) -> dict[str, Any]:
        return self._config


@pytest.fixture
def trainer_endpoint() -> Iterator[MetricsHTTPServer]:
    """The trainer's own /metrics (a prometheus_client registry, as the OpenTelemetry Prometheus exporter serves)."""
    registry = CollectorRegistry()
    Counter("trainer_steps", "Training steps done.", registry=registry).inc(3)
    server = MetricsHTTPServer(lambda: generate_latest(registry))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def value(prometheus: PrometheusServer, expr: str) -> float | None:
    """The value of a query that answers one sample, else None."""
    result = prometheus.query(expr)
    return float(result[0]["value"][1]) if len(result) == 1 else None


def equals(expected: float) -> Callable[[float | None], bool]:
    return lambda got: got == expected


def above(threshold: float) -> Callable[[float | None], bool]:
    return lambda got: got is not None and got > threshold


def wait_for(prometheus: PrometheusServer, expr: str, accept: Callable[[float | None], bool], what: str) -> None:
    """Poll ``expr`` until ``accept`` takes its value (a condition, not a timing assertion: WAIT_S only bounds it)."""
    deadline = time.monotonic() + WAIT_S
    got = None
    while time.monotonic() < deadline:
        got = value(prometheus, expr)
        if accept(got):
            return
        time.sleep(SCRAPE_INTERVAL_S / 4)
    raise AssertionError(f"{what}: `{expr}` is still {got} after {WAIT_S}s\n{prometheus.log_tail()}")


def generate(replicas: list[Replica], step: int) -> int:
    """Requests completing on every replica; returns the generation tokens they produced."""
    tokens = 0
    for index, replica in enumerate(replicas):
        for k in range(2 + step + index):
            generated = 30 + 5 * step + k
            replica.sim.complete_request(
                prompt_tokens=100 + k,
                generation_tokens=generated,
                ttft_s=0.02 * (k + 1),
                e2e_s=0.5 + 0.1 * k,
                queue_s=0.01,
                itl_s=0.01,
                cached_prompt_tokens=10,
            )
            tokens += generated
        replica.sim.set_running(1 + index)
        replica.sim.set_kv_cache_usage(0.2 + 0.1 * index)
    return tokens


@pytest.mark.integration
def test_prometheus_yml_scrapes_ray_rollout_and_trainer_for_the_bridge(
    tmp_path: Path, replicas: list[Replica], trainer_endpoint: MetricsHTTPServer, ray_cluster: Any
) -> None:
    ray_node, rollout_server = replicas
    groups = json.loads(ray_cluster.sd_file.read_text(encoding="utf-8"))
    ray_targets = [f"127.0.0.1:{t.rsplit(':', 1)[1]}" for group in groups for t in group["targets"]]
    assert f"127.0.0.1:{ray_cluster.metrics_export_port}" in ray_targets
    sd_file = tmp_path / "prom_metrics_service_discovery.json"
    sd_groups = [{"labels": {"job": "ray"}, "targets": [*ray_targets, ray_node.hostport]}]
    sd_file.write_text(json.dumps(sd_groups), encoding="utf-8")
    trainer = trainer_endpoint.url.split("//", 1)[1].split("/", 1)[0]
    prometheus = ConfiguredPrometheus(tmp_path / "prometheus", local_config(sd_file, rollout_server.hostport, trainer))
    try:
        prometheus.start()
        for job in ("rollout", "trainer"):
            wait_for(prometheus, f'up{{job="{job}"}}', equals(1.0), f"job {job} scraped")
        wait_for(prometheus, 'min(up{job="ray"})', equals(1.0), "every Ray target scraped")
        wait_for(prometheus, 'count(up{job="ray"})', equals(len(ray_targets) + 1.0), "every Ray target known")
        wait_for(prometheus, "count(ray_node_mem_total)", above(0.0), "Ray's node metrics scraped")
        instances = {r["metric"]["instance"]: r["metric"]["job"] for r in prometheus.query("vllm:num_requests_running")}
        assert instances == {ray_node.hostport: "ray", rollout_server.hostport: "rollout"}
        prometheus.wait_for_samples("vllm:generation_tokens_total", count=2)
        # The recording rules are loaded and evaluated.
        wait_for(prometheus, RECORDED, equals(1.0), "recording rule evaluated")

        bridge_config = {
            "prometheus": {"url": prometheus.url, "scrape_interval_s": SCRAPE_INTERVAL_S},
            "metrics": [
                {"preset": "vllm"},
                {"name": "ray_node_mem_total", "type": "gauge", "stats": ["last"]},
                {"name": "ray_node_cpu_utilization", "type": "gauge", "stats": ["max"]},
            ],
            "trackers": [{"type": "jsonl"}],
            "run": {"name": "deploy-prometheus-yml", "dir": str(tmp_path / "runs")},
        }
        total = value(prometheus, TOKENS)
        assert total is not None
        with Bridge.from_config(bridge_config) as bridge:
            for step in range(STEPS):
                with bridge.step(step):
                    # A scrape that began before the step may render its response after requests complete, and
                    # would then count them before the window. Requests complete only once every target was
                    # scraped again after the step began (scrapes of one target never overlap).
                    began = time.time()
                    wait_for(prometheus, SCRAPED_AT, above(began), f"step {step}: a scrape after it began")
                    tokens = generate(replicas, step)
                    total += tokens
                    # Leave the step only once Prometheus holds the step's last counter values: then the window
                    # (start, end] contains them, whatever the scrape phase.
                    wait_for(prometheus, TOKENS, equals(total), f"step {step}: its tokens scraped")
                    bridge.log({"actor/loss": 1.0 / (step + 1)}, step=step)
                record = bridge.collect(step)
                assert record["actor/loss"] == 1.0 / (step + 1)
                assert record["rollout/vllm/generation_tokens_total/delta"] == tokens, record
                assert record["rollout/ray_node_mem_total/last"] > 0, record
                assert "rollout/ray_node_cpu_utilization/max" in record, record
                assert record["rollout/vllm/generation_tokens_total/rate"] > 0
                assert record["rollout/vllm/request_success_total/delta"] == (2 + step) + (3 + step)
                assert record["rollout/vllm/num_requests_running/last"] == 1 + 2
                assert math.isclose(record["rollout/vllm/kv_cache_usage_perc/max"], 0.3)
                assert 0 < record["rollout/vllm/time_to_first_token_seconds/p99"] <= 0.1
                assert 0 < record["rollout/vllm/prefix_cache_hit_rate"] <= 1
                assert record["otel_bridge/missing_metrics"] == 0
                assert record["otel_bridge/query_errors"] == 0
    finally:
        prometheus.stop()
