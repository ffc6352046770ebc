"""The bounded queue between the training thread and the delivery worker, with its policy when full.

When the worker falls behind (typically: slow Prometheus queries) and ``queue_size`` steps are waiting, ``put`` blocks
for at most ``max_block_s``; if the queue is still full it drops the *infrastructure readings* of the oldest waiting
step (that step's record is then assembled without querying producers, and says so in its notes) and enqueues the new
step anyway. The trainer's own metrics are never dropped; each drop is counted in ``otel_bridge/dropped_infra_steps``.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from opentelemetry.sdk.metrics.export import ResourceMetrics

from otel_bridge.health import DROPPED_INFRA, Health
from otel_bridge.phases import Phase
from otel_bridge.ratelimit import RateLimitedLogger
from otel_bridge.window import StepWindow

_log = logging.getLogger(__name__)


@dataclass(slots=True)
class StepJob:
    """One step waiting for delivery: its window, the instrument snapshot, the trainer's values, its phases."""

    window: StepWindow
    instruments: Sequence[ResourceMetrics]
    values: dict[str, float] = field(default_factory=dict)
    infra: bool = True
    phases: tuple[Phase, ...] = ()
    queued: bool = False


class StepQueue:
    """FIFO of :class:`StepJob` with the drop policy described in the module docstring."""

    def __init__(self, queue_size: int, max_block_s: float, *, health: Health, warn: RateLimitedLogger) -> None:
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
                while len(self._jobs) >= self._size and not self._closed:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        self._drop_oldest_infra(job.window.step)
                        break
                    self._cond.wait(remaining)
            finally:
                if not job.queued:
                    job.queued = True
                    self._jobs.append(job)
                    self._cond.notify_all()

    def _drop_oldest_infra(self, new_step: int) -> None:
        victim = next((j for j in self._jobs if j.infra), None)
        if victim is None:
            return
        victim.infra = False
        self._health.count(DROPPED_INFRA)
        self._warn.warning(
            "dropped-infra",
            "delivery is %d steps behind at step %d: dropped the infrastructure readings of step %d "
            "(its trainer metrics are kept); check Prometheus/endpoint latency or raise delivery.queue_size",
            len(self._jobs),
            new_step,
            victim.window.step,
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

    def drain_pending(self) -> list[int]:
        """Remove and return the steps still waiting (used when close() gives up)."""
        with self._cond:
            steps = [j.window.step for j in self._jobs]
            self._jobs.clear()
            self._cond.notify_all()
            return steps


def ranges(steps: list[int]) -> str:
    """``[1, 2, 3, 7]`` -> ``"1-3, 7"``."""
    out: list[str] = []
    for step in sorted(steps):
        if out and re.fullmatch(rf"(\d+-)?{step - 1}", out[-1]):
            out[-1] = f"{out[-1].split('-')[0]}-{step}"
        else:
            out.append(str(step))
    return ", ".join(out)
