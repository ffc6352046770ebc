"""Prometheus failing after start-up (and absent at start): real Prometheus processes and real misbehaving sockets.

Every test runs a training loop to its end and checks that (1) every trainer metric reached every healthy backend,
(2) the failure is counted in the ``otel_bridge/*`` health keys, (3) the log says what happened once, not per step.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otel_bridge import Bridge, PrometheusUnreachableError
from otel_bridge.health import INFRA_UNAVAILABLE, QUERY_ERRORS
from tests.conftest import Replica
from tests.faults.support import base_config, count_logs, rollout_keys
from tests.helpers.backends import BackendDouble
from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer, free_port, prom_vector
from tests.helpers.prometheus_server import PrometheusServer

pytestmark = [
    pytest.mark.integration,
    pytest.mark.sleeps(8, reason="each step lasts long enough for at least one Prometheus scrape inside its window"),
]

GAUGE_KEY = "rollout/vllm/num_requests_running/last"
PRODUCE_FAILED = "PromQLProcess failed"  # the PromQL path in its child process (prometheus.isolation: process)


def prom_config(tmp_path: Path, url: str, name: str, *, startup: str = "strict", **prometheus: Any) -> dict[str, Any]:
    return base_config(
        tmp_path,
        name,
        startup=startup,
        prometheus={"url": url, "scrape_interval_s": 1, "retries": 0, "timeout_s": 2, **prometheus},
        metrics=[{"name": "vllm:num_requests_running", "type": "gauge", "stats": ["last"]}],
    )


def jsonl_steps(tmp_path: Path, name: str) -> dict[int, dict[str, Any]]:
    lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
    return {int(obj["step"]): obj for obj in map(json.loads, lines)}


def test_prometheus_absent_at_start_strict_raises(tmp_path: Path) -> None:
    with pytest.raises(PrometheusUnreachableError, match="cannot reach Prometheus"):
        Bridge.from_config(prom_config(tmp_path, f"http://127.0.0.1:{free_port()}", "strict"))


def test_prometheus_absent_at_start_degrade_runs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    collecting = BackendDouble()
    config = prom_config(tmp_path, f"http://127.0.0.1:{free_port()}", "absent", startup="degrade")
    steps = 8
    with Bridge.from_config(config, backends=[collecting]) as bridge:
        for step in range(steps):
            with bridge.step(step):
                bridge.log({"actor/loss": float(step)}, step=step)
        last = bridge.collect(steps - 1)
        errors = bridge.health.counter(QUERY_ERRORS)
    assert [collecting.by_step()[s]["actor/loss"] for s in range(steps)] == [float(s) for s in range(steps)]
    assert [jsonl_steps(tmp_path, "absent")[s]["actor/loss"] for s in range(steps)] == [float(s) for s in range(steps)]
    assert all(v[INFRA_UNAVAILABLE] == 1 and not rollout_keys(v) for v in collecting.by_step().values())
    assert errors == steps + 1  # the start-up check, then one failed attempt per step
    assert last[QUERY_ERRORS] >= steps
    assert count_logs(caplog, "not usable at start-up") == 1
    assert count_logs(caplog, PRODUCE_FAILED) == 1


def test_prometheus_killed_mid_run_and_restarted(
    tmp_path: Path, replicas: list[Replica], caplog: pytest.LogCaptureFixture, prometheus_version: str
) -> None:
    caplog.set_level(logging.INFO)
    replicas[0].sim.set_running(4)
    replicas[1].sim.set_running(2)
    prometheus = PrometheusServer(
        tmp_path / "prom", [r.hostport for r in replicas], port=free_port(), version=prometheus_version
    )
    collecting = BackendDouble()
    records: dict[int, dict[str, float]] = {}
    try:
        prometheus.start()
        prometheus.wait_for_samples("vllm:num_requests_running", count=2)
        with Bridge.from_config(prom_config(tmp_path, prometheus.url, "killed"), backends=[collecting]) as bridge:

            def run(step: int, sleep_s: float) -> None:
                with bridge.step(step):
                    time.sleep(sleep_s)  # at least one scrape inside the window
                    bridge.log({"actor/loss": float(step)}, step=step)
                records[step] = bridge.collect(step)

            for step in range(2):
                run(step, 1.2)
            prometheus.stop()
            for step in range(2, 5):  # the gap
                run(step, 0.0)
            restarted = time.time()
            prometheus.start()  # same port, same data directory
            wait_for_fresh_samples(prometheus, "vllm:num_requests_running", restarted)
            for step in range(5, 8):
                run(step, 1.2)
            errors = bridge.health.counter(QUERY_ERRORS)
    finally:
        prometheus.stop()
    assert [records[s].get(GAUGE_KEY) for s in range(2)] == [6.0, 6.0]
    for step in range(2, 5):
        assert records[step][INFRA_UNAVAILABLE] == 1, step
        assert not rollout_keys(records[step]), (step, rollout_keys(records[step]))
    recovered = [s for s in range(5, 8) if records[s].get(GAUGE_KEY) == 6.0]
    assert recovered, f"no infrastructure keys within 3 steps of the restart: {[records[s] for s in range(5, 8)]}"
    assert records[recovered[0]][INFRA_UNAVAILABLE] == 0
    assert errors >= 3
    assert sorted(collecting.by_step()) == list(range(8))
    assert all(collecting.by_step()[s]["actor/loss"] == float(s) for s in range(8))
    assert count_logs(caplog, PRODUCE_FAILED) == 1


def wait_for_fresh_samples(prometheus: PrometheusServer, metric: str, since: float, timeout_s: float = 30.0) -> None:
    """Wait until every series of ``metric`` has a sample scraped after ``since`` (Prometheus applies scrape targets
    a few seconds after it starts, so "ready" is not "scraping")."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = prometheus.query(f"min(timestamp({metric}))")
        if result and float(result[0]["value"][1]) > since:
            return
        time.sleep(0.2)
    raise AssertionError(f"Prometheus scraped no {metric} after its restart within {timeout_s}s")


class FlakyPrometheus:
    """A fake Prometheus API on a real socket: answers one tagged gauge series until ``fault`` is set."""

    def __init__(self) -> None:
        self.fault: Response | None = None
        self._lock = threading.Lock()
        self.server = ScriptedHTTPServer(self._handle)

    def _handle(self, request: RecordedRequest) -> Response:
        with self._lock:
            fault = self.fault
        if fault is not None:
            return fault
        return prom_vector([({"otel_bridge_q": "0/last"}, 3.0)])

    def set_fault(self, fault: Response | None) -> None:
        with self._lock:
            self.fault = fault


@pytest.fixture
def flaky() -> Iterator[FlakyPrometheus]:
    fake = FlakyPrometheus()
    try:
        yield fake
    finally:
        fake.server.close()


_BIG = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}, "pad": "x" * 5000}).encode()

FAULTS = {
    "hang": Response(hang=True),
    "503": Response(status=503, body=b"unavailable"),
    "500": Response(status=500, body=b"internal error"),
    "429": Response(status=429, body=b"slow down", headers={"Retry-After": "1"}),
    "truncated": Response(body=_BIG, headers={"Content-Type": "application/json"}, truncate_after=40),
    "non-json": Response(body=b"hello, I am not Prometheus", headers={"Content-Type": "text/plain"}),
    "oversized": Response(body=_BIG, headers={"Content-Type": "application/json"}),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_prometheus_misbehaving_after_start(
    tmp_path: Path, flaky: FlakyPrometheus, caplog: pytest.LogCaptureFixture, fault: str
) -> None:
    caplog.set_level(logging.INFO)
    collecting = BackendDouble()
    config = prom_config(tmp_path, flaky.server.url, fault, timeout_s=0.5, max_response_bytes=2000)
    steps = 6
    with Bridge.from_config(config, backends=[collecting]) as bridge:
        bridge.log({"actor/loss": 0.0}, step=0)
        assert bridge.collect(0)[GAUGE_KEY] == 3.0
        flaky.set_fault(FAULTS[fault])
        for step in range(1, steps + 1):
            with bridge.step(step):
                bridge.log({"actor/loss": float(step)}, step=step)
            bridge.collect(step)
        errors = bridge.health.counter(QUERY_ERRORS)
        flaky.set_fault(None)
        with bridge.step(steps + 1):
            bridge.log({"actor/loss": float(steps + 1)}, step=steps + 1)
        recovered = bridge.collect(steps + 1)
    received = collecting.by_step()
    assert sorted(received) == list(range(steps + 2))
    assert all(received[s]["actor/loss"] == float(s) for s in received)
    assert all(jsonl_steps(tmp_path, fault)[s]["actor/loss"] == float(s) for s in received)
    for step in range(1, steps + 1):
        assert received[step][INFRA_UNAVAILABLE] == 1, step
        assert not rollout_keys(received[step]), step
    assert errors == steps  # one failed query per step (retries: 0)
    assert recovered[GAUGE_KEY] == 3.0
    assert recovered[INFRA_UNAVAILABLE] == 0
    assert count_logs(caplog, PRODUCE_FAILED) == 1


def test_slow_prometheus_still_delivers_its_answers(tmp_path: Path, flaky: FlakyPrometheus) -> None:
    collecting = BackendDouble()
    with Bridge.from_config(prom_config(tmp_path, flaky.server.url, "slow"), backends=[collecting]) as bridge:
        slow = prom_vector([({"otel_bridge_q": "0/last"}, 5.0)])
        slow.delay_s = 0.3
        flaky.set_fault(slow)
        for step in range(4):
            with bridge.step(step):
                bridge.log({"actor/loss": float(step)}, step=step)
        bridge.collect(3)
        errors = bridge.health.counter(QUERY_ERRORS)
    received = collecting.by_step()
    assert [received[s][GAUGE_KEY] for s in range(4)] == [5.0] * 4
    assert [received[s]["actor/loss"] for s in range(4)] == [0.0, 1.0, 2.0, 3.0]
    assert errors == 0
