"""Tracker backends failing: one raising on every write, one hanging, and a JSONL file on a full disk (/dev/full).

The other backends get every record, in order; failures are counted per backend and logged once.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from otel_bridge import Bridge
from otel_bridge.health import BACKEND_ERRORS
from tests.faults.support import base_config, count_logs
from tests.helpers.backends import BackendDouble

STEPS = 15
FAST_RETRIES = {"backend_retries": 2, "backend_backoff_s": 0}


def jsonl_values(path: Path) -> list[float]:
    return [json.loads(line)["v"] for line in path.read_text().splitlines()]


def test_raising_backend(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    raising, collecting = BackendDouble("raising", error=OSError("tracker service answered 500")), BackendDouble()
    config = base_config(tmp_path, "raising", delivery=FAST_RETRIES)
    bridge = Bridge.from_config(config, backends=[raising, collecting])
    for step in range(STEPS):
        with bridge.step(step):
            bridge.log({"v": float(step)}, step=step)
    bridge.commit()
    deadline = time.monotonic() + 30
    while len(next(s for s in bridge.exporter.delivery_status() if s.backend == "raising").failed_steps) < STEPS:
        assert time.monotonic() < deadline, "the raising backend's records were never given up on"
        time.sleep(0.02)
    bridge.log({"v": float(STEPS)}, step=STEPS)  # this record reports the errors counted so far
    last = bridge.collect(STEPS)
    report = bridge.close()
    expected = [float(s) for s in range(STEPS + 1)]
    assert jsonl_values(tmp_path / "raising" / "metrics.jsonl") == expected
    assert [r.values["v"] for r in collecting.records] == expected
    assert raising.attempts == (STEPS + 1) * 3
    assert bridge.health.counter(BACKEND_ERRORS, {"backend": "raising"}) == (STEPS + 1) * 3
    assert last["otel_bridge/backend_errors/backend.raising"] == STEPS * 3
    status = {s.backend: s for s in report.backends}
    assert status["raising"].failed_steps == tuple(range(STEPS + 1))
    assert status["jsonl"].complete
    assert status["collecting"].delivered == STEPS + 1
    assert count_logs(caplog, "tracker backend 'raising' failed") == 1


def test_hanging_backend(tmp_path: Path) -> None:
    hanging, collecting = BackendDouble("hanging", hold_after=2), BackendDouble()
    bridge = Bridge.from_config(base_config(tmp_path, "hanging"), backends=[hanging, collecting])
    try:
        for step in range(STEPS):
            with bridge.step(step):
                bridge.log({"v": float(step)}, step=step)
        bridge.collect(STEPS - 1)
        report = bridge.close(timeout_s=1.0)
    finally:
        hanging.release.set()
    expected = [float(s) for s in range(STEPS)]
    assert [r.values["v"] for r in collecting.records] == expected
    assert jsonl_values(tmp_path / "hanging" / "metrics.jsonl") == expected
    status = {s.backend: s for s in report.backends}
    assert status["hanging"].delivered == 2
    assert status["hanging"].pending_steps == tuple(range(2, STEPS))
    assert status["collecting"].complete
    assert status["jsonl"].complete


def test_disk_full(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    collecting = BackendDouble()
    config = base_config(tmp_path, "full", trackers=[{"type": "jsonl", "path": "/dev/full"}], delivery=FAST_RETRIES)
    bridge = Bridge.from_config(config, backends=[collecting])
    for step in range(STEPS):
        with bridge.step(step):
            bridge.log({"v": float(step)}, step=step)
    bridge.collect(STEPS - 1)
    report = bridge.close()
    assert [r.values["v"] for r in collecting.records] == [float(s) for s in range(STEPS)]
    assert bridge.health.counter(BACKEND_ERRORS, {"backend": "jsonl"}) == STEPS * 3
    status = {s.backend: s for s in report.backends}
    assert status["jsonl"].failed_steps == tuple(range(STEPS))
    assert status["collecting"].complete
    # The first failed write only: nothing is left buffered for close() to fail on (issue 14 point 5).
    assert count_logs(caplog, "No space left on device", logging.ERROR) == 1
    assert count_logs(caplog, "tracker backend 'jsonl' failed to write") == 1


def test_intermittently_failing_backend_is_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    flaky = BackendDouble("flaky", error=ConnectionError("tracker service: 503"), fail_every=3)  # retries recover
    bridge = Bridge.from_config(base_config(tmp_path, "flaky", delivery=FAST_RETRIES), backends=[flaky])
    for step in range(30):
        with bridge.step(step):
            bridge.log({"v": float(step)}, step=step)
    report = bridge.close()
    assert [r.values["v"] for r in flaky.records] == [float(s) for s in range(30)]
    assert all(s.complete for s in report.backends)
    assert bridge.health.counter(BACKEND_ERRORS, {"backend": "flaky"}) == flaky.attempts - 30
    assert count_logs(caplog, "tracker backend 'flaky' failed") == 1
