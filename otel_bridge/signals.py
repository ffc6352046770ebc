"""Opt-in SIGTERM handling: turn SIGTERM into ``SystemExit`` so ``finally`` blocks and ``atexit`` hooks run.

A library must not take over a process' signals by default (verl, Ray, torchrun and Lightning install their own), so
nothing here runs unless asked for: ``run.handle_sigterm: true``, :meth:`Bridge.handle_sigterm`, or
:func:`otel_bridge.install`.
"""

from __future__ import annotations

import logging
import signal
import threading

_log = logging.getLogger(__name__)


def _raise_system_exit(signum: int, frame: object) -> None:
    """The SIGTERM handler: exit through ``SystemExit(128 + signum)`` so cleanup runs."""
    raise SystemExit(128 + signum)


def exit_on_sigterm() -> bool:
    """Make SIGTERM raise ``SystemExit(143)`` when that is safe; ``True`` when the handler is (now) in place.

    Only on the main thread and only when SIGTERM still has its default action: a handler the trainer (or its
    framework) installed is never replaced. With the default action the process would die without running the
    ``atexit`` hook that delivers the records of finished steps.
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    current = signal.getsignal(signal.SIGTERM)
    if current is _raise_system_exit:
        return True
    if current is not signal.SIG_DFL:
        _log.info("otel-bridge: SIGTERM already has a handler (%r); it is left in place", current)
        return False
    signal.signal(signal.SIGTERM, _raise_system_exit)
    _log.debug("otel-bridge: SIGTERM now raises SystemExit so pending records are delivered before exit")
    return True
