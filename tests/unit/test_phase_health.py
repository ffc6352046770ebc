"""A step's health keys cover its phases: ``otel_bridge/boundary_lag_s`` is the largest distance between any boundary
of the step, its phases' included, and the reading that stood for it, so every value of the record, a phase's too,
lies within the lag the record reports; the rest of the health keys are the step's window's (a phase's window reads
the same targets over part of it)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_bridge import Bridge
from otel_bridge.health import BOUNDARY_LAG, MISSING_METRICS, SAMPLE_GAP, TARGETS_UNREAD, Health
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.window_report import MissingMetric, UnreadTarget, WindowReport, WindowReporter
from otel_bridge.ratelimit import RateLimitedLogger
from otel_bridge.tools.simulation.http import MetricsHTTPServer
from otel_bridge.window import StepWindow

HOLD_S = 0.3  # how long the slow server keeps the phase start's scrape waiting: the fault, not a wait for an event


class SlowOnce:
    """A ``/metrics`` page whose first scrape arriving after :meth:`arm` is answered only once :meth:`hold` let it
    go."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._served: list[float] = []  # when each scrape arrived, once answered
        self._armed_at = float("inf")
        self._arrived = threading.Event()
        self._release = threading.Event()

    def render(self) -> bytes:
        arrived = time.time()
        with self._lock:
            held = arrived >= self._armed_at
            if held:
                self._armed_at = float("inf")
        if held:
            self._arrived.set()
            self._release.wait(10)
        with self._lock:
            self._served.append(arrived)
            self._lock.notify_all()
        return b"# TYPE busy gauge\nbusy 1\n# TYPE work_total counter\nwork_total 7\n"

    def wait_arrived_after(self, t: float, count: int) -> None:
        """Until ``count`` scrapes that arrived at or after ``t`` were answered."""
        with self._lock:
            done = self._lock.wait_for(lambda: sum(a >= t for a in self._served) >= count, timeout=10)
            assert done, f"fewer than {count} scrapes came"

    def arm(self) -> None:
        with self._lock:
            self._armed_at = time.time()

    def hold(self, seconds: float) -> float:
        """Wait for the armed scrape, keep it ``seconds``, let it go; when it was let go (``time.time()``)."""
        assert self._arrived.wait(10), "the armed scrape never came"
        threading.Event().wait(seconds)
        released = time.time()
        self._release.set()
        return released


@pytest.fixture
def slow() -> Iterator[tuple[SlowOnce, MetricsHTTPServer]]:
    page = SlowOnce()
    with MetricsHTTPServer(page.render) as server:
        yield page, server


def test_a_phase_start_read_late_is_in_the_steps_boundary_lag(
    tmp_path: Path, slow: tuple[SlowOnce, MetricsHTTPServer]
) -> None:
    page, server = slow
    config = {
        "scrape": {"targets": [server.url], "sample_interval_s": 0.02},
        "metrics": [{"name": "busy", "type": "gauge"}, {"name": "work_total", "type": "counter"}],
        "trackers": [{"type": "jsonl"}],
        "run": {"name": "phase-lag", "dir": str(tmp_path)},
    }
    with Bridge.from_config(config) as bridge:
        began = time.time()
        with bridge.step(0):
            # the step start's reading and one more: a target's scrapes never overlap, so the bridge has the first
            page.wait_arrived_after(began, 2)
            page.arm()
            with bridge.phase("gen"):
                entered = time.time()  # the phase started before
                released = page.hold(HOLD_S)
    # The phase start's reading was answered after the held scrape was let go: it is the held one, or (an in-step
    # sample sent between arm() and the phase's start was held: a saturated machine, cc35) the one sent after it.
    late = released - entered
    assert late > 0
    record = bridge.record(0)
    assert record is not None
    assert record.values["phase/gen/seconds"] > 0
    assert record.values["phase/gen/rollout/work_total/delta"] == 0
    assert record.values[BOUNDARY_LAG] >= late
    # the phase's gauges rest on no reading rendered between its start and its end's (the held one answered after)
    assert record.values[SAMPLE_GAP] >= late


def query() -> MetricQuery:
    return MetricQuery(key_name="busy", name="busy", kind="gauge", stats=("last",))


def test_a_phase_window_raises_the_lag_and_leaves_the_steps_other_health_keys() -> None:
    health = Health()
    reporter = WindowReporter(health, RateLimitedLogger(logging.getLogger(__name__)))
    step = StepWindow(3, 10.0, 20.0)
    reporter.publish(WindowReport(step, lag_s=0.05, unread=[UnreadTarget("a:1", 2.0)], sample_gap_s=0.3))
    reporter.publish(
        WindowReport(
            StepWindow(3, 11.0, 12.0, phase="gen"),
            lag_s=0.4,
            unread=[],
            missing=[MissingMetric(query(), "no sample in the phase")],
            sample_gap_s=1.0,
        )
    )
    reporter.publish(WindowReport(StepWindow(3, 12.0, 13.0, phase="update"), lag_s=0.1, unread=[], sample_gap_s=0.2))
    assert health.gauge(BOUNDARY_LAG) == 0.4
    assert health.gauge(SAMPLE_GAP) == 1.0
    assert health.gauge(TARGETS_UNREAD) == 1
    assert health.gauge(MISSING_METRICS) == 0
    reporter.publish(WindowReport(StepWindow(4, 20.0, 30.0), lag_s=0.02, unread=[], sample_gap_s=0.1))
    assert health.gauge(BOUNDARY_LAG) == 0.02  # the next step starts afresh
    assert health.gauge(SAMPLE_GAP) == 0.1
    assert health.gauge(TARGETS_UNREAD) == 0
