"""The offset between the store's clock and this process' clock, and the windows on the store's clock.

The bridge stamps windows with the trainer's clock (``time.time()``); the store stamps its samples with its own. Nodes
drift (VMs, containers, a failed NTP), so a window asked at the trainer's times reads samples as far off as the clocks
are. The offset is measured by asking the store its time: ``time()`` evaluated by an instant query with no time gives
the store's clock to the millisecond (Prometheus' ``Date`` header gives it only to the second); taken at the midpoint
of the request's round trip, off by at most half of it, and of a few samples the one with the shortest round trip is
kept. It is measured at start-up (:mod:`.negotiation`) and again every :data:`REMEASURE_S` before a window is planned
(:mod:`.store_reader`), which turns each window into the store's times (:meth:`StoreClock.to_store`).
"""

from __future__ import annotations

import dataclasses
import math
import time

from otel_bridge.errors import PrometheusError
from otel_bridge.prometheus.client import PrometheusClient
from otel_bridge.window import StepWindow

__all__ = ["REMEASURE_S", "StoreClock"]

REMEASURE_S = 60.0  # how often the offset is measured again while the run lasts
_SAMPLES = 3  # requests per measurement; the one with the shortest round trip is kept
_RESOLUTION_S = 0.001  # Prometheus renders time() to the millisecond


class StoreClock:
    """The store's clock as seen from this process (see the module docstring).

    ``offset_s``: the store's clock minus this process' clock (positive: the store is ahead). ``precision_s``: how far
    off the offset may be (half the kept round trip, and half a millisecond of the answer's rounding).
    ``max_offset_s``: ``prometheus.max_clock_offset_s``, beyond which the reader warns.
    """

    def __init__(self, client: PrometheusClient, *, max_offset_s: float, unreadable: str | None = None) -> None:
        """``unreadable``: why the store's clock cannot be read (``Store.clock``): nothing is measured, the offset
        stays 0 and unmeasured."""
        self._client = client
        self._unreadable = unreadable
        self.max_offset_s = max_offset_s
        self.offset_s = 0.0
        self.precision_s = math.inf
        self._measured_at = -math.inf  # time.monotonic() of the last measurement

    def measure(self) -> None:
        """Measure the offset now (kept when it differs from the last by no more than the two measurements' precision);
        raises :class:`PrometheusError` when the store cannot be asked or answers no
        number."""
        if self._unreadable is not None:
            return
        best: tuple[float, float] | None = None  # (round trip, offset)
        for _ in range(_SAMPLES):
            sent = time.time()
            result = self._client.query("time()")
            received = time.time()
            if not result.series or not result.series[0].samples:
                raise PrometheusError("prometheus.url answered time() with no value: its clock cannot be read")
            store_time = result.series[0].samples[0][1]
            if not math.isfinite(store_time):
                raise PrometheusError(f"prometheus.url answered time() with {store_time}: its clock cannot be read")
            trip = max(received - sent, 0.0)
            if best is None or trip < best[0]:
                best = (trip, store_time - (sent + received) / 2)
        assert best is not None
        precision, offset = best[0] / 2 + _RESOLUTION_S / 2, best[1]
        if abs(offset) <= precision:  # not told apart from none (one machine's clock): windows are not moved by noise
            offset = 0.0
        self._measured_at = time.monotonic()
        if math.isinf(self.precision_s) or abs(offset - self.offset_s) > precision + self.precision_s:
            # Only a change the measurements can tell apart moves the windows: a jitter of a millisecond would open
            # a gap (or an overlap) between consecutive windows, which share their boundaries on the store's clock.
            self.precision_s, self.offset_s = precision, offset

    def refresh(self) -> None:
        """Measure again when the last measurement is :data:`REMEASURE_S` old (raises as :meth:`measure`; the last
        offset stays until a measurement succeeds)."""
        if time.monotonic() - self._measured_at >= REMEASURE_S:
            self.measure()

    @property
    def measured(self) -> bool:
        """Whether a measurement has succeeded (until then the offset is taken as 0, unknown)."""
        return math.isfinite(self.precision_s)

    @property
    def beyond_bound(self) -> bool:
        """Whether the offset is larger than ``prometheus.max_clock_offset_s``."""
        return abs(self.offset_s) > self.max_offset_s

    def now(self) -> float:
        """The store's time now."""
        return time.time() + self.offset_s

    def to_store(self, window: StepWindow) -> StepWindow:
        """``window`` (the trainer's times) in the store's times."""
        return self._shifted(window, self.offset_s)

    def to_trainer(self, window: StepWindow) -> StepWindow:
        """A window of the store's times (:meth:`to_store`) back in the trainer's times."""
        return self._shifted(window, -self.offset_s)

    @staticmethod
    def _shifted(window: StepWindow, by: float) -> StepWindow:
        start = None if window.start is None else window.start + by
        return dataclasses.replace(window, start=start, end=window.end + by)
