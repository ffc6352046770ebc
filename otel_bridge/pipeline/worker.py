"""The delivery worker: the steps' queue from the training thread, the thread that delivers each step, and the
close-time teardown under a deadline.

**The queue.** :class:`StepQueue` is bounded. When the worker falls behind (typically: slow Prometheus queries) and
``queue_size`` steps are waiting, ``put`` blocks for at most ``max_block_s``; if the queue is still full it drops the
*infrastructure readings* of every waiting step (their records are then assembled without querying producers, and say so
in their notes), stops the wait for the step being assembled (``on_full``: its record goes out with the infrastructure
missing), and waits up to another ``max_block_s`` for the worker to make room, which takes it milliseconds. The
trainer's own metrics are never dropped; each drop is counted in ``otel_bridge/dropped_infra_steps``. Only a worker that
is stuck outside the producers (which have their own deadline) makes the queue exceed ``queue_size``, and that is logged
as an error.

**The worker.** :class:`DeliveryWorker` takes each queued step, has the reader assemble and export it (the producers'
readings, one record to every tracker), and traces it. The records it delivered are kept in the
:class:`~otel_bridge.pipeline.record_store.RecordStore` for ``Bridge.collect()`` and ``Bridge.record()``.

**Teardown.** :func:`run_within` runs the parts of ``Bridge.close()`` (the infrastructure sources, the MeterProvider's
shutdown with its OTLP push, the trainer's ``/metrics`` endpoint) each on a thread of its own, in order; a part still
running at the deadline is left behind on its daemon thread and named, so ``close()`` returns by ``close_timeout_s``
whatever a collector or a source does.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from otel_bridge.health import DROPPED_INFRA, Health
from otel_bridge.pipeline.reader import StepMetricReader
from otel_bridge.pipeline.record_store import RecordStore
from otel_bridge.pipeline.step_job import StepJob
from otel_bridge.pipeline.tracing import StepTracer
from otel_bridge.ratelimit import RateLimitedLogger

_log = logging.getLogger(__name__)


class StepQueue:
    """FIFO of :class:`StepJob` with the drop policy described in the module docstring."""

    def __init__(
        self,
        queue_size: int,
        max_block_s: float,
        *,
        health: Health,
        warn: RateLimitedLogger,
        on_full: Callable[[], None] | None = None,
    ) -> None:
        self._on_full = on_full
        self._size = queue_size
        self._max_block_s = max_block_s
        self._health = health
        self._warn = warn
        self._jobs: deque[StepJob] = deque()
        self._cond = threading.Condition()
        self._closed = False

    def put(self, job: StepJob) -> None:
        """Enqueue ``job``, blocking at most ``max_block_s`` while full, then dropping old infrastructure readings.

        The job is enqueued whatever interrupts the wait: an exception raised in it (``SystemExit`` from a SIGTERM
        handler, ``KeyboardInterrupt``) propagates only after the job is in the queue and marked ``queued``, so the
        finished step it carries is still delivered by ``close()``.
        """
        with self._cond:
            try:
                deadline = time.monotonic() + self._max_block_s
                dropped = False
                while len(self._jobs) >= self._size and not self._closed:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 and dropped:
                        if self._max_block_s == 0:  # never block: the worker skips through the readings in ms
                            break
                        self._warn.error(
                            "queue-over-bound",
                            "the delivery worker made no room in %.1fs after the infrastructure readings were dropped "
                            "(stuck?): step %d is queued beyond delivery.queue_size",
                            2 * self._max_block_s,
                            job.window.step,
                        )
                        break
                    if remaining <= 0:
                        self._drop_waiting_infra(job.window.step)
                        if self._on_full is not None:
                            self._on_full()
                        dropped, deadline = True, time.monotonic() + self._max_block_s
                        continue
                    self._cond.wait(remaining)
            finally:
                if not job.queued:
                    job.queued = True
                    self._jobs.append(job)
                    self._cond.notify_all()

    def _drop_waiting_infra(self, new_step: int) -> None:
        victims = [j for j in self._jobs if j.infra]
        for victim in victims:
            victim.infra = False
            self._health.count(DROPPED_INFRA)
        self._warn.warning(
            "dropped-infra",
            "delivery is %d steps behind at step %d: dropped the infrastructure readings of steps %s and of the "
            "step being assembled (their trainer metrics are kept); check Prometheus/endpoint latency or raise "
            "delivery.queue_size",
            len(self._jobs),
            new_step,
            ranges([v.window.step for v in victims]) or "none",
        )

    def get(self) -> StepJob | None:
        """The next job, waiting for one; ``None`` once closed and empty."""
        with self._cond:
            while not self._jobs and not self._closed:
                self._cond.wait()
            if not self._jobs:
                return None
            job = self._jobs.popleft()
            self._cond.notify_all()
            return job

    def close(self) -> None:
        """No more jobs will come; ``get`` returns ``None`` after the last one."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def drop_infra(self) -> None:
        """Assemble every waiting step without infrastructure readings (``close()`` running out of time)."""
        with self._cond:
            for job in self._jobs:
                job.infra = False

    def drain_pending(self) -> list[int]:
        """Remove and return the steps still waiting (used when close() gives up)."""
        with self._cond:
            steps = [j.window.step for j in self._jobs]
            self._jobs.clear()
            self._cond.notify_all()
            return steps


class DeliveryWorker:
    """The delivery thread (``otel-bridge-delivery``): takes each job off ``jobs``, has ``reader`` assemble and export
    it, keeps the record it gets back in ``records`` and traces the step with ``tracer`` (one path: the record goes
    from the exporter to both). A step that fails is logged; the thread goes on with the next one."""

    def __init__(
        self, jobs: StepQueue, reader: StepMetricReader, records: RecordStore, tracer: StepTracer | None
    ) -> None:
        self._jobs = jobs
        self._reader = reader
        self._records = records
        self._tracer = tracer
        self._thread = threading.Thread(target=self._run, name="otel-bridge-delivery", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                record = self._reader.export_step(job)
                if record is not None:
                    self._records.add(record)
                if self._tracer is not None:
                    self._tracer.trace(job.window, job.phases, record)
            except Exception:  # noqa: BLE001 - the worker must survive anything one step throws at it
                _log.exception("otel-bridge: step %d could not be delivered", job.window.step)

    def join(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the thread to end (it ends once the queue is closed and empty)."""
        self._thread.join(timeout_s)

    def is_alive(self) -> bool:
        """Whether the thread is still delivering."""
        return self._thread.is_alive()


TEARDOWN_GRACE_S = 0.1
"""Each part of the teardown gets at least this long, even when the deadline has passed."""


def run_within(parts: Sequence[tuple[str, Callable[[], None]]], deadline: float) -> tuple[str, ...]:
    """Run ``parts`` (``(what, function)``) one after the other until ``deadline`` (``time.monotonic()``); returns the
    names of the parts left running. A part that raises is logged with its traceback and the next one runs."""
    abandoned: list[str] = []
    for what, part in parts:

        def run(what: str = what, part: Callable[[], None] = part) -> None:
            try:
                part()
            except Exception:  # noqa: BLE001 - one part's failure must not stop the rest of the teardown
                _log.exception("otel-bridge: close(): %s failed", what)

        thread = threading.Thread(target=run, name="otel-bridge-close", daemon=True)
        thread.start()
        thread.join(max(TEARDOWN_GRACE_S, deadline - time.monotonic()))
        if thread.is_alive():
            abandoned.append(what)
            _log.error("otel-bridge: close() left %s running past its deadline (delivery.close_timeout_s)", what)
    return tuple(abandoned)


def ranges(steps: list[int]) -> str:
    """``[1, 2, 3, 7]`` -> ``"1-3, 7"``."""
    out: list[str] = []
    for step in sorted(steps):
        if out and re.fullmatch(rf"(\d+-)?{step - 1}", out[-1]):
            out[-1] = f"{out[-1].split('-')[0]}-{step}"
        else:
            out.append(str(step))
    return ", ".join(out)
