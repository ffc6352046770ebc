"""``doctor`` against a Prometheus whose answers are absurd: bounded output, no traceback (issue 37 finding 11).

Before: doctor against a Prometheus listing 100,000 down targets printed 36 MB in 20 s; one with a 1 MB version string
echoed it whole (3 MB); a ``startTime`` of year 1 ended doctor in a traceback. Now each check says a count and names
the first few, quotes at most a bounded piece of a server's text, and a time no clock can hold is taken as unknown. A
scripted Prometheus on loopback gives the answers (no real one lists 100,000 targets on this machine).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli.support import check_named, run_cli, validate_doctor_json, write_config
from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer

TARGETS = 100_000  # the first start time's cases; the others list FEW_TARGETS (the 20 MB list is most of a run's time)
FEW_TARGETS = 7
VERSION = "2.42.0-" + "v" * 1_000_000


@functools.cache
def _down_targets(targets: int) -> bytes:
    """``/api/v1/targets`` listing ``targets`` down targets (20 MB for :data:`TARGETS`: built once)."""
    down = [
        {
            "scrapeUrl": f"http://10.0.{i // 256 % 256}.{i % 256}:{8000 + i // 65536}/metrics",
            "health": "down",
            "lastError": "connection refused",
            "scrapeInterval": "1s",
            "scrapeTimeout": "500ms",
            "labels": {"job": "rollout", "instance": f"10.0.{i // 256 % 256}.{i % 256}:{8000 + i // 65536}"},
        }
        for i in range(targets)
    ]
    return json.dumps({"status": "success", "data": {"activeTargets": down, "droppedTargets": []}}).encode()


def _hostile_prometheus(start_time: str, targets: int) -> ScriptedHTTPServer:
    bodies: dict[str, bytes] = {
        "/api/v1/targets": _down_targets(targets),
        "/api/v1/status/buildinfo": json.dumps({"status": "success", "data": {"version": VERSION}}).encode(),
        "/api/v1/status/runtimeinfo": json.dumps({"status": "success", "data": {"startTime": start_time}}).encode(),
    }

    def answer(request: RecordedRequest) -> Response:
        body = bodies.get(request.path.split("?", 1)[0])
        if body is None:
            data: Any = {"resultType": "vector", "result": []}
            return Response(
                200, json.dumps({"status": "success", "data": data}).encode(), {"Content-Type": "application/json"}
            )
        return Response(200, body, {"Content-Type": "application/json"})

    return ScriptedHTTPServer(answer)


@pytest.mark.parametrize(
    ("start_time", "targets"),
    [("0001-01-01T00:00:00Z", TARGETS), ("0001-01-01T00:00:00", FEW_TARGETS), ("2026-01-01T00:00:00Z", FEW_TARGETS)],
)
@pytest.mark.parametrize("json_output", [True, False])
def test_doctor_output_stays_bounded_against_absurd_answers(
    tmp_path: Path, start_time: str, targets: int, json_output: bool
) -> None:
    server = _hostile_prometheus(start_time, targets)
    try:
        config = write_config(
            tmp_path / "otel-bridge.yaml",
            {
                "prometheus": {"url": server.url, "retries": 0, "scrape_interval_s": 1},
                "metrics": [{"name": "vllm:num_requests_running", "type": "gauge"}],
                "trackers": [{"type": "jsonl"}],
                "run": {"dir": str(tmp_path / "runs")},
            },
        )
        done = run_cli(
            ["doctor", "--config", str(config), *(["--json"] if json_output else [])], cwd=tmp_path, timeout=120
        )
    finally:
        server.close()
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert len(done.stdout) + len(done.stderr) < 100_000, (len(done.stdout), len(done.stderr))
    assert "v" * 5000 not in done.stdout
    if json_output:
        document = json.loads(done.stdout)
        validate_doctor_json(document)
        check = check_named(document, "prometheus targets")
        assert check["status"] == "fail"
        assert f"0/{targets} up" in check["detail"]
        assert f"{targets} down" in check["detail"]
        assert f"and {targets - 5} more" in check["detail"]
        assert "http://10.0.0.0:8000/metrics: down (connection refused)" in check["detail"]
    else:
        assert f"{targets} down" in done.stdout
