"""A step's infrastructure readings under a deadline: the record never waits on a source longer than that.

The producers' work for one step (the step's window and its phases') runs on a thread of its own while the delivery
worker waits up to ``timeout_s``, or until :meth:`InfraDeadline.abandon` is called (the step queue is full). When the
time is up the step goes out with the trainer's values and its infrastructure marked missing; the work goes on in
the background and the next step's readings are skipped (also marked missing) until it has finished, so a hanging
source holds at most one thread and never the worker.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from otel_bridge.errors import SourceError
from otel_bridge.suppression import instrumentation_suppressed, suppressing

T = TypeVar("T")
_log = logging.getLogger(__name__)


class InfraDeadline:
    """Runs one step's production (or the producers' start-up) at a time with a deadline (see the module docstring).

    An exception ``work`` raises in time is raised to the caller; one raised after the deadline is logged.
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._done: threading.Event | None = None  # set when the last production's work has returned or raised
        self._wake: threading.Event | None = None

    @property
    def busy(self) -> bool:
        """An earlier step's production is still running (it overran its deadline). Its work's end, not its thread's:
        a thread may still be exiting after its work returned (seen under libfaketime), and that step is over."""
        return self._done is not None and not self._done.is_set()

    def run(self, work: Callable[[], T], timeout_s: float | None = None) -> T | None:
        """``work()``'s result, or ``None`` when it did not finish in time (``timeout_s``, default the instance's),
        was abandoned, or could not start because an earlier production is still running."""
        if self.busy:
            return None
        result: list[T] = []
        error: list[BaseException] = []
        waiting = [True]
        wake = threading.Event()
        done = threading.Event()

        def target() -> None:
            try:
                result.append(work())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller, or logged when it stopped waiting
                with self._lock:
                    error.append(exc)
                    if not waiting[0]:
                        _log.warning("otel-bridge: %s failed after its deadline: %s: %s", name, type(exc).__name__, exc)
            finally:
                done.set()
                wake.set()

        name = getattr(work, "__name__", "infrastructure work")
        thread = threading.Thread(target=suppressing(target), name="otel-bridge-infra", daemon=True)
        with self._lock:
            self._done, self._wake = done, wake
        thread.start()
        wake.wait(self.timeout_s if timeout_s is None else timeout_s)
        with self._lock:
            self._wake = None
            waiting[0] = False
            if error:
                raise error[0]
            return result[0] if result else None

    def abandon(self) -> None:
        """Stop waiting for the current step's production now (its record goes out with the infrastructure missing)."""
        with self._lock:
            if self._wake is not None:
                self._wake.set()


def start_sources(
    infra: InfraDeadline, starts: Sequence[Callable[[], None]], *, degrade: bool, timeout_s: float
) -> None:
    """Run the producers' start-up checks (``starts``) with instrumentation suppressed; the one place where
    ``startup`` decides what a source that cannot be reached means.

    ``startup: strict`` (``degrade`` false): inline, and a producer's :class:`~otel_bridge.errors.SourceError` (it
    could not reach Prometheus or its targets) is raised to the caller. ``startup: degrade``: on ``infra``'s thread
    for at most ``timeout_s``, after which the bridge starts and the steps skip the readings until the checks have
    finished; a producer's :class:`~otel_bridge.errors.SourceError` is logged and the others start (each producer
    retries at every step until it answers). A :class:`~otel_bridge.errors.ConfigError` raises in both.
    """

    def start(each: Callable[[], None]) -> None:
        try:
            each()
        except SourceError as exc:
            if not degrade:
                raise
            _log.warning(
                "otel-bridge: an infrastructure source is not usable at start-up (%s); running without its metrics "
                "until it answers, retrying at every step (startup: degrade)",
                exc,
            )

    def start_all() -> bool:
        for each in starts:
            start(each)
        return True

    if not degrade or not starts:
        with instrumentation_suppressed():
            start_all()
    elif infra.run(start_all, timeout_s) is None:
        _log.warning(
            "otel-bridge: the infrastructure sources' start-up checks did not finish within %.3gs (their timeout_s); "
            "starting without their metrics until they do (startup: degrade)",
            timeout_s,
        )
