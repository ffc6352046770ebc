"""A saturated machine, as a real trainer node is: CPU-bound processes beside the test for as long as it runs.

Each hog is a real process (``python -c 'while True: pass'``) at the test's own priority, started by
:class:`CPULoad` and ended by its PID on exit, even when the test fails. While hogs run, the test holds the machine
whole (:func:`tests.plugins.machine.whole_machine`): no other worker's test runs on it meanwhile.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import ExitStack
from types import TracebackType

from tests.plugins.machine import whole_machine

_HOG = "while True: pass"


class CPULoad:
    """``processes`` CPU-bound processes (default: one per core) while the ``with`` block runs."""

    def __init__(self, processes: int | None = None) -> None:
        self.processes = processes if processes is not None else os.cpu_count() or 2
        self._hogs: list[subprocess.Popen[bytes]] = []
        self._machine = ExitStack()

    @property
    def pids(self) -> list[int]:
        """The hogs' process ids."""
        return [hog.pid for hog in self._hogs]

    def __enter__(self) -> CPULoad:
        if self.processes:
            self._machine.enter_context(whole_machine())
        try:
            for _ in range(self.processes):
                self._hogs.append(subprocess.Popen([sys.executable, "-c", _HOG], stdin=subprocess.DEVNULL))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """End every hog (SIGKILL: a busy loop has nothing to clean up) and reap it. Idempotent."""
        hogs, self._hogs = self._hogs, []
        for hog in hogs:
            if hog.poll() is None:
                os.kill(hog.pid, signal.SIGKILL)
        for hog in hogs:
            hog.wait()
        self._machine.close()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
