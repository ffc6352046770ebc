"""``close()`` returns by its deadline whatever a backend does, and its report names what was abandoned (issue 14
point 7): a backend whose ``close()`` hangs, a backend raising ``SystemExit`` (or another ``BaseException``) from
``write``."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from otel_bridge import Bridge
from tests.faults.support import base_config, run_steps
from tests.helpers.backends import BackendDouble
from tests.helpers.http_servers import Response, ScriptedHTTPServer


def test_a_hanging_backend_close_does_not_hold_close_past_its_deadline(tmp_path: Path) -> None:
    hanging, healthy = BackendDouble("hanging_close", hold_close=True), BackendDouble()
    bridge = Bridge.from_config(base_config(tmp_path, "hang"), backends=[hanging, healthy])
    try:
        run_steps(bridge, 3)
        started = time.monotonic()
        report = bridge.close(timeout_s=1.5)
        elapsed = time.monotonic() - started
    finally:
        hanging.release.set()
    assert elapsed < 2.5, elapsed
    assert sorted(healthy.by_step()) == [0, 1, 2]
    status = {s.backend: s for s in report.backends}
    assert status["collecting"].complete
    assert status["hanging_close"].delivered == 3
    assert any("close() still running" in p for p in status["hanging_close"].problems)
    assert not report.complete


@pytest.mark.parametrize("error", [SystemExit(1), KeyboardInterrupt(), GeneratorExit()], ids=type)
def test_a_backend_raising_base_exception_is_reported_and_close_is_prompt(tmp_path: Path, error: BaseException) -> None:
    healthy = BackendDouble()
    config = base_config(tmp_path, "exit", delivery={"backend_retries": 1, "backend_backoff_s": 0.05})
    bridge = Bridge.from_config(config, backends=[BackendDouble("exiting", error=error), healthy])
    run_steps(bridge, 3)
    started = time.monotonic()
    report = bridge.close(timeout_s=10)
    elapsed = time.monotonic() - started
    assert elapsed < 3, elapsed
    status = {s.backend: s for s in report.backends}
    assert status["exiting"].failed_steps == (0, 1, 2)
    assert status["exiting"].pending_steps == ()
    assert sorted(healthy.by_step()) == [0, 1, 2]
    assert bridge.health.counter("otel_bridge/backend_errors", labels={"backend": "exiting"}) == 6


def test_a_hanging_otlp_collector_does_not_hold_close_past_its_deadline(tmp_path: Path) -> None:
    """The trainer's instruments pushed over OTLP to a collector that accepts and never answers: the SDK's final
    export at shutdown waits ``otel.otlp.timeout_s`` (here 20 s); ``close()`` returns by its own deadline with every
    record delivered, and the report names the teardown it left behind."""
    with ScriptedHTTPServer(lambda _request: Response(hang=True)) as collector:
        otel = {"otlp": {"enabled": True, "endpoint": f"{collector.url}/v1/metrics", "interval_s": 60, "timeout_s": 20}}
        healthy = BackendDouble()
        bridge = Bridge.from_config(base_config(tmp_path, "otlp", otel=otel), backends=[healthy])
        bridge.meter("trainer").create_counter("trainer.tokens").add(5)
        run_steps(bridge, 3)
        started = time.monotonic()
        report = bridge.close(timeout_s=1.5)
        elapsed = time.monotonic() - started
    assert elapsed < 2.5, elapsed
    assert sorted(healthy.by_step()) == [0, 1, 2]
    assert report.abandoned == (
        "the MeterProvider's shutdown (otel.otlp's final export)",
        "the traces' final export (otel.otlp)",
    )
    assert not report.complete
