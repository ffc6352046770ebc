"""Delivery to one backend on its own thread: in step order, retried with backoff, isolated from the others.

Each backend gets a :class:`BackendWorker` with a FIFO of records. A failed write is retried with exponential backoff
(``retries`` times) before the record is given up on; every failed attempt is counted in
``otel_bridge/backend_errors/backend.<name>``. A slow or hanging backend only delays its own queue. When a queue is full
(the backend has been down for a long time) its oldest record is dropped and counted in
``otel_bridge/backend_dropped/backend.<name>``.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from otel_bridge.exporters.backends.base import Backend
from otel_bridge.exporters.record import StepRecord
from otel_bridge.health import BACKEND_DROPPED, BACKEND_ERRORS, Health
from otel_bridge.ratelimit import RateLimitedLogger
from otel_bridge.suppression import suppressing

_log = logging.getLogger(__name__)
_MAX_BACKOFF_S = 30.0
_FINISH_GRACE_S = 0.2  # after the deadline, for a finisher that was about to report


@dataclass(frozen=True, slots=True)
class DeliveryStatus:
    """What one backend received: records written, records given up on or dropped, records still queued."""

    backend: str
    delivered: int
    failed_steps: tuple[int, ...]
    pending_steps: tuple[int, ...]
    problems: tuple[str, ...] = ()
    """What was abandoned or failed when the backend was shut down: a delivery thread still writing at the deadline,
    a ``close()`` still running at the deadline or raising, an error the backend reported after the fact."""

    @property
    def complete(self) -> bool:
        """Every record handed to this backend was written and the backend closed cleanly."""
        return not self.failed_steps and not self.pending_steps and not self.problems


@dataclass(frozen=True, slots=True)
class DeliveryReport:
    """What :meth:`Bridge.close` could deliver: per backend, the steps never assembled, and the teardown parts left
    running at the deadline (e.g. the MeterProvider's shutdown whose final OTLP export a collector never answered)."""

    backends: tuple[DeliveryStatus, ...]
    unassembled_steps: tuple[int, ...]
    abandoned: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        """Every step reached every backend, and the teardown finished in time."""
        return not self.unassembled_steps and not self.abandoned and all(b.complete for b in self.backends)


class BackendWorker:
    """Writes records to one backend from a dedicated thread (see the module docstring)."""

    def __init__(
        self,
        backend: Backend,
        *,
        health: Health,
        retries: int = 3,
        backoff_s: float = 0.5,
        queue_size: int = 10_000,
        warn: RateLimitedLogger | None = None,
    ) -> None:
        self.backend = backend
        self.name = backend.name
        self._health = health
        self._retries = retries
        self._backoff_s = backoff_s
        self._queue_size = queue_size
        self._warn = warn or RateLimitedLogger(_log)
        self._queue: deque[StepRecord] = deque()
        self._cond = threading.Condition()
        self._inflight: int | None = None
        self._stopping = False
        self._abandon = threading.Event()
        self._delivered = 0
        self._failed: list[int] = []
        self._close_error = ""
        self._verify_problems: tuple[str, ...] = ()
        self._abandoned: tuple[int, ...] = ()
        self._thread = threading.Thread(
            target=suppressing(self._run), name=f"otel-bridge-backend-{self.name}", daemon=True
        )
        self._thread.start()

    def submit(self, record: StepRecord) -> None:
        """Queue ``record`` (never blocks; drops the oldest queued record when the queue is full)."""
        with self._cond:
            if len(self._queue) >= self._queue_size:
                dropped = self._queue.popleft()
                self._failed.append(dropped.step)
                self._health.count(BACKEND_DROPPED, labels={"backend": self.name})
                self._warn.error(
                    f"dropped:{self.name}",
                    "tracker backend %r is %d records behind; dropping step %d (raise delivery.backend_queue_size "
                    "or fix the backend)",
                    self.name,
                    self._queue_size,
                    dropped.step,
                )
            self._queue.append(record)
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    return
                record = self._queue.popleft()
                self._inflight = record.step
            ok = self._write_with_retries(record)
            with self._cond:
                self._inflight = None
                if ok:
                    self._delivered += 1
                else:
                    self._failed.append(record.step)
                self._cond.notify_all()

    def _write_with_retries(self, record: StepRecord) -> bool:
        for attempt in range(self._retries + 1):
            if self._abandon.is_set():
                return False
            try:
                self.backend.write(record)
            except BaseException as exc:  # noqa: BLE001 - even SystemExit from a backend must not end this thread
                self._health.count(BACKEND_ERRORS, labels={"backend": self.name})
                last = attempt == self._retries
                self._warn.error(
                    f"write:{self.name}",
                    "tracker backend %r failed to write step %d (attempt %d of %d): %s: %s%s",
                    self.name,
                    record.step,
                    attempt + 1,
                    self._retries + 1,
                    type(exc).__name__,
                    exc,
                    "; giving up on this step" if last else "; retrying",
                )
                if not last and self._abandon.wait(min(_MAX_BACKOFF_S, self._backoff_s * 2**attempt)):
                    return False
            else:
                # No forget() on success: a backend failing intermittently would otherwise log every failure.
                return True
        return False

    def drain(self, deadline: float) -> bool:
        """Wait until every queued record was handled or ``deadline`` (monotonic) passed; ``True`` when drained."""
        with self._cond:
            while self._queue or self._inflight is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def abandon(self) -> None:
        """Stop taking records: what is still queued (and the record being written) is abandoned."""
        with self._cond:
            if not self._stopping:
                self._stopping = True
                self._abandoned = tuple(r.step for r in self._queue)
                if self._inflight is not None:
                    self._abandoned = (self._inflight, *self._abandoned)
                self._queue.clear()
            self._cond.notify_all()
        self._abandon.set()

    def stop(self, deadline: float) -> DeliveryStatus:
        """Drain until ``deadline``, then stop the thread (abandoning what is left) and report."""
        self.drain(deadline)
        self.abandon()
        self._thread.join(max(0.0, deadline - time.monotonic()))
        problems: tuple[str, ...] = ()
        with self._cond:
            if self._thread.is_alive():
                problems = (f"delivery thread still writing step {self._inflight} at close's deadline; not closed",)
            return DeliveryStatus(self.name, self._delivered, tuple(self._failed), self._abandoned, problems)

    def start_close(self) -> threading.Thread | None:
        """Close the backend on a thread of its own (``None`` when the delivery thread is still busy with it)."""
        if self._thread.is_alive():
            return None
        closer = threading.Thread(target=suppressing(self._close), name=f"otel-bridge-close-{self.name}", daemon=True)
        closer.start()
        return closer

    def _close(self) -> None:
        try:
            self.backend.close()
            verify = getattr(self.backend, "verify", None)
            if callable(verify):  # a backend that can check after the fact what its storage really holds
                self._verify_problems = tuple(str(p) for p in verify())
        except BaseException as exc:  # noqa: BLE001 - one backend failing to close must not stop the others
            self._close_error = f"close() failed: {type(exc).__name__}: {exc}"

    def closed(self, closer: threading.Thread | None, deadline: float) -> tuple[str, ...]:
        """Wait for ``closer`` (from :meth:`start_close`) until ``deadline``; what went wrong, if anything."""
        if closer is None:
            return ()
        closer.join(max(0.0, deadline - time.monotonic()))
        if closer.is_alive():
            return ("close() still running at close's deadline; abandoned",)
        return ((self._close_error,) if self._close_error else ()) + self._verify_problems

    def finish(self, deadline: float) -> DeliveryStatus:
        """Drain, stop and close the backend by ``deadline``; what was delivered and what was abandoned."""
        status = self.stop(deadline)
        return dataclasses.replace(status, problems=status.problems + self.closed(self.start_close(), deadline))

    @property
    def stopped(self) -> bool:
        """The worker thread has ended (so the backend may be closed from another thread)."""
        return not self._thread.is_alive()

    def status(self) -> DeliveryStatus:
        """Counts so far."""
        with self._cond:
            pending = self._abandoned if self._stopping else tuple(r.step for r in self._queue)
            return DeliveryStatus(self.name, self._delivered, tuple(self._failed), pending)


def finish_all(workers: Sequence[BackendWorker], deadline: float) -> list[DeliveryStatus]:
    """:meth:`BackendWorker.finish` every worker in parallel, so a hanging backend delays no other; returns by
    ``deadline`` plus a short grace (a finisher still running then is reported as abandoned)."""
    results: dict[int, DeliveryStatus] = {}

    def finish(index: int, worker: BackendWorker) -> None:
        results[index] = worker.finish(deadline)

    finishers = [
        threading.Thread(target=suppressing(finish), args=(i, w), name=f"otel-bridge-finish-{w.name}", daemon=True)
        for i, w in enumerate(workers)
    ]
    for finisher in finishers:
        finisher.start()
    for finisher in finishers:
        finisher.join(max(0.0, deadline + _FINISH_GRACE_S - time.monotonic()))
    report = []
    for index, worker in enumerate(workers):
        if index in results:
            report.append(results[index])
        else:
            worker.abandon()
            status = worker.status()
            report.append(dataclasses.replace(status, problems=("still busy at close's deadline; abandoned",)))
    return report
