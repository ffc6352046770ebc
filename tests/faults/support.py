"""Shared pieces of the fault suite: a backend that keeps what it receives, config builders, log counting."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from otel_bridge import Bridge
from otel_bridge.exporters.record import StepRecord


class CollectingBackend:
    """A healthy backend that keeps every record it is given (thread-safe)."""

    def __init__(self, name: str = "collecting") -> None:
        self.name = name
        self._lock = threading.Lock()
        self._records: list[StepRecord] = []

    def write(self, record: StepRecord) -> None:
        """Keep ``record``."""
        with self._lock:
            self._records.append(record)

    def flush(self) -> None:
        """Nothing buffered."""

    def close(self) -> None:
        """Nothing to release."""

    @property
    def records(self) -> list[StepRecord]:
        """The records received, in arrival order."""
        with self._lock:
            return list(self._records)

    def by_step(self) -> dict[int, dict[str, float]]:
        """``{step: values}`` of the records received."""
        return {r.step: dict(r.values) for r in self.records}


class RaisingBackend:
    """A backend whose every write fails."""

    name = "raising"

    def __init__(self) -> None:
        self.attempts = 0

    def write(self, record: StepRecord) -> None:
        """Fail."""
        self.attempts += 1
        raise OSError("tracker service answered 500")

    def flush(self) -> None:
        """Nothing buffered."""

    def close(self) -> None:
        """Nothing to release."""


class HangingBackend:
    """Writes the first ``ok_steps`` records, then blocks on every write until ``release`` is set."""

    name = "hanging"

    def __init__(self, ok_steps: int = 2) -> None:
        self.ok_steps = ok_steps
        self.release = threading.Event()
        self.written: list[int] = []

    def write(self, record: StepRecord) -> None:
        """Hang (until released) after ``ok_steps`` records."""
        if len(self.written) >= self.ok_steps:
            self.release.wait(60)
        self.written.append(record.step)

    def flush(self) -> None:
        """Nothing buffered."""

    def close(self) -> None:
        """Nothing to release."""


def base_config(tmp_path: Path, name: str, **sections: Any) -> dict[str, Any]:
    """A config writing JSONL under ``tmp_path/name`` with fast warnings off (60 s rate limit, the default)."""
    return {"run": {"name": name, "dir": str(tmp_path)}, **sections}


def count_logs(caplog: pytest.LogCaptureFixture, text: str, level: int = logging.WARNING) -> int:
    """How many captured records at ``level`` or above contain ``text`` in their message."""
    return sum(1 for r in caplog.records if r.levelno >= level and text in r.getMessage())


def rollout_keys(values: dict[str, float]) -> list[str]:
    """The infrastructure keys of a record."""
    return [k for k in values if k.startswith("rollout/")]


def run_steps(bridge: Bridge, steps: int, *, collect: bool = False) -> None:
    """Steps ``0 .. steps-1``, each a ``with bridge.step(n)`` block logging ``actor/loss = n``; with ``collect``, each
    step's record is waited for before the next step begins."""
    for step in range(steps):
        with bridge.step(step):
            bridge.log({"actor/loss": float(step)}, step=step)
        if collect:
            bridge.collect(step)
