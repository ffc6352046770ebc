"""The servers a test process started end with it, even when it is killed (SIGKILL: no finalizer runs).

A server runs in its own session (so that stopping it by its process group ends what it started, and a terminal's
Ctrl-C reaches pytest, which stops it in order), so it would outlive a killed test process: a later run then finds
its port taken and Prometheus servers scraping nothing. Each test process therefore starts one reaper (``python -m
tests.helpers.reaper``) on first use, holding the only write end of a pipe the reaper reads: each server's process
group is written to it when started (``+PGID``) and when stopped (``-PGID``). When the pipe closes (the test process
ended, however), the reaper sends SIGKILL to every group still registered: only groups this test process started, by
their IDs. A test process that exits in order has stopped its servers by then, so nothing is left to end.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import threading

_lock = threading.Lock()
_reaper: subprocess.Popen[bytes] | None = None


def _send(line: str, *, start: bool) -> None:
    global _reaper
    with _lock:
        if _reaper is None or _reaper.poll() is not None:
            if not start:
                return
            _reaper = subprocess.Popen(
                [sys.executable, "-m", "tests.helpers.reaper"],
                stdin=subprocess.PIPE,
                start_new_session=True,  # not ended with this process' group: it outlives this process to reap
                cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
            )
            atexit.register(_close, _reaper)
        assert _reaper.stdin is not None
        _reaper.stdin.write(line.encode() + b"\n")
        _reaper.stdin.flush()


def _close(reaper: subprocess.Popen[bytes]) -> None:
    """This process exits: the reaper ends what is still registered (nothing, when every finalizer ran)."""
    assert reaper.stdin is not None
    with contextlib.suppress(BrokenPipeError):
        reaper.stdin.close()
    reaper.wait(timeout=10)


def _started(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, ``/proc/PID/stat``), ``None`` when it is gone: with its
    PID, what names one process, whose ID a later one cannot take while it lives."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def register(pgid: int) -> None:
    """A server's process group (led by the server, its ID the server's PID) to end if this process ends before
    :func:`unregister`."""
    _send(f"+{pgid} {_started(pgid)}", start=True)


def unregister(pgid: int) -> None:
    """The server's group ended (or is being ended) by this process."""
    _send(f"-{pgid}", start=False)


def _reap() -> None:
    groups: dict[int, str] = {}
    for line in sys.stdin:
        word, _, started = line.strip().partition(" ")
        if word.startswith("+"):
            groups[int(word[1:])] = started
        elif word.startswith("-"):
            groups.pop(int(word[1:]), None)
    for group, started in groups.items():  # the test process ended: end what it started and did not stop
        if _started(group) == started:  # its leader still runs: the group is the one registered, not a later one
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)


if __name__ == "__main__":
    _reap()
