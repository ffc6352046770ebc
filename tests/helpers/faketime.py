"""A process with its wall clock moved: Debian's libfaketime (package ``faketime``, ``make debian-packages``).

Used by tests/faults/test_clock_offset.py and the soak's clock-offset part (soak/clock_offset.py) to run a trainer on
a node whose clock disagrees with the store's. Two workarounds for libfaketime 0.9.10 are part of the contract:

- only the wall clock is moved (``FAKETIME_DONT_FAKE_MONOTONIC=1``): timed waits hang when it moves the monotonic
  clock, and a drifting node's monotonic clock does not jump either;
- it breaks ``clock_nanosleep(TIMER_ABSTIME)``, which ``time.sleep`` uses (EINVAL): every Python process started
  with :func:`environment` (the bridge's child processes too, which inherit it) first imports
  ``faketime_site/sitecustomize.py``, which makes ``time.sleep`` the same pause as a wait on an event (the real
  monotonic clock).
"""

from __future__ import annotations

import os
from pathlib import Path

LIBFAKETIME = "/usr/lib/*/faketime/libfaketime.so.1"
SITE = Path(__file__).resolve().parent / "faketime_site"  # its sitecustomize.py: time.sleep on the monotonic clock


def libfaketime() -> Path | None:
    """The installed libfaketime, or None."""
    found = sorted(Path("/").glob(LIBFAKETIME.lstrip("/")))
    return found[0] if found else None


def missing_reason() -> str:
    """Why a clock cannot be moved here (when :func:`libfaketime` is None)."""
    return f"libfaketime is not installed (no {LIBFAKETIME}): make debian-packages installs it"


def environment(library: Path, store_ahead_s: float, pythonpath: Path) -> dict[str, str]:
    """This process's environment for a child whose wall clock runs ``store_ahead_s`` behind the real one (the
    store, on the real clock, ``store_ahead_s`` ahead of it), importing from ``pythonpath``."""
    base = {k: v for k, v in os.environ.items() if k not in {"LD_PRELOAD", "FAKETIME"}}
    return {
        **base,
        "LD_PRELOAD": str(library),
        "FAKETIME": f"{-store_ahead_s:+g}s",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "PYTHONPATH": os.pathsep.join((str(SITE), str(pythonpath))),
    }
