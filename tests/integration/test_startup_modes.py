"""Start-up connectivity: strict raises, degrade runs without infrastructure and picks it up when Prometheus comes back.
Plus the Bridge's use of discovery: `prometheus.url: auto`, `scrape.targets: auto` over Ray's service-discovery file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from otel_bridge import Bridge, PrometheusUnreachableError
from tests.conftest import Replica
from tests.helpers.http_servers import free_port
from tests.helpers.prometheus_server import PrometheusServer


def degrade_config(tmp_path: Path, url: str, startup: str) -> dict[str, Any]:
    return {
        "startup": startup,
        "prometheus": {"url": url, "scrape_interval_s": 1, "retries": 0, "timeout_s": 2},
        "metrics": [{"name": "vllm:num_requests_running", "type": "gauge", "stats": ["last"]}],
        "run": {"name": startup, "dir": str(tmp_path)},
    }


@pytest.mark.integration
def test_strict_raises_when_prometheus_is_down(tmp_path: Path) -> None:
    with pytest.raises(PrometheusUnreachableError, match="cannot reach Prometheus"):
        Bridge.from_config(degrade_config(tmp_path, f"http://127.0.0.1:{free_port()}", "strict"))


@pytest.mark.integration
def test_degrade_picks_up_prometheus_within_three_steps(
    tmp_path: Path, replicas: list[Replica], prometheus_version: str
) -> None:
    port = free_port()
    replicas[0].sim.set_running(4)
    replicas[1].sim.set_running(2)
    prometheus = PrometheusServer(
        tmp_path / "prom", [r.hostport for r in replicas], port=port, version=prometheus_version
    )
    records: list[dict[str, float]] = []
    try:
        with Bridge.from_config(degrade_config(tmp_path, prometheus.url, "degrade")) as bridge:
            for step in range(2):  # Prometheus is down: the trainer's metrics still flow
                bridge.log({"actor/loss": 1.0}, step=step)
                records.append(bridge.collect(step))
            prometheus.start()
            prometheus.wait_for_samples("vllm:num_requests_running", count=1)
            for step in range(2, 5):
                with bridge.step(step):
                    time.sleep(1.2)  # one scrape interval inside the window
                    bridge.log({"actor/loss": 1.0}, step=step)
                records.append(bridge.collect(step))
    finally:
        prometheus.stop()
    key = "rollout/vllm/num_requests_running/last"
    assert [key in r for r in records[:2]] == [False, False]
    assert all(r["actor/loss"] == 1.0 for r in records)
    assert records[0]["otel_bridge/infra_unavailable"] == 1
    recovered = [r.get(key) for r in records[2:5]]
    assert 6.0 in recovered, f"infrastructure keys did not come back within 3 steps: {recovered}"


AUTO_URL_SCRIPT = textwrap.dedent(
    """
    import sys
    from otel_bridge import Bridge, DiscoveryError
    config = {"prometheus": {"url": "auto"}, "metrics": [{"preset": "vllm"}], "run": {"dir": sys.argv[1]}}
    try:
        Bridge.from_config(config)
    except DiscoveryError as exc:
        print(str(exc))
    """
)


def test_auto_url_without_env_or_ray_lists_what_was_tried(tmp_path: Path) -> None:
    environ = {k: v for k, v in os.environ.items() if k not in ("OTEL_BRIDGE_PROMETHEUS_URL", "RAY_PROMETHEUS_HOST")}
    done = subprocess.run(
        [sys.executable, "-c", AUTO_URL_SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    message = done.stdout
    assert "tried, in order" in message
    for source in ("OTEL_BRIDGE_PROMETHEUS_URL", "RAY_PROMETHEUS_HOST", "Ray"):
        assert source in message, message


def test_auto_url_comes_from_the_environment(
    tmp_path: Path, replicas: list[Replica], monkeypatch: pytest.MonkeyPatch, prometheus_version: str
) -> None:
    with PrometheusServer(tmp_path / "prom", [r.hostport for r in replicas], version=prometheus_version) as prometheus:
        prometheus.wait_for_samples("vllm:num_requests_running", count=1)
        monkeypatch.setenv("OTEL_BRIDGE_PROMETHEUS_URL", prometheus.url)
        config = degrade_config(tmp_path, "auto", "strict")
        with Bridge.from_config(config) as bridge:
            bridge.log({"x": 1.0}, step=0)
            record = bridge.collect(0)
    assert "rollout/vllm/num_requests_running/last" in record


@pytest.mark.integration
def test_scrape_targets_auto_reads_rays_service_discovery_file(tmp_path: Path, replicas: list[Replica]) -> None:
    sd_file = tmp_path / "prom_metrics_service_discovery.json"
    sd_file.write_text(json.dumps([{"labels": {"job": "ray"}, "targets": [replicas[0].hostport]}]))
    config = {
        "scrape": {"targets": "auto", "ray_service_discovery_file": str(sd_file), "refresh_interval_s": 0.2},
        "metrics": [{"name": "vllm:num_requests_running", "type": "gauge", "stats": ["last"], "by": ["instance"]}],
        "run": {"name": "sd", "dir": str(tmp_path)},
    }
    replicas[0].sim.set_running(3)
    replicas[1].sim.set_running(5)
    with Bridge.from_config(config, rollout_servers=[replicas[1].hostport]) as bridge:
        bridge.log({"x": 1.0}, step=0)
        record = bridge.collect(0)
    for replica, running in zip(replicas, (3, 5), strict=True):
        key = f"rollout/vllm/num_requests_running/last/instance.{replica.hostport.replace(':', '_')}"
        assert record[key] == running, sorted(record)
