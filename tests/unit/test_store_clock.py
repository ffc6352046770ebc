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
