"""Each peer server starts and answers (smoke tests): Prometheus 2.42 (Debian) and 3.16 (built from its Go module)
scrape two simulated vLLM servers and answer a query; Prometheus 3.16 also says what it is and what it can do
(``/api/v1/status/buildinfo``, ``/api/v1/features``) and runs its OTLP receiver; VictoriaMetrics scrapes, takes a
remote write and answers a query. The peers are built by ``make peers`` (peers/build.sh)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import Replica
from tests.helpers.prometheus_server import PrometheusServer, prometheus_binary
from tests.helpers.remote_write import push
from tests.helpers.victoriametrics import VictoriaMetricsServer, victoria_metrics_binary

pytestmark = pytest.mark.integration

TOKENS = "sum(vllm:generation_tokens_total)"


def api(url: str, path: str) -> Any:
    """The ``data`` of a Prometheus-API answer (fails on anything but success)."""
    body = requests.get(f"{url}{path}", timeout=10).json()
    assert body.get("status") == "success", body
    return body["data"]


def generate(replicas: list[Replica], tokens: int) -> None:
    for replica in replicas:
        replica.sim.complete_request(
            prompt_tokens=10, generation_tokens=tokens, ttft_s=0.1, e2e_s=0.5, queue_s=0.01, itl_s=0.02
        )


def test_prometheus_scrapes_the_simulated_servers_and_answers(
    prometheus_version: str, replicas: list[Replica], tmp_path: Path
) -> None:
    """Both versions read the simulators' ``text/plain; version=0.0.4`` pages with no fallback_scrape_protocol (what
    Prometheus 3 requires of a target's Content-Type) and sum a counter over them."""
    generate(replicas, 7)
    with PrometheusServer(tmp_path, [r.hostport for r in replicas], version=prometheus_version) as prometheus:
        prometheus.wait_for_samples("vllm:generation_tokens_total", count=2)
        assert float(prometheus.query(TOKENS)[0]["value"][1]) == 14.0
        health = prometheus.query('count(up{job="rollout"} == 1)')
        assert float(health[0]["value"][1]) == 2.0
        targets = api(prometheus.url, "/api/v1/targets")["activeTargets"]
        assert {t["health"] for t in targets} == {"up"}, [t.get("lastError") for t in targets]
        assert api(prometheus.url, "/api/v1/status/buildinfo")["version"].startswith(prometheus_version)


def test_prometheus3_says_what_it_is_and_can_do(tmp_path: Path) -> None:
    """What the bridge's feature detection reads from Prometheus 3.16: its version, and the features it has on
    (anchored range selectors among them); remote write and the OTLP receiver show as on when enabled."""
    with PrometheusServer(tmp_path, version="3.16", remote_write=True, otlp_receiver=True) as prometheus:
        build = api(prometheus.url, "/api/v1/status/buildinfo")
        assert build["version"] == "3.16.0", build
        features = api(prometheus.url, "/api/v1/features")
    assert features["api"]["remote_write_receiver"] is True, features["api"]
    assert features["api"]["otlp_write_receiver"] is True, features["api"]
    assert features["promql"]["anchored"] is True, features["promql"]
    assert features["promql_functions"]["increase"] is True


def test_prometheus3_takes_otlp_and_remote_write(tmp_path: Path) -> None:
    """The receivers the collector and the trainer write into: a remote-written sample and an OTLP/HTTP counter both
    become queryable series (the OTLP one under the default UnderscoreEscapingWithSuffixes naming)."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    with PrometheusServer(tmp_path, version="3.16", remote_write=True, otlp_receiver=True) as prometheus:
        push(prometheus.url, [({"__name__": "trainer_tokens_total", "otel_bridge_rank": "0"}, 150.0)])
        exporter = OTLPMetricExporter(endpoint=f"{prometheus.url}/api/v1/otlp/v1/metrics", timeout=5)
        reader = PeriodicExportingMetricReader(exporter, export_interval_millis=60_000)
        provider = MeterProvider(metric_readers=[reader], resource=Resource.create({"service.name": "smoke"}))
        try:
            provider.get_meter("smoke").create_counter("smoke.tokens", unit="{token}").add(42)
            assert reader.force_flush(10_000)
        finally:
            provider.shutdown()
        assert float(prometheus.query("sum(trainer_tokens_total)")[0]["value"][1]) == 150.0
        assert float(prometheus.query('sum(smoke_tokens_total{job="smoke"})')[0]["value"][1]) == 42.0


def test_promtool_of_each_version_checks_a_config(prometheus_version: str, tmp_path: Path) -> None:
    config = tmp_path / "prometheus.yml"
    config.write_text("scrape_configs:\n  - job_name: a\n    static_configs: [{targets: ['127.0.0.1:9']}]\n")
    tool = prometheus_binary(prometheus_version, "promtool")
    result = subprocess.run([tool, "check", "config", str(config)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    config.write_text("scrape_configs:\n  - job_name: a\n    relabel_configs: [{regex: '(unclosed'}]\n")
    result = subprocess.run([tool, "check", "config", str(config)], capture_output=True, text=True, check=False)
    assert result.returncode != 0, result.stdout


def test_victoria_metrics_scrapes_takes_remote_write_and_answers(replicas: list[Replica], tmp_path: Path) -> None:
    """VictoriaMetrics v1.151.0 scrapes the simulators (``-promscrape.config``), stores a remote-written sample
    and answers PromQL over both; with ``-search.latencyOffset`` small, the newest samples are visible at once."""
    version = subprocess.run(
        [victoria_metrics_binary(), "-version"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    assert "v1.151.0" in version, version
    generate(replicas, 5)
    with VictoriaMetricsServer(tmp_path, [r.hostport for r in replicas], latency_offset_s=0.5) as vm:
        vm.wait_for_samples("vllm:generation_tokens_total", count=2)
        assert float(vm.query(TOKENS)[0]["value"][1]) == 10.0
        # Stamped 2 s ago: newer samples are hidden by -search.latencyOffset (0.5 s here). A pushed sample becomes
        # searchable once VictoriaMetrics flushes its in-memory buffer (about every second); /internal/force_flush
        # does it now.
        push(vm.url, [({"__name__": "trainer_tokens_total", "otel_bridge_rank": "0"}, 150.0)], at=time.time() - 2)
        requests.get(f"{vm.url}/internal/force_flush", timeout=10).raise_for_status()
        found = vm.query("sum(trainer_tokens_total)")
        assert found, vm.log_tail()
        assert float(found[0]["value"][1]) == 150.0
