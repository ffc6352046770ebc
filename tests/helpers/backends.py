"""The tracker backend double of the suite: a real :class:`~otel_bridge.exporters.backends.Backend` (``name``,
``write``, ``flush``, ``close``) that keeps what it is given, and fails, hangs or does more the way a test tells it."""

from __future__ import annotations

import threading
from collections.abc import Callable

from otel_bridge.exporters import StepRecord

HOLD_S = 60.0
"""The longest a held write or close waits for :attr:`BackendDouble.release` (a test that forgets it still ends)."""


class BackendDouble:
    """A tracker backend that keeps every record it writes (thread-safe).

    ``error``: raised by every ``fail_every``-th write attempt (1: every write), the record not kept;
    ``hold_after``: once that many records are written, each further write waits for :attr:`release` (0: every write
    waits, a gate); ``hold_close``: ``close()`` waits for :attr:`release`; ``on_write``: called with each record before
    it is kept (what a tracker's client does with it: an upload, a file).
    """

    def __init__(
        self,
        name: str = "collecting",
        *,
        error: BaseException | None = None,
        fail_every: int = 1,
        hold_after: int | None = None,
        hold_close: bool = False,
        on_write: Callable[[StepRecord], None] | None = None,
    ) -> None:
        self.name = name
        self.attempts = 0
        """How many writes were attempted, failed ones included."""
        self.release = threading.Event()
        """Set it to let held writes (``hold_after``) and a held ``close()`` go on."""
        self._error = error
        self._fail_every = fail_every
        self._hold_after = hold_after
        self._hold_close = hold_close
        self._on_write = on_write
        self._lock = threading.Lock()
        self._records: list[StepRecord] = []

    def write(self, record: StepRecord) -> None:
        """Keep ``record`` (after failing or holding as told)."""
        with self._lock:
            self.attempts += 1
            attempt, written = self.attempts, len(self._records)
        if self._error is not None and attempt % self._fail_every == 0:
            raise self._error.with_traceback(None)  # raised afresh each time: its traceback does not pile up
        if self._hold_after is not None and written >= self._hold_after:
            self.release.wait(HOLD_S)
        if self._on_write is not None:
            self._on_write(record)
        with self._lock:
            self._records.append(record)

    def flush(self) -> None:
        """Nothing buffered."""

    def close(self) -> None:
        """Nothing to release (or hold until :attr:`release`, with ``hold_close``)."""
        if self._hold_close:
            self.release.wait(HOLD_S)

    @property
    def records(self) -> list[StepRecord]:
        """The records written, in arrival order."""
        with self._lock:
            return list(self._records)

    @property
    def written(self) -> list[int]:
        """The steps of the records written, in arrival order."""
        return [record.step for record in self.records]

    def by_step(self) -> dict[int, dict[str, float]]:
        """``{step: values}`` of the records written."""
        return {r.step: dict(r.values) for r in self.records}

    def window_seconds(self, step: int) -> float:
        """The length of the window of the record written for ``step`` (it has a start)."""
        record = next(r for r in self.records if r.step == step)
        assert record.window_start is not None
        return record.time - record.window_start
