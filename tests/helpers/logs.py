"""Log records of a logger tree, kept while a ``with`` block runs (pytest's ``caplog`` serves one test; this serves a
module-scoped case that several tests read)."""

from __future__ import annotations

import logging
from types import TracebackType


class LogRecords(logging.Handler):
    """Every record logged under ``logger`` (at ``level`` and above) while the ``with`` block runs, in
    :attr:`records`."""

    def __init__(self, logger: str, level: int = logging.INFO) -> None:
        super().__init__(level)
        self._logger = logging.getLogger(logger)
        self._saved_level = self._logger.level
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def __enter__(self) -> LogRecords:
        self._logger.addHandler(self)
        if self._logger.getEffectiveLevel() > self.level:
            self._logger.setLevel(self.level)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._logger.removeHandler(self)
        self._logger.setLevel(self._saved_level)
