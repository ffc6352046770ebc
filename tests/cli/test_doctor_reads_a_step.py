"""Issue 16 point 10, second half: doctor reads the metrics the way a run reads them (the producer a run builds, its
start-up check and one step's window), so it cannot pass where a run fails."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from otel_bridge import Bridge
from otel_bridge.errors import OtelBridgeError
from tests.cli.support import check_named, run_cli, validate_doctor_json, write_config
from tests.conftest import Replica
from tests.helpers.prometheus_server import PrometheusServer


def _doctor(tmp_path: Path, name: str, config: dict[str, Any]) -> dict[str, Any]:
    path = write_config(tmp_path / f"{name}.yaml", config)
    done = run_cli(["doctor", "--json", "--config", str(path)], cwd=tmp_path)
    assert done.returncode in (0, 1), done.stderr
    assert done.stderr == "", done.stderr  # the producers' warnings become checks, not log lines
    document = json.loads(done.stdout)
    validate_doctor_json(document)
    assert done.returncode == (0 if document["ok"] else 1)
    return document


def _run_starts(config: dict[str, Any]) -> bool:
    try:
        with Bridge.from_config(config) as bridge:
            with bridge.step(0):
                pass
            bridge.collect(0)
    except OtelBridgeError:
        return False
    return True


@pytest.mark.integration
def test_doctor_passes_exactly_where_a_run_starts(
    tmp_path: Path, prometheus: PrometheusServer, replicas: list[Replica]
) -> None:
    base: dict[str, Any] = {
        "prometheus": {"url": prometheus.url, "scrape_interval_s": 1},
        "metrics": [{"preset": "vllm"}],
        "trackers": [],
        "run": {"dir": str(tmp_path / "runs")},
    }
    document = _doctor(tmp_path, "ok", base)
    assert document["ok"], json.dumps(document, indent=1)
    step = check_named(document, "step")
    assert step["status"] == "pass"
    assert step["detail"].startswith("one 1s step read as a run reads it: ")
    tokens = check_named(document, "metric vllm:generation_tokens_total")["detail"]
    assert "a step records rollout/vllm/generation_tokens_total/delta (+1 more)" in tokens
    assert _run_starts(base)

    # recording rules required but not loaded: every series exists, yet a run refuses to start; so does doctor
    strict_rules = {**base, "prometheus": {**base["prometheus"], "boundary": "samples", "recording_rules": "required"}}
    assert not _run_starts(strict_rules)
    document = _doctor(tmp_path, "rules", strict_rules)
    assert not document["ok"]
    step = check_named(document, "step")
    assert step["status"] == "fail"
    assert step["detail"].startswith("a run would not start: prometheus.recording_rules: required"), step["detail"]
    assert check_named(document, "metric vllm:generation_tokens_total")["status"] == "pass"  # series do exist


def test_doctor_on_the_scrape_path_reads_as_the_scrape_producer(tmp_path: Path, replicas: list[Replica]) -> None:
    base: dict[str, Any] = {
        "scrape": {"targets": [r.hostport for r in replicas]},
        "metrics": [{"name": "vllm:generation_tokens_total", "type": "counter"}],
        "trackers": [],
        "run": {"dir": str(tmp_path / "runs")},
    }
    document = _doctor(tmp_path, "ok", base)
    assert document["ok"], json.dumps(document, indent=1)
    assert check_named(document, "step")["status"] == "pass"
    detail = check_named(document, "metric vllm:generation_tokens_total")["detail"]
    assert detail.startswith("2/2 endpoints; instance: ")
    assert detail.endswith("; a step records rollout/vllm/generation_tokens_total/delta (+1 more)")
    assert _run_starts(base)

    # the endpoints answer doctor's own fetch, but a run reads them with scrape.max_response_bytes and fails
    capped = {**base, "scrape": {**base["scrape"], "max_response_bytes": 100}}
    assert not _run_starts(capped)
    document = _doctor(tmp_path, "capped", capped)
    assert not document["ok"]
    step = check_named(document, "step")
    assert step["status"] == "fail"
    assert "scrape.max_response_bytes" in step["detail"], step["detail"]
