"""What the soak's backends received, and how it is counted: per step, so duplicates and gaps show, in flat memory.

:class:`CountingBackend` keeps one byte per step (how many copies of that step arrived, capped at 255) and flags for
records that were wrong or whose infrastructure readings were missing, so its memory is fixed when the run starts.
:func:`jsonl_copies` reads a JSONL file the same way. :func:`tally` turns copies into ``expected`` / ``delivered`` /
``duplicates`` for a range of steps: one fault's window, or the whole run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from otel_bridge.exporters.record import StepRecord
from otel_bridge.exporters.tracker import INFRA_DROPPED_NOTE, INFRA_LATE_NOTE, INTERRUPTED_NOTE
from otel_bridge.health import INFRA_UNAVAILABLE

TRAINER_KEY = "trainer/step_value"
INFRA_MISSING_NOTES = (INFRA_LATE_NOTE, INFRA_DROPPED_NOTE)


class CountingBackend:
    """A healthy backend: counts the copies of each step it receives and checks the trainer's value."""

    name = "counting"

    def __init__(self, steps: int) -> None:
        self.copies = bytearray(steps)
        self.infra_missing = bytearray(steps)  # 1: the record says its infrastructure readings are missing (note, key)
        self.with_infra = bytearray(steps)  # 1: the record has rollout/... keys
        self.wrong = 0  # records whose trainer value is not their step's
        self.out_of_range = 0  # records of a step the run never had
        self.interrupted = 0
        self.silently_without_infra = 0  # meaningful for runs that read infrastructure

    def write(self, record: StepRecord) -> None:
        """Count ``record`` and check that it carries its step's trainer value."""
        step = record.step
        if not 0 <= step < len(self.copies):
            self.out_of_range += 1
            return
        self.copies[step] = min(255, self.copies[step] + 1)
        if record.values.get(TRAINER_KEY) != float(step):
            self.wrong += 1
        missing = any(note in record.notes for note in INFRA_MISSING_NOTES)
        if missing or record.values.get(INFRA_UNAVAILABLE, 0.0) > 0:
            self.infra_missing[step] = 1
        if any(key.startswith("rollout/") for key in record.values):
            self.with_infra[step] = 1
        elif not self.infra_missing[step]:
            self.silently_without_infra += 1  # no reading and nothing says why
        if INTERRUPTED_NOTE in record.notes:
            self.interrupted += 1

    def flush(self) -> None:
        """Nothing buffered."""

    def close(self) -> None:
        """Nothing to release."""


class FlakyBackend(CountingBackend):
    """Fails every ``every``-th write attempt (a tracker service with transient errors); its retries recover."""

    name = "flaky"

    def __init__(self, steps: int, every: int = 5) -> None:
        super().__init__(steps)
        self.every = every
        self.attempts = 0

    def write(self, record: StepRecord) -> None:
        """Fail every ``every``-th attempt, else count."""
        self.attempts += 1
        if self.attempts % self.every == 0:
            raise ConnectionError("tracker service: 503 (soak fault)")
        super().write(record)


@dataclass
class JsonlContents:
    """A JSONL file read back: copies per step, and what is wrong with the file as JSON Lines."""

    copies: bytearray
    lines: int = 0
    wrong: int = 0  # lines whose trainer value is not their step's
    out_of_order: int = 0  # lines whose step is not above the previous line's
    invalid: int = 0  # lines that are not a JSON object with an integer step in range
    interrupted: list[int] = field(default_factory=list)  # steps noted interrupted
    last_step: int = -1
    ends_with_newline: bool = True


def jsonl_copies(path: Path, steps: int, trainer_key: str = TRAINER_KEY) -> JsonlContents:
    """Read ``path`` (a JSONL tracker file of a run of ``steps`` steps)."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    contents = JsonlContents(bytearray(steps), ends_with_newline=not text or text.endswith("\n"))
    previous = -1
    for line in text.splitlines():
        contents.lines += 1
        try:
            obj = json.loads(line)
        except ValueError:
            contents.invalid += 1
            continue
        step = obj.get("step") if isinstance(obj, dict) else None
        if not isinstance(step, int) or not 0 <= step < steps:
            contents.invalid += 1
            continue
        contents.copies[step] = min(255, contents.copies[step] + 1)
        if step <= previous:
            contents.out_of_order += 1
        previous = contents.last_step = max(previous, step)
        interrupted = any(str(note).startswith("interrupted") for note in obj.get("_notes", ()))
        if interrupted:
            contents.interrupted.append(step)
        # an interrupted step has what was logged before the signal: maybe not the trainer's value yet
        value = obj.get(trainer_key)
        if value != float(step) and not (value is None and interrupted):
            contents.wrong += 1
    return contents


def tally(copies: Sequence[int], steps: Iterable[int]) -> dict[str, Any]:
    """``expected`` / ``delivered`` / ``duplicates`` over ``steps``, and the first missing steps."""
    expected = delivered = duplicates = 0
    missing: list[int] = []
    for step in steps:
        expected += 1
        count = copies[step]
        if count:
            delivered += 1
            duplicates += count - 1
        elif len(missing) < 20:
            missing.append(step)
    return {"expected": expected, "delivered": delivered, "duplicates": duplicates, "first_missing": missing}


def windows_steps(windows: Iterable[tuple[int, int]]) -> list[int]:
    """The steps of half-open windows ``[start, end)``, each once, in order."""
    return sorted({step for start, end in windows for step in range(start, end)})


def complete(tallies: dict[str, dict[str, Any]], backends: Iterable[str]) -> bool:
    """``delivered == expected`` and no duplicate for each of ``backends``."""
    return all(
        tallies[name]["delivered"] == tallies[name]["expected"] and tallies[name]["duplicates"] == 0
        for name in backends
    )
