"""Rate-limited logging: a repeated warning is logged once, then at most once per interval with a repeat count."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable


class RateLimitedLogger:
    """Logs a message per ``key`` at most once every ``interval_s`` seconds, counting what it held back."""

    def __init__(
        self, logger: logging.Logger, interval_s: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._log = logger
        self._interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def log(self, level: int, key: str, message: str, *args: object, exc_info: bool = False) -> bool:
        """Log ``message % args`` unless ``key`` was logged within the interval; returns whether it was logged.

        ``exc_info`` adds the exception being handled (with its traceback) to the record.
        """
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self._interval_s:
                self._suppressed[key] = self._suppressed.get(key, 0) + 1
                return False
            self._last[key] = now
            suppressed = self._suppressed.pop(key, 0)
        if suppressed:
            if not args:
                message = message.replace("%", "%%")
            message += " (repeated %d more times since last logged)"
            args = (*args, suppressed)
        self._log.log(level, message, *args, exc_info=exc_info)
        return True

    def warning(self, key: str, message: str, *args: object) -> bool:
        """:meth:`log` at WARNING."""
        return self.log(logging.WARNING, key, message, *args)

    def error(self, key: str, message: str, *args: object, exc_info: bool = False) -> bool:
        """:meth:`log` at ERROR."""
        return self.log(logging.ERROR, key, message, *args, exc_info=exc_info)

    def forget(self, key: str) -> None:
        """Let the next message for ``key`` through (e.g. after the condition cleared)."""
        with self._lock:
            self._last.pop(key, None)
            self._suppressed.pop(key, None)
