"""The store's clock as the PromQL wing measures it (issue 37 finding 1): a scripted store whose clock is ahead of ours
by a set amount answers ``time()``; the offset follows it, but a change within the measurements' precision does not
move the windows (consecutive windows share their boundaries on the store's clock)."""

from __future__ import annotations

import time

import pytest

from otel_bridge.config import PrometheusConfig
from otel_bridge.errors import PrometheusError
from otel_bridge.producers.promql import connect
from otel_bridge.producers.promql._internal.store_clock import StoreClock
from otel_bridge.window import StepWindow
from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer, prom_success


class SkewedStore:
    """Answers ``time()`` with its own clock: ours plus ``ahead_s``."""

    def __init__(self, ahead_s: float) -> None:
        self.ahead_s = ahead_s

    def __call__(self, request: RecordedRequest) -> Response:
        assert request.param("query") == "time()"
        now = time.time() + self.ahead_s
        return prom_success({"resultType": "scalar", "result": [now, f"{now:.3f}"]})


def test_the_offset_follows_the_store_clock_beyond_the_measurements_precision() -> None:
    store = SkewedStore(20.0)
    with ScriptedHTTPServer(store) as server:
        clock = StoreClock(connect(PrometheusConfig(url=server.url)), max_offset_s=1.0)
        clock.measure()
        assert clock.offset_s == pytest.approx(20.0, abs=0.05)
        assert clock.beyond_bound
        window = StepWindow(3, 100.0, 101.5)
        assert clock.to_store(window) == StepWindow(3, 100.0 + clock.offset_s, 101.5 + clock.offset_s)
        assert clock.to_trainer(clock.to_store(window)) == window
        first = clock.offset_s
        store.ahead_s = 20.0 + clock.precision_s / 10  # within what the measurements can tell apart: kept
        clock.measure()
        assert clock.offset_s == first
        store.ahead_s = -5.0  # the clock jumped: followed
        clock.measure()
        assert clock.offset_s == pytest.approx(-5.0, abs=0.05)


def test_a_store_answering_no_number_for_its_time_is_an_error() -> None:
    empty = prom_success({"resultType": "vector", "result": []})
    with ScriptedHTTPServer(lambda _request: empty) as server:
        clock = StoreClock(connect(PrometheusConfig(url=server.url)), max_offset_s=1.0)
        with pytest.raises(PrometheusError, match="time"):
            clock.measure()


def test_an_offset_the_measurement_cannot_tell_from_none_is_none() -> None:
    """One machine's clock, answered to the millisecond: the measured offset is within its precision, so the windows
    are asked exactly at the trainer's times (moved by a fraction of a millisecond, a sample on a boundary would
    change sides)."""
    with ScriptedHTTPServer(SkewedStore(0.0)) as server:
        clock = StoreClock(connect(PrometheusConfig(url=server.url)), max_offset_s=1.0)
        clock.measure()
        assert clock.measured
        assert clock.offset_s == 0.0
        window = StepWindow(3, 100.0, 101.5)
        assert clock.to_store(window) == window


def test_a_store_whose_clock_cannot_be_read_is_not_asked() -> None:
    """VictoriaMetrics answers time() at now less its -search.latencyOffset: its clock is not measured at all."""
    with ScriptedHTTPServer(SkewedStore(-30.0)) as server:
        clock = StoreClock(connect(PrometheusConfig(url=server.url)), max_offset_s=1.0, unreadable="latency offset")
        clock.measure()
        clock.refresh()
        assert not clock.measured
        assert clock.offset_s == 0.0
        assert server.requests == []
