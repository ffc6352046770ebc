"""Issue 16 points 9 and 11: discover, doctor and query say where things came from and what a run records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from otel_bridge import Bridge
from tests.cli.support import check_named, run_cli, validate_doctor_json, write_config
from tests.conftest import Replica
from tests.helpers.prometheus_server import PrometheusServer


def test_discover_says_where_the_url_came_from(tmp_path: Path) -> None:
    url = "http://127.0.0.1:9999"
    env_only = run_cli(["discover"], cwd=tmp_path, env={"OTEL_BRIDGE_PROMETHEUS_URL": url})
    assert env_only.returncode == 0, env_only.stderr
    assert env_only.stdout.splitlines()[0] == f"prometheus: {url} (from env OTEL_BRIDGE_PROMETHEUS_URL)"

    auto = write_config(tmp_path / "auto.yaml", {"prometheus": {"url": "auto"}})
    done = run_cli(["discover", "--config", str(auto)], cwd=tmp_path, env={"OTEL_BRIDGE_PROMETHEUS_URL": url})
    assert done.stdout.splitlines()[0] == f"prometheus: {url} (from env OTEL_BRIDGE_PROMETHEUS_URL)"

    explicit = write_config(tmp_path / "explicit.yaml", {"prometheus": {"url": "http://127.0.0.1:9998"}})
    done = run_cli(["discover", "--config", str(explicit)], cwd=tmp_path, env={"OTEL_BRIDGE_PROMETHEUS_URL": url})
    assert done.stdout.splitlines()[0] == "prometheus: http://127.0.0.1:9998 (from config)"  # the file wins
    done = run_cli(["discover", "--config", str(explicit)], cwd=tmp_path, env={"OTEL_BRIDGE__PROMETHEUS__URL": url})
    assert done.stdout.splitlines()[0] == f"prometheus: {url} (from env OTEL_BRIDGE__PROMETHEUS__URL)"

    scrape = write_config(tmp_path / "scrape.yaml", {"scrape": {"targets": ["127.0.0.1:8000"]}})
    done = run_cli(["discover", "--config", str(scrape)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "prometheus: not used (scrape path: the bridge reads scrape.targets itself)",
        "scrape targets (config): http://127.0.0.1:8000/metrics",
    ]
    assert "auto" not in done.stdout


def test_discover_with_nothing_to_find_names_ray_address(tmp_path: Path) -> None:
    done = run_cli(["discover"], cwd=tmp_path, env={"RAY_PROMETHEUS_HOST": "", "RAY_ADDRESS": ""})
    assert done.returncode == 1
    assert "config: prometheus.url is not set" in done.stdout  # not "'auto'": nothing says auto
    assert "--ray-address" in done.stdout


@pytest.mark.integration
def test_doctor_and_query_read_metrics_as_a_run_does(
    tmp_path: Path, prometheus: PrometheusServer, replicas: list[Replica]
) -> None:
    # doctor with nothing but OTEL_BRIDGE_PROMETHEUS_URL: the vllm preset's metrics are checked, and said so
    done = run_cli(["doctor", "--json"], cwd=tmp_path, env={"OTEL_BRIDGE_PROMETHEUS_URL": prometheus.url})
    document = json.loads(done.stdout)
    validate_doctor_json(document)
    assert document["ok"], done.stdout
    assert "the vllm preset's metrics are checked" in check_named(document, "config")["detail"]
    assert check_named(document, "metrics")["status"] == "warn"
    assert check_named(document, "metric vllm:generation_tokens_total")["status"] == "pass"
    assert "(from env OTEL_BRIDGE_PROMETHEUS_URL)" in check_named(document, "prometheus")["detail"]

    # doctor --prometheus-url
    done = run_cli(["doctor", "--json", "--prometheus-url", prometheus.url], cwd=tmp_path)
    document = json.loads(done.stdout)
    assert check_named(document, "prometheus")["detail"].startswith(f"{prometheus.url} (from --prometheus-url)")

    # query prints the keys a run records for the same metric
    args = ["query", "vllm:generation_tokens_total", "--prometheus-url", prometheus.url, "--window", "5s"]
    done = run_cli(args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("---"))
    queried = {line.split()[0] for line in lines[rule + 1 :] if line.strip()}
    config = {
        "prometheus": {"url": prometheus.url, "scrape_interval_s": 1},
        "metrics": [{"name": "vllm:generation_tokens_total"}],
        "trackers": [],
        "run": {"dir": str(tmp_path / "runs")},
    }
    with Bridge.from_config(config) as bridge:
        with bridge.step(0):
            replicas[0].sim.complete_request(10, 5, 0.01, 0.1, 0.001, 0.01)
        recorded = {key for key in bridge.collect(0) if key.startswith("rollout/")}
    assert (
        queried
        == recorded
        == {
            "rollout/vllm/generation_tokens_total/delta",
            "rollout/vllm/generation_tokens_total/rate",
        }
    )

    # a misspelt name without --type: it does not exist, exit 1, with the closest name
    done = run_cli(["query", "vllm:generation_token_total", "--prometheus-url", prometheus.url], cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr == ""
    assert "no series matched: vllm:generation_token_total does not exist in Prometheus" in done.stdout
    assert "did you mean vllm:generation_tokens_total?" in done.stdout


def test_doctor_checks_that_run_dir_is_writable(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n", encoding="utf-8")
    bad = write_config(tmp_path / "bad.yaml", {"run": {"dir": str(blocker / "runs")}})
    done = run_cli(["doctor", "--json", "--config", str(bad)], cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    document = json.loads(done.stdout)
    validate_doctor_json(document)
    check = check_named(document, "run dir")
    assert check["status"] == "fail"
    assert f"run.dir {blocker / 'runs'} is not writable" in check["detail"]

    fresh = tmp_path / "new" / "runs"
    good = write_config(tmp_path / "good.yaml", {"run": {"dir": str(fresh)}})
    done = run_cli(["doctor", "--json", "--config", str(good)], cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert check_named(json.loads(done.stdout), "run dir")["status"] == "pass"
    assert not (tmp_path / "new").exists()  # the check leaves nothing behind
