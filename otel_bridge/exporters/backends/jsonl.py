"""JSON Lines backend: one JSON object per step, appended to a file."""

from __future__ import annotations

import json
import logging
import math
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from otel_bridge.errors import BackendError
from otel_bridge.exporters.backends.options import BackendOptions, PathOption, of_another_run, parse_options, under
from otel_bridge.exporters.record import StepRecord

_log = logging.getLogger(__name__)

RECORD_FIELDS = ("step", "time", "window_start")
NOTES_FIELD = "_notes"


def record_to_json(record: StepRecord) -> str:
    """One line (without newline) for ``record``.

    Fields ``step``, ``time`` and ``window_start`` come first, then the metric keys sorted, then ``_notes``
    when the record has notes. Raises :class:`BackendError` for a non-finite value or a key that clashes
    with a field.
    """
    obj: dict[str, Any] = {"step": record.step, "time": record.time, "window_start": record.window_start}
    for key in sorted(record.values):
        if key in obj or key == NOTES_FIELD:
            raise BackendError(
                f"jsonl: metric key {key!r} clashes with the record field of the same name; "
                "name keys with otel_bridge.exporters.naming.record_key, which renames such keys"
            )
        value = float(record.values[key])
        if not math.isfinite(value):
            raise BackendError(
                f"jsonl: step {record.step}: metric {key!r} is {value}, and JSON has no non-finite numbers; "
                "non-finite values must be filtered before they reach a backend"
            )
        obj[key] = value
    if record.notes:
        obj[NOTES_FIELD] = list(record.notes)
    try:
        return json.dumps(obj, allow_nan=False, ensure_ascii=False)
    except ValueError as err:
        raise BackendError(f"jsonl: step {record.step}: the record cannot be written as JSON: {err}") from err


class JsonlBackend:
    """Appends one JSON object per step to ``path`` (a resumed run appends to the same file).

    Parent directories are created. Each record goes to the operating system in one unbuffered append, so a crash
    loses at most the record being written; a partial last line left by such a crash is terminated before the next
    record is appended. A write that fails (disk full) is undone: the file is cut back to its length before it, so a
    retry writes the record once and the file stays valid JSON Lines in step order.
    """

    def __init__(self, path: Path) -> None:
        self.name = "jsonl"
        self.path = path
        self._fd: int | None = None
        # The steps written by this backend, checked again by verify(): runs [first, last] of consecutive steps, so
        # a long run keeps a few integers, not one per step.
        self._written: list[list[int]] = []
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            needs_newline = self._ends_without_newline(path)
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._start = os.fstat(self._fd).st_size
            if needs_newline:
                _log.warning("jsonl: %s ends with a partial line (an earlier crash?); appending after it", path)
                self._append(b"\n")
        except OSError as err:
            raise BackendError(f"jsonl: cannot open {path} for appending: {err}; choose a writable path") from err

    @staticmethod
    def _ends_without_newline(path: Path) -> bool:
        if not path.exists() or path.stat().st_size == 0:
            return False
        with path.open("rb") as existing:
            existing.seek(-1, 2)
            return existing.read(1) != b"\n"

    def _append(self, data: bytes) -> None:
        """Append ``data`` entirely or not at all (on failure the file is cut back to its previous length)."""
        assert self._fd is not None
        before = os.fstat(self._fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError:
            try:
                if os.fstat(self._fd).st_size != before:  # part of it was written (not on a device like /dev/full)
                    os.ftruncate(self._fd, before)
            except OSError as undo:
                _log.error("jsonl: cannot cut %s back to %d bytes after a failed write: %s", self.path, before, undo)
            raise

    def write(self, record: StepRecord) -> None:
        """Append ``record`` as one line, whole or not at all."""
        if self._fd is None:
            raise BackendError(f"jsonl: {self.path} is closed; cannot write step {record.step}")
        line = record_to_json(record)
        try:
            self._append((line + "\n").encode("utf-8"))
        except OSError as err:
            raise BackendError(f"jsonl: cannot write step {record.step} to {self.path}: {err}") from err
        if self._written and self._written[-1][1] + 1 == record.step:
            self._written[-1][1] = record.step
        else:
            self._written.append([record.step, record.step])

    def verify(self) -> list[str]:
        """Re-read the file: the steps written that it no longer holds, and lines that are not JSON (after close).

        Only a regular file is read back (not ``/dev/full`` or a pipe), line by line from where this run began.
        """
        found: set[int] = set()
        broken = 0
        try:
            if not stat.S_ISREG(self.path.stat().st_mode):
                return []
            with self.path.open("rb") as file:
                file.seek(min(self._start, self.path.stat().st_size))
                for line in file:
                    try:
                        found.add(int(json.loads(line)["step"]))
                    except (ValueError, KeyError, TypeError):
                        broken += 1
        except OSError as err:
            return [f"{self.path} cannot be read back: {err}"]
        problems = []
        written = (step for first, last in self._written for step in range(first, last + 1))
        if missing := [step for step in written if step not in found]:
            shown = ", ".join(map(str, missing[:10])) + (", ..." if len(missing) > 10 else "")
            problems.append(f"{self.path} does not hold {len(missing)} step(s) written to it (truncated?): {shown}")
        if broken:
            problems.append(f"{self.path} has {broken} line(s) that are not JSON records")
        return problems

    def flush(self) -> None:
        """Nothing is buffered: every record reaches the operating system in :meth:`write`."""

    def close(self) -> None:
        """Close the file. Closing twice is allowed."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.close(fd)
        except OSError as err:
            raise BackendError(f"jsonl: cannot close {self.path}: {err}") from err


class JsonlOptions(BackendOptions):
    """Options of the ``jsonl`` tracker."""

    path: PathOption = Path("metrics.jsonl")
    """The file, relative to the run directory."""


def create_jsonl_backend(options: Mapping[str, Any], run_dir: Path) -> JsonlBackend:
    """The ``jsonl`` tracker: one JSON object per step written to ``path``. A file outside the run directory that
    already holds records (an earlier run's) is refused, since a run never appends to another run's file; inside it,
    the run is its own (a new run's directory is new; a resumed run, ``run.resume``, appends to its file)."""
    path = under(run_dir, parse_options("jsonl", JsonlOptions, options).path)
    if of_another_run(run_dir, path) and path.is_file() and path.stat().st_size > 0:
        raise BackendError(
            f"jsonl: {path} already holds an earlier run's records, and a run never appends to another run's file: "
            "move or remove it, or give this run a file of its own (the tracker's path; for verl's `file` logger, "
            "another trainer.experiment_name or $VERL_FILE_LOGGER_PATH), or leave path unset (each run then writes "
            "<run dir>/metrics.jsonl)"
        )
    return JsonlBackend(path)
