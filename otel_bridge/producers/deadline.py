"""A step's infrastructure readings under a deadline: the record never waits on a source longer than that.

The producers' work for one step (the step's window and its phases') runs on a thread of its own while the delivery
worker waits up to ``timeout_s``, or until :meth:`InfraDeadline.abandon` is called (the step queue is full). When the
time is up the step goes out with the trainer's values and its infrastructure marked missing; the work goes on in
the background and the next step's readings are skipped (also marked missing) until it has finished, so a hanging
source holds at most one thread and never the worker.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from otel_bridge.suppression import suppressing

T = TypeVar("T")


class InfraDeadline(Generic[T]):
    """Runs one step's production at a time with a deadline (see the module docstring)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._wake: threading.Event | None = None

    @property
    def busy(self) -> bool:
        """An earlier step's production is still running (it overran its deadline)."""
        return self._thread is not None and self._thread.is_alive()

    def run(self, work: Callable[[], T]) -> T | None:
        """``work()``'s result, or ``None`` when it did not finish in time, was abandoned, or could not start because
        an earlier production is still running."""
        if self.busy:
            return None
        result: list[T] = []
        wake = threading.Event()

        def target() -> None:
            try:
                result.append(work())
            finally:
                wake.set()

        thread = threading.Thread(target=suppressing(target), name="otel-bridge-infra", daemon=True)
        with self._lock:
            self._thread, self._wake = thread, wake
        thread.start()
        wake.wait(self.timeout_s)
        with self._lock:
            self._wake = None
        return result[0] if result else None

    def abandon(self) -> None:
        """Stop waiting for the current step's production now (its record goes out with the infrastructure missing)."""
        with self._lock:
            if self._wake is not None:
                self._wake.set()
