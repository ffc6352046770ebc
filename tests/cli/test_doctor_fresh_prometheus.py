"""``doctor`` right after Prometheus starts, as the walk-through runs it (``prometheus ... &``, ``sleep 5``).

Prometheus 2.x takes up its scrape targets at the scrape manager's first reload tick (5 s after start) and scrapes
each at an offset within its interval: until then a target is missing from ``/api/v1/targets`` or has health
``unknown``. Neither means the rollout server is down; doctor waits (bounded) for Prometheus' first scrape of each,
and reports a target that is really down at once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otel_bridge.cli.doctor.context import DoctorContext
from otel_bridge.cli.doctor.prometheus import POLL_S, STARTUP_S, check_prometheus_targets, settled_targets
from otel_bridge.config import PrometheusConfig
from otel_bridge.producers.promql import client_for
from tests.cli.support import check_named, run_cli, validate_doctor_json, write_config
from tests.conftest import Replica
from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer
from tests.helpers.prometheus_server import PrometheusServer


@pytest.mark.integration
def test_doctor_right_after_prometheus_starts_waits_for_its_first_scrapes(
    tmp_path: Path, prometheus_version: str
) -> None:
    replicas = [Replica(), Replica()]
    server = PrometheusServer(
        tmp_path / "prometheus",
        [r.hostport for r in replicas],
        scrape_interval_s=1.0,
        version=prometheus_version,
        discovery_reload_s=None,  # Prometheus' own 5 s before it takes up its targets: what doctor must wait out
    )
    try:
        server.start()  # ready: it answers, but has not taken up (let alone scraped) its targets yet
        config = {
            "prometheus": {"url": server.url, "scrape_interval_s": 1},
            "metrics": [{"name": "vllm:generation_tokens_total", "type": "counter"}],
            "trackers": [{"type": "jsonl"}],
            "run": {"dir": str(tmp_path / "runs")},
        }
        path = write_config(tmp_path / "otel-bridge.yaml", config)
        done = run_cli(["doctor", "--json", "--config", str(path)], cwd=tmp_path)
    finally:
        server.stop()
        for replica in replicas:
            replica.stop()
    document = json.loads(done.stdout)
    validate_doctor_json(document)
    assert check_named(document, "prometheus targets") == {
        "name": "prometheus targets",
        "status": "pass",
        "detail": "2/2 up",
        "fix": None,
    }
    assert done.returncode == 0, done.stdout


def target(health: str, url: str = "http://127.0.0.1:8000/metrics", error: str = "") -> dict[str, Any]:
    return {"scrapeUrl": url, "health": health, "lastError": error, "scrapeInterval": "1s", "scrapeTimeout": "500ms"}


def prometheus_answering(answers: Iterator[list[dict[str, Any]]], started_s_ago: float = 3600.0) -> ScriptedHTTPServer:
    """A Prometheus whose ``/api/v1/targets`` gives the next of ``answers`` each time (the last one from then on)."""
    current: list[list[dict[str, Any]]] = [[]]
    start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - started_s_ago))

    def answer(request: RecordedRequest) -> Response:
        if request.path.startswith("/api/v1/targets"):
            current[0] = next(answers, current[0])
            data: Any = {"activeTargets": current[0], "droppedTargets": []}
        elif request.path.startswith("/api/v1/status/runtimeinfo"):
            data = {"startTime": start}
        else:
            return Response(404, b"not found")
        body = json.dumps({"status": "success", "data": data}).encode()
        return Response(200, body, {"Content-Type": "application/json"})

    return ScriptedHTTPServer(answer)


def check_targets(server: ScriptedHTTPServer) -> tuple[dict[str, Any], float]:
    context = DoctorContext(None)
    client = client_for(PrometheusConfig(url=server.url, retries=0), server.url)
    started = time.monotonic()
    try:
        check_prometheus_targets(context, client)
    finally:
        client.close()
    (check,) = context.checks
    return {"status": check.status, "detail": check.detail, "fix": check.fix}, time.monotonic() - started


def test_targets_not_scraped_yet_are_waited_for() -> None:
    answers = iter([[target("unknown"), target("unknown", "http://127.0.0.1:8001/metrics")]] * 3 + [[target("up")]])
    with prometheus_answering(answers) as server:
        check, _ = check_targets(server)
    assert check == {"status": "pass", "detail": "1/1 up", "fix": None}


def test_a_freshly_started_prometheus_without_targets_yet_is_waited_for() -> None:
    answers = iter([[], [], [target("unknown")], [target("up")]])
    with prometheus_answering(answers, started_s_ago=1.0) as server:
        check, _ = check_targets(server)
    assert check["status"] == "pass", check


def test_a_target_never_scraped_fails_after_a_bounded_wait_and_says_so() -> None:
    with prometheus_answering(iter([[target("up"), target("unknown", "http://127.0.0.1:8001/metrics")]])) as server:
        check, elapsed = check_targets(server)
    assert check["status"] == "fail"
    assert check["detail"] == (
        "1/2 up; 1 not scraped yet by Prometheus after waiting 2.5s (its scrape interval and timeout, plus 1s): "
        "http://127.0.0.1:8001/metrics"
    )
    assert "down" not in (check["fix"] or "")
    assert 2.0 < elapsed < 10.0


def test_a_down_target_is_reported_at_once() -> None:
    with prometheus_answering(iter([[target("up"), target("down", error="connection refused")]])) as server:
        check, elapsed = check_targets(server)
    assert check["status"] == "fail"
    assert check["detail"] == "1/2 up; 1 down: http://127.0.0.1:8000/metrics: down (connection refused)"
    assert check["fix"] == "start the servers that are down, or remove them from Prometheus' scrape config"
    assert elapsed < 1.0


def test_a_long_running_prometheus_that_scrapes_nothing_fails_at_once() -> None:
    with prometheus_answering(iter([[]])) as server:
        check, elapsed = check_targets(server)
    assert (check["status"], check["detail"]) == ("fail", "Prometheus scrapes nothing")
    assert elapsed < 1.0


def test_the_wait_for_a_fresh_prometheus_is_bounded_even_when_its_clock_runs_ahead() -> None:
    """``startTime`` comes from Prometheus' clock: one ahead of ours must not stretch the wait past STARTUP_S."""
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    with prometheus_answering(iter([[]]), started_s_ago=-3600.0) as server:
        client = client_for(PrometheusConfig(url=server.url, retries=0), server.url)
        try:
            assert settled_targets(client, clock=lambda: now[0], sleep=sleep) == []
        finally:
            client.close()
    assert 0 < now[0] <= STARTUP_S + POLL_S
