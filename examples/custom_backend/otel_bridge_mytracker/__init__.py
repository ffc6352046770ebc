"""An example otel-bridge tracker plugin: appends one ``step,key,value`` CSV line per metric value."""

from __future__ import annotations

import csv
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from otel_bridge.errors import BackendError, ConfigError
from otel_bridge.exporters.record import StepRecord


class CsvTracker:
    """A Backend: ``name`` plus ``write`` (in step order, one thread), ``flush`` and ``close``."""

    def __init__(self, path: Path) -> None:
        self.name = "mytracker"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", newline="", encoding="utf-8")
        self._csv = csv.writer(self._file)

    def write(self, record: StepRecord) -> None:
        try:
            self._csv.writerows((record.step, key, value) for key, value in sorted(record.values.items()))
            self._file.flush()
        except (OSError, ValueError) as err:  # ValueError: the file is closed
            raise BackendError(f"mytracker: cannot write step {record.step}: {err}") from err

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()  # closing twice is allowed


def create(options: Mapping[str, Any], run_dir: Path) -> CsvTracker:
    """The entry point: ``(options, run_dir) -> Backend``; ``options`` are the tracker's config keys."""
    unknown = sorted(set(options) - {"path"})
    if unknown:
        raise ConfigError(f"unknown option(s) {unknown}; the only option is 'path' (default mytracker.csv)")
    return CsvTracker(run_dir / str(options.get("path", "mytracker.csv")))
