"""Imported at start-up by every Python process run with tests/helpers/faketime.py's environment (this directory
first on ``PYTHONPATH``), the bridge's child processes included: libfaketime 0.9.10 breaks
``clock_nanosleep(TIMER_ABSTIME)``, which ``time.sleep`` uses (EINVAL), so ``time.sleep`` becomes the same pause as a
wait on an event (the real monotonic clock, which the environment leaves unmoved)."""

import threading
import time


def _sleep(seconds: float) -> None:
    threading.Event().wait(seconds)


time.sleep = _sleep
