"""JSON Lines backend: one JSON object per step, appended to a file."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from otel_bridge.errors import BackendError
from otel_bridge.exporters.backends.options import BackendOptions, PathOption, parse_options, under
from otel_bridge.exporters.record import StepRecord

_logger = logging.getLogger(__name__)

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
                "name keys with otel_bridge.exporters.naming.sanitize_key, which renames such keys"
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

    Parent directories are created. The file is flushed after every record, so a crash loses at most the
    record being written; a partial last line left by such a crash is terminated before the next record is
    appended.
    """

    def __init__(self, path: Path) -> None:
        self.name = "jsonl"
        self.path = path
        self._file: TextIO | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            needs_newline = self._ends_without_newline(path)
            self._file = path.open("a", encoding="utf-8")
            if needs_newline:
                _logger.warning("jsonl: %s ends with a partial line (an earlier crash?); appending after it", path)
                self._file.write("\n")
                self._file.flush()
        except OSError as err:
            raise BackendError(f"jsonl: cannot open {path} for appending: {err}; choose a writable path") from err

    @staticmethod
    def _ends_without_newline(path: Path) -> bool:
        if not path.exists() or path.stat().st_size == 0:
            return False
        with path.open("rb") as existing:
            existing.seek(-1, 2)
            return existing.read(1) != b"\n"

    def write(self, record: StepRecord) -> None:
        """Append ``record`` as one line and flush it to the operating system."""
        if self._file is None:
            raise BackendError(f"jsonl: {self.path} is closed; cannot write step {record.step}")
        line = record_to_json(record)
        try:
            self._file.write(line + "\n")
            self._file.flush()
        except OSError as err:
            raise BackendError(f"jsonl: cannot write step {record.step} to {self.path}: {err}") from err

    def flush(self) -> None:
        """Flush buffered output (every record is already flushed by :meth:`write`)."""
        if self._file is None:
            return
        try:
            self._file.flush()
        except OSError as err:
            raise BackendError(f"jsonl: cannot flush {self.path}: {err}") from err

    def close(self) -> None:
        """Close the file. Closing twice is allowed."""
        if self._file is None:
            return
        file, self._file = self._file, None
        try:
            file.close()
        except OSError as err:
            raise BackendError(f"jsonl: cannot close {self.path}: {err}") from err


class JsonlOptions(BackendOptions):
    """Options of the ``jsonl`` tracker."""

    path: PathOption = Path("metrics.jsonl")
    """The file, relative to the run directory."""


def create_jsonl_backend(options: Mapping[str, Any], run_dir: Path) -> JsonlBackend:
    """The ``jsonl`` tracker: one JSON object per step appended to ``path``."""
    return JsonlBackend(under(run_dir, parse_options("jsonl", JsonlOptions, options).path))
