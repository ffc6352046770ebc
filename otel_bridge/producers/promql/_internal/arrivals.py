"""Windows of series that no known target serves (remote write, ``/api/v1/import/prometheus``): closed by the arrival
of their samples after the window's end.

With no target known, the bridge cannot tell when the store has all of a window's samples from a scrape schedule. It
waits instead until every series still reporting near the window's end has a sample after it: a series' samples come
in order, so nothing stamped inside the window is still on its way. The run's last window waits for one more arrival:
a store stamps a sample without a timestamp when it arrives (an import), after its sender read it, so the first sample
after the end may hold the counters of before it; the next one was read after that one had arrived. The last window
is closed by the samples after each series' first arrival past the end (:attr:`Arrivals.closing_from`).

Every wait begins once what was stamped up to the end is queryable (the store's storing delay) and ends at most two
``prometheus.scrape_interval_s`` after the end, three for the run's last window, plus that delay. The last window reads
the arrivals up to that bound however its wait ended: a window read after it (``close()`` called long after the last
step) waits for nothing, and is closed as it would have been in time.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from otel_bridge.producers.promql._internal.setup import Setup
from otel_bridge.prometheus import promql
from otel_bridge.prometheus.client import PrometheusClient
from otel_bridge.window import StepWindow

__all__ = ["ArrivalWait", "Arrivals"]

_POLL_S = 0.25  # how often the arrival of samples after a window's end is asked
_FIRST_LABEL = "otel_bridge_n"  # tells the series names apart in the first-arrival query


@dataclass(frozen=True)
class Arrivals:
    """When the wait for ``window``'s arrivals ended (``closed_at``, the store's clock) and after when a sample may
    close it (``closing_from``: the window's end, or for the run's last window the latest of the series' first
    arrivals after it)."""

    closed_at: float
    closing_from: float


class ArrivalWait:
    """Waits for the arrivals that close a window of the series ``names`` (``utf8``: those needing the quoted
    selector form); ``closed`` ends every wait."""

    def __init__(
        self,
        client: PrometheusClient,
        setup: Setup,
        names: Sequence[str],
        *,
        utf8: frozenset[str],
        closed: threading.Event,
    ) -> None:
        self._client = client
        self._setup = setup
        self._selectors = [promql.selector(n, utf8=n in utf8) for n in sorted(set(names))]
        self._closed = closed

    def wait(self, window: StepWindow) -> Arrivals | None:
        """Wait for ``window``'s arrivals (see the module docstring); ``None`` when the targets' schedule says when
        its samples are stored instead, or nothing is read by arrival."""
        setup = self._setup
        if setup.schedule.targets_known or not self._selectors or window.start is None:
            return None
        interval_s = setup.schedule.interval_s
        storing_s = setup.store.storing_delay_s
        deadline = window.end + (3.0 if window.final else 2.0) * interval_s + storing_s
        stored = window.end + storing_s
        while not self._closed.is_set() and setup.clock.now() < stored:
            self._closed.wait(stored - setup.clock.now())
        self._until_every_series_has_one_after(window, window.end, deadline)
        if not window.final or self._closed.is_set():
            return Arrivals(setup.clock.now(), window.end)
        # Whether or not every series had arrived by the deadline (a series that stopped has no sample coming; a wait
        # begun after the deadline asks nothing), the others' first arrivals may hold what was read before the end.
        closing_from = self._latest_first_arrival(window, until=deadline) or window.end
        self._until_every_series_has_one_after(window, closing_from, deadline)
        return Arrivals(min(setup.clock.now(), deadline), closing_from)

    def _until_every_series_has_one_after(self, window: StepWindow, t: float, deadline: float) -> bool:
        """Wait until every series still reporting near ``window``'s end has a sample after ``t``; ``False`` when the
        deadline (or the producer's close) came first."""
        assert window.start is not None
        # Only series still reporting near the end: one that stopped earlier in the window (a departed source) has no
        # sample coming and must not hold every later window until the deadline.
        span = promql.duration(max(min(window.end - window.start, 1.5 * self._setup.schedule.interval_s), 0.001))
        clock = self._setup.clock
        while not self._closed.is_set():
            now = clock.now()
            if now >= deadline:
                return False
            after = now - t
            if after >= 0.001:
                missing = " + ".join(
                    f"(count(count_over_time({sel}[{span}] @ {window.end:.3f}) unless "
                    f"count_over_time({sel}[{promql.duration(after)}])) or vector(0))"
                    for sel in self._selectors
                )
                result = self._client.query(missing, time=now)
                if not result.series or result.series[0].samples[-1][1] == 0:
                    return True
            self._closed.wait(min(_POLL_S, max(deadline - now, 0.0)) or _POLL_S)
        return False

    def _latest_first_arrival(self, window: StepWindow, *, until: float) -> float | None:
        """The latest, over the series, of their first sample after ``window``'s end and up to ``until`` (or now, when
        earlier); ``None``: none is there."""
        now = min(self._setup.clock.now(), until)
        after = promql.duration(max(now - window.end, 0.001))
        resolution = promql.duration(max(self._setup.pad_s / 20, 0.001))
        firsts = " or ".join(
            f"label_replace(max(min_over_time((timestamp({sel}) > {window.end:.3f})[{after}:{resolution}])), "
            f'"{_FIRST_LABEL}", "{position}", "", "")'
            for position, sel in enumerate(self._selectors)
        )
        result = self._client.query(firsts, time=now)
        stamps = [series.samples[-1][1] for series in result.series if series.samples]
        return max(stamps, default=None)
