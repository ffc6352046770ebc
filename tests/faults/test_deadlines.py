"""Deadlines against a Prometheus that trickles its answers (issue 14 point 1, the parts after the transport's).

A trickling server passes any per-read timeout. The transport already cuts each request at ``prometheus.timeout_s``;
here a step's infrastructure readings get their own deadline (``delivery.produce_timeout_s``) after which the record
goes out with the trainer's values and the infrastructure marked missing, a step boundary blocks at most
``2 * delivery.max_block_s`` with the queue bound holding, and ``close()`` returns within ``close_timeout_s`` with every
trainer value delivered.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_bridge import Bridge
from otel_bridge.exporters.tracker import INFRA_LATE_NOTE
from otel_bridge.health import INFRA_UNAVAILABLE
from tests.faults.support import base_config, rollout_keys
from tests.helpers.backends import BackendDouble
from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer, json_response, prom_vector

pytestmark = pytest.mark.integration

STEPS = 20


class TricklingPrometheus:
    """Answers one tagged gauge until ``trickle`` is set, then sends every answer one byte every 2 s."""

    def __init__(self) -> None:
        self.trickle = threading.Event()
        self.server = ScriptedHTTPServer(self._handle)

    def _handle(self, request: RecordedRequest) -> Response:
        if request.path.endswith("/targets"):
            return json_response({"status": "success", "data": {"activeTargets": [], "droppedTargets": []}})
        answer = prom_vector([({"otel_bridge_q": "0/last"}, 3.0)])
        if self.trickle.is_set():
            answer.trickle_s = 2.0
        return answer


@pytest.fixture
def trickling() -> Iterator[TricklingPrometheus]:
    fake = TricklingPrometheus()
    try:
        yield fake
    finally:
        fake.server.close()


def test_a_trickling_prometheus_never_holds_a_record_or_the_trainer(
    tmp_path: Path, trickling: TricklingPrometheus
) -> None:
    config = base_config(
        tmp_path,
        "trickle",
        prometheus={"url": trickling.server.url, "scrape_interval_s": 1, "retries": 0, "timeout_s": 20},
        metrics=[{"name": "vllm:num_requests_running", "type": "gauge", "stats": ["last"]}],
        delivery={"queue_size": 3, "max_block_s": 0.2, "produce_timeout_s": 0.5, "close_timeout_s": 4},
    )
    collecting = BackendDouble()
    bridge = Bridge.from_config(config, backends=[collecting])
    bridge.log({"actor/loss": 0.0}, step=0)
    assert bridge.collect(0)["rollout/vllm/num_requests_running/last"] == 3.0
    trickling.trickle.set()
    boundaries: list[float] = []
    for step in range(1, STEPS + 1):
        started = time.monotonic()
        with bridge.step(step):
            bridge.log({"actor/loss": float(step)}, step=step)
            time.sleep(0.05)
        boundaries.append(time.monotonic() - started - 0.05)
    bridge.collect(3, timeout_s=5)  # step 3 is out within the produce deadline, not after the 20 s request timeout
    started = time.monotonic()
    report = bridge.close()
    closing = time.monotonic() - started
    assert closing < 4.5, closing
    assert report.complete, report
    received = collecting.by_step()
    assert sorted(received) == list(range(STEPS + 1))
    assert all(received[s]["actor/loss"] == float(s) for s in received)
    late = [r for r in collecting.records if r.step > 0 and INFRA_LATE_NOTE in r.notes]
    assert late, [(r.step, r.notes) for r in collecting.records]
    assert all(not rollout_keys(received[r.step]) and received[r.step][INFRA_UNAVAILABLE] == 1 for r in late)
    # A boundary waits at most max_block_s, then max_block_s more while the worker makes room (milliseconds).
    assert max(boundaries) < 2 * 0.2 + 0.3, boundaries
    lines = (tmp_path / "trickle" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == list(range(STEPS + 1))


def test_degraded_start_up_waits_at_most_the_timeout(tmp_path: Path, trickling: TricklingPrometheus) -> None:
    trickling.trickle.set()  # Prometheus trickles from the start: every start-up check would take timeout_s x tries
    config = base_config(
        tmp_path,
        "start",
        startup="degrade",
        prometheus={"url": trickling.server.url, "scrape_interval_s": 1, "retries": 1, "timeout_s": 1},
        metrics=[{"name": "vllm:num_requests_running", "type": "gauge", "stats": ["last"]}],
    )
    collecting = BackendDouble()
    started = time.monotonic()
    bridge = Bridge.from_config(config, backends=[collecting])
    took = time.monotonic() - started
    try:
        assert took < 1.8, took
        for step in range(3):
            with bridge.step(step):
                bridge.log({"actor/loss": float(step)}, step=step)
        assert bridge.collect(2, timeout_s=10)["actor/loss"] == 2.0
        trickling.trickle.clear()
        deadline = time.monotonic() + 30
        step = 3
        while time.monotonic() < deadline:  # once the checks have failed fast, the steps retry and recover
            with bridge.step(step):
                bridge.log({"actor/loss": float(step)}, step=step)
            if rollout_keys(bridge.collect(step, timeout_s=10)):
                break
            step += 1
            time.sleep(0.2)
        else:
            pytest.fail("the infrastructure readings never came back after Prometheus answered again")
    finally:
        bridge.close(timeout_s=5)
    received = collecting.by_step()
    assert all(received[s]["actor/loss"] == float(s) for s in range(step + 1))
