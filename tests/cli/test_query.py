"""``otel-bridge query`` as a subprocess against a real Prometheus scraping simulated vLLM servers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.support import run_cli, write_config
from tests.conftest import Replica
from tests.helpers.http_servers import free_port
from tests.helpers.prometheus_server import PrometheusServer

pytestmark = pytest.mark.integration


def table_rows(stdout: str) -> list[list[str]]:
    """The data rows of the printed table (after the ---- rule), split on whitespace."""
    lines = stdout.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("---"))
    return [line.split() for line in lines[rule + 1 :] if line.strip()]


def test_query_a_counter_by_instance(tmp_path: Path, prometheus: PrometheusServer, replicas: list[Replica]) -> None:
    args = ["query", "vllm:generation_tokens_total", "--prometheus-url", prometheus.url, "--type", "counter"]
    done = run_cli([*args, "--window", "10s", "--by", "instance", "--stats", "delta"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("vllm:generation_tokens_total (counter) over (")
    assert "= 10s" in done.stdout.splitlines()[0]
    rows = table_rows(done.stdout)
    assert sorted(row[2] for row in rows) == sorted(f"instance={r.hostport}" for r in replicas)
    assert {row[1] for row in rows} == {"delta"}
    assert all(float(row[3]) >= 0 for row in rows)


def test_query_a_configured_metric_uses_its_config(tmp_path: Path, prometheus: PrometheusServer) -> None:
    config = write_config(
        tmp_path / "otel-bridge.yaml",
        {"prometheus": {"url": prometheus.url, "scrape_interval_s": 1}, "metrics": [{"preset": "vllm"}]},
    )
    done = run_cli(["query", "vllm:kv_cache_usage_perc", "--config", str(config), "--window", "5s"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = table_rows(done.stdout)
    assert [row[1] for row in rows] == ["max", "mean"]  # the preset's statistics, combined across replicas
    assert all(row[2] == "-" for row in rows)


def test_query_a_raw_promql_expression_as_is(tmp_path: Path, prometheus: PrometheusServer) -> None:
    done = run_cli(["query", "sum(up)", "--prometheus-url", prometheus.url, "--at", "now"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("PromQL sum(up) over (")
    assert table_rows(done.stdout) == [["value", "-", "-", "2"]]


def test_query_that_matches_nothing_exits_1(tmp_path: Path, prometheus: PrometheusServer) -> None:
    args = ["query", "vllm:no_such_metric", "--prometheus-url", prometheus.url, "--type", "gauge"]
    done = run_cli(args, cwd=tmp_path)
    assert done.returncode == 1
    assert "no series matched" in done.stdout


def test_query_errors_are_one_line_without_traceback(tmp_path: Path) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    cases = [
        (["query", "up"], "pass --prometheus-url URL"),
        (["query", "up", "--prometheus-url", down], down),
        (["query", "up", "--prometheus-url", down, "--window", "soon"], "--window 'soon' is not a positive duration"),
        (["query", "sum(up)", "--prometheus-url", down, "--stats", "max"], "apply to metric names"),
    ]
    for args, expected in cases:
        done = run_cli(args, cwd=tmp_path, env={"OTEL_BRIDGE__PROMETHEUS__RETRIES": "0"})
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith("otel-bridge: "), done.stderr
        assert expected in lines[0]
        assert "Traceback" not in done.stderr
    verbose = run_cli(["--verbose", "query", "up"], cwd=tmp_path)
    assert verbose.returncode != 0
    assert "Traceback" in verbose.stderr


def test_query_a_key_the_run_records(tmp_path: Path, prometheus: PrometheusServer) -> None:
    """Issue 36: the key a run records (docs/cli.md: a configured metric's key works) is that metric's statistic, from
    ./otel-bridge.yaml found as every command finds it, not a PromQL division of four names."""
    write_config(
        tmp_path / "otel-bridge.yaml",
        {"prometheus": {"url": prometheus.url, "scrape_interval_s": 1}, "metrics": [{"preset": "vllm"}]},
    )
    ttft = run_cli(["query", "rollout/vllm/time_to_first_token_seconds/p99", "--window", "10s"], cwd=tmp_path)
    # the histogram of the configured entry (these servers finish no request: no observation, no row)
    assert ttft.stdout.startswith("vllm:time_to_first_token_seconds (histogram) over ("), ttft.stdout
    assert "config: otel-bridge.yaml (found in the current directory)" in ttft.stderr
    assert "metrics[" not in ttft.stdout + ttft.stderr
    done = run_cli(["query", "rollout/vllm/num_requests_running/max", "--window", "10s"], cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("vllm:num_requests_running (gauge) over ("), done.stdout
    rows = table_rows(done.stdout)
    assert [row[:2] for row in rows] == [["rollout/vllm/num_requests_running/max", "max"]]
    whole = run_cli(["query", "rollout/vllm/generation_tokens_total", "--window", "10s"], cwd=tmp_path)
    assert whole.returncode == 0, whole.stdout + whole.stderr
    assert sorted(row[1] for row in table_rows(whole.stdout)) == ["delta", "rate"]


def test_a_raw_expression_that_matches_nothing_names_no_config_entry(
    tmp_path: Path, prometheus: PrometheusServer
) -> None:
    """Issue 36: the warning about an expression given on the command line names it, not ``metrics[-1]``."""
    done = run_cli(["query", "vllm:a / vllm:b", "--prometheus-url", prometheus.url], cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "metrics[-1]" not in done.stdout + done.stderr
