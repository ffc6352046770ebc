"""Delivery off the training thread: boundaries never wait for the network; backends are isolated; queues bounded."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otel_bridge import Bridge
from otel_bridge.exporters.tracker import INFRA_DROPPED_NOTE, INFRA_LATE_NOTE
from tests.helpers.backends import BackendDouble
from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer, json_response, prom_vector


class GatedPrometheus:
    """A real HTTP server answering like Prometheus, which holds every query until the test opens the gate."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.armed = False
        self.events: list[str] = []
        self._lock = threading.Lock()
        self.server = ScriptedHTTPServer(self._answer)

    def _answer(self, request: RecordedRequest) -> Response:
        if request.path.endswith("/targets"):  # the start-up check of the scrape interval
            return json_response({"status": "success", "data": {"activeTargets": [], "droppedTargets": []}})
        if "unless count_over_time" in (request.param("query") or ""):
            # Which series have not sent a sample after the window's end yet (there are no targets to say when they
            # are scraped): here every one has.
            return prom_vector([])
        if self.armed:
            self.gate.wait(30)
        with self._lock:
            self.events.append("answered")
        return prom_vector([({"otel_bridge_q": "0/last"}, 3.0)])

    def note(self, event: str) -> None:
        with self._lock:
            self.events.append(event)


@pytest.fixture
def gated() -> Iterator[GatedPrometheus]:
    prometheus = GatedPrometheus()
    try:
        yield prometheus
    finally:
        prometheus.gate.set()
        prometheus.server.close()


def gated_config(tmp_path: Path, url: str, **delivery: Any) -> dict[str, Any]:
    return {
        "prometheus": {"url": url, "retries": 0, "timeout_s": 30},
        "metrics": [{"name": "vllm:num_requests_running", "type": "gauge", "stats": ["last"]}],
        "run": {"name": "gated", "dir": str(tmp_path)},
        "delivery": delivery,
    }


def test_step_boundaries_do_not_wait_for_a_slow_prometheus(tmp_path: Path, gated: GatedPrometheus) -> None:
    steps = 8
    with Bridge.from_config(gated_config(tmp_path, gated.server.url)) as bridge:
        gated.events.clear()
        gated.armed = True  # from now on every query waits for the gate
        for step in range(steps):
            with bridge.step(step):
                bridge.log({"actor/loss": float(step)}, step=step)
            gated.note(f"step {step} returned")
        bridge.log({"actor/loss": -1.0}, step=steps)
        gated.note("log returned")
        gated.gate.set()
        records = [bridge.collect(s) for s in range(steps + 1)]
    returned = [e for e in gated.events if e != "answered"]
    assert returned == [*(f"step {s} returned" for s in range(steps)), "log returned"]
    first_answer = gated.events.index("answered")
    assert first_answer == len(returned), "every boundary returned before Prometheus answered anything"
    assert [r["actor/loss"] for r in records] == [*map(float, range(steps)), -1.0]
    assert all(r["rollout/vllm/num_requests_running/last"] == 3.0 for r in records)


def test_full_queue_drops_infrastructure_readings_never_trainer_metrics(tmp_path: Path, gated: GatedPrometheus) -> None:
    config = gated_config(tmp_path, gated.server.url, queue_size=2, max_block_s=0)
    with Bridge.from_config(config) as bridge:
        gated.armed = True
        for step in range(6):
            bridge.log({"actor/loss": float(step)}, step=step)
        gated.gate.set()
        records = [bridge.record(s) for s in range(6) if bridge.collect(s) is not None]
    lines = [json.loads(line) for line in (tmp_path / "gated" / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == list(range(6))
    assert [line["actor/loss"] for line in lines] == [float(s) for s in range(6)]
    dropped = [r.step for r in records if r is not None and INFRA_DROPPED_NOTE in r.notes]
    assert dropped, "with 2 queue slots and 6 steps behind a closed gate, some readings must be dropped"
    for record in records:
        assert record is not None
        has_infra = "rollout/vllm/num_requests_running/last" in record.values
        # the step being assembled when the queue overflowed stops waiting for its readings (issue 14 point 1)
        late = INFRA_LATE_NOTE in record.notes
        assert has_infra == (record.step not in dropped and not late), record.step
    assert lines[-1]["otel_bridge/dropped_infra_steps"] == len(dropped)


def test_failing_backend_does_not_stop_the_others(tmp_path: Path) -> None:
    failing = BackendDouble("failing", error=OSError("disk on fire"))
    config = {
        "run": {"name": "fail", "dir": str(tmp_path)},
        "delivery": {"backend_retries": 2, "backend_backoff_s": 0},
    }
    steps = 20
    bridge = Bridge.from_config(config, backends=[failing])
    for step in range(steps):
        bridge.log({"v": float(step)}, step=step)
    report = bridge.close()
    lines = [json.loads(line) for line in (tmp_path / "fail" / "metrics.jsonl").read_text().splitlines()]
    assert [line["v"] for line in lines] == [float(s) for s in range(steps)]
    assert failing.attempts == steps * 3
    assert bridge.health.counter("otel_bridge/backend_errors", {"backend": "failing"}) == failing.attempts
    by_name = {status.backend: status for status in report.backends}
    assert by_name["jsonl"].complete
    assert by_name["jsonl"].delivered == steps
    assert by_name["failing"].failed_steps == tuple(range(steps))
    assert not report.complete


def test_close_reports_what_a_hanging_backend_did_not_get(tmp_path: Path) -> None:
    hanging = BackendDouble("hanging", hold_after=1)  # writes step 0, then holds until released
    bridge = Bridge.from_config({"run": {"name": "hang", "dir": str(tmp_path)}}, backends=[hanging])
    for step in range(4):
        bridge.log({"v": float(step)}, step=step)
    try:
        report = bridge.close(timeout_s=1.0)
    finally:
        hanging.release.set()
    by_name = {status.backend: status for status in report.backends}
    assert by_name["jsonl"].delivered == 4
    assert by_name["hanging"].delivered == 1
    assert by_name["hanging"].pending_steps == (1, 2, 3)
    assert not report.complete
    assert bridge.close() is report
