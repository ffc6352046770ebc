"""MeterProvider.force_flush() and shutdown() called from user code, as OTel users and libraries do.

The step reader asks for DELTA histograms, so a collection between two boundaries would take the step's observations
out of its record: force_flush must not collect, and shutdown must deliver what is pending before closing the trackers.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from otel_bridge import Bridge, BridgeClosedError
from tests.helpers.backends import BackendDouble


def config(tmp_path: Path, **delivery: Any) -> dict[str, Any]:
    return {"trackers": [{"type": "jsonl"}], "run": {"name": "flush", "dir": str(tmp_path)}, "delivery": delivery}


def test_force_flush_inside_a_step_keeps_the_steps_histogram(tmp_path: Path) -> None:
    with Bridge.from_config(config(tmp_path)) as bridge:
        meter = bridge.meter("user.code")
        h = meter.create_histogram("latency")
        c = meter.create_counter("n")
        with bridge.step(0):
            h.record(1)
        with bridge.step(1):
            h.record(5)
            h.record(7)
            c.add(2)
            assert bridge.meter_provider.force_flush() is True
        record = bridge.collect(1)
    assert record["n"] == 2.0
    assert record["latency/count"] == 2.0
    assert record["latency/sum"] == 12.0
    assert (record["latency/min"], record["latency/max"], record["latency/mean"]) == (5.0, 7.0, 6.0)


def test_force_flush_waits_for_the_trackers_to_write_delivered_steps(tmp_path: Path) -> None:
    backend = BackendDouble("gated", hold_after=0)  # every write waits for the test
    with Bridge.from_config(config(tmp_path), backends=[backend]) as bridge:
        bridge.log({"loss": 1.0}, step=0)
        bridge.collect(0)  # assembled and handed to every tracker's queue; the gated one is still writing
        assert backend.written == []
        threading.Timer(0.3, backend.release.set).start()
        assert bridge.meter_provider.force_flush() is True
        assert backend.written == [0], "force_flush returned before the tracker wrote the delivered step"


def test_force_flush_reports_a_tracker_that_does_not_finish_in_time(tmp_path: Path) -> None:
    backend = BackendDouble("gated", hold_after=0)  # every write waits for the test
    with Bridge.from_config(config(tmp_path), backends=[backend]) as bridge:
        bridge.log({"loss": 1.0}, step=0)
        bridge.collect(0)
        assert bridge.reader.force_flush(timeout_millis=100) is False
        backend.release.set()


def test_meter_provider_shutdown_from_user_code_delivers_every_step_then_closes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bridge = Bridge.from_config(config(tmp_path))
    meter = bridge.meter("user.code")
    h = meter.create_histogram("latency")
    for step in range(3):
        with bridge.step(step):
            h.record(step + 1)
            bridge.log({"loss": float(step)}, step=step)
    with caplog.at_level(logging.WARNING):
        bridge.meter_provider.shutdown()  # what an OTel application does at exit; step 2's record was still open
        report = bridge.close()
    lines = [json.loads(line) for line in (tmp_path / "flush" / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [0, 1, 2]
    assert [line["latency/sum"] for line in lines] == [1.0, 2.0, 3.0]
    assert report.complete, report
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    with pytest.raises(BridgeClosedError):
        bridge.log({"loss": 9.0}, step=9)


def test_close_shuts_its_own_provider_down_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        bridge = Bridge.from_config(config(tmp_path))
        bridge.log({"loss": 1.0}, step=0)
        report = bridge.close()
    assert report.complete
    assert bridge.reader.is_shutdown
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text  # no second shutdown


def test_a_collect_between_boundaries_loses_no_histogram_observation(tmp_path: Path) -> None:
    with Bridge.from_config(config(tmp_path)) as bridge:
        meter = bridge.meter("user.code")
        latency = meter.create_histogram("latency")
        early = meter.create_histogram("early")
        with bridge.step(0):
            latency.record(1, {"phase": "gen"})
            early.record(3)
            bridge.reader.collect()  # anyone may call it: the SDK makes collect() public
            latency.record(4, {"phase": "gen"})
            bridge.reader.collect()
            latency.record(10, {"phase": "gen"})
        with bridge.step(1):
            latency.record(2, {"phase": "gen"})
        records = [bridge.collect(0), bridge.collect(1)]
    gen = "latency/phase.gen"
    assert (records[0][f"{gen}/count"], records[0][f"{gen}/sum"]) == (3.0, 15.0)
    assert (records[0][f"{gen}/min"], records[0][f"{gen}/max"]) == (1.0, 10.0)
    assert (records[0]["early/count"], records[0]["early/sum"]) == (1.0, 3.0), "recorded before the collect() only"
    assert (records[1][f"{gen}/count"], records[1][f"{gen}/sum"]) == (1.0, 2.0), "the next step starts afresh"
    assert "early/count" not in records[1]
