"""The last delivered step records, kept so that :meth:`Bridge.collect` and :meth:`Bridge.record` can return them."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

from otel_bridge.errors import DeliveryTimeoutError
from otel_bridge.exporters.record import StepRecord

KEPT_RECORDS = 1000
"""How many of the most recent records a :class:`RecordStore` keeps by default."""


class RecordStore:
    """The most recent ``capacity`` records by step; :meth:`add` is called by the delivery worker, the rest by the
    trainer (thread-safe)."""

    def __init__(self, capacity: int = KEPT_RECORDS) -> None:
        self._capacity = capacity
        self._records: OrderedDict[int, StepRecord] = OrderedDict()
        self._cond = threading.Condition()

    def add(self, record: StepRecord) -> None:
        """Keep ``record`` (the oldest one goes when the store is full) and wake up whoever waits for it."""
        with self._cond:
            self._records[record.step] = record
            while len(self._records) > self._capacity:
                self._records.popitem(last=False)
            self._cond.notify_all()

    def get(self, step: int) -> StepRecord | None:
        """The record of ``step``, or ``None`` when it was not delivered (yet) or is no longer kept."""
        with self._cond:
            return self._records.get(step)

    def wait(self, step: int, timeout_s: float) -> StepRecord:
        """The record of ``step``, waiting up to ``timeout_s`` for its delivery.

        Raises :class:`~otel_bridge.errors.DeliveryTimeoutError` naming the most recent steps when it does not come.
        """
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while step not in self._records:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise DeliveryTimeoutError(
                        f"step {step} was not delivered within {timeout_s}s (was it logged? recent steps: "
                        f"{list(self._records)[-5:]})"
                    )
                self._cond.wait(remaining)
            return self._records[step]
