"""The machine as a resource the parallel workers share: a test that saturates it on purpose takes it from every test
that needs a server.

The timing-sensitive truth tests run on a saturated machine on purpose (``*_busy`` cases: CPU-bound processes on
every core, as on a trainer node), measuring what the bridge does there. With parallel workers
(``make test``) another worker's server test (a window read from live traffic and a real Prometheus)
would run on that saturated machine too, unplanned, and the saturating test would share its cores with it: neither
measures what it says. So every test marked ``server`` (tests/plugins/tiers.py) runs holding the machine *shared*, and
:func:`whole_machine` (which :class:`tests.helpers.cpu_load.CPULoad` enters) holds it *exclusively*: it waits until
the server tests running in other workers end, and their next ones wait until it is done.

The tests that need no server (the quick tier, ``make check``) do not take the machine: they measure no wall-clock
window against a store, only what the code computes, so they run beside a saturating test (one more CPU-bound process
beside its hogs), and the workers the saturating test would leave idle run them meanwhile (tiers.py hands out the
saturating groups first, then these).

A test that enters :func:`whole_machine` is marked ``saturates`` (so tiers.py can schedule it first), or it fails,
naming this module.

``flock`` locks in a directory of the run (one per ``pytest`` run, made by the controller and handed to the workers
in :data:`LOCKS_ENV`): ``machine`` (shared per server test, exclusive for a saturating block) and its ``intent`` lock,
which a block holds exclusively while it waits, and every test that takes ``machine`` shared passes through first, so
a waiting block is not starved by the other workers' stream of tests. Without workers, everything is one process and
no call waits.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

#: The run's lock directory, set by the controller for its workers.
LOCKS_ENV = "OTEL_BRIDGE_TEST_LOCKS"

_files: dict[str, int] = {}  # lock name -> this process' descriptor
_exclusive = False
_current: list[pytest.Item] = []  # the test running in this process


def _fd(name: str) -> int | None:
    directory = os.environ.get(LOCKS_ENV)
    if directory is None:
        return None
    if name not in _files:
        _files[name] = os.open(Path(directory) / name, os.O_RDWR | os.O_CREAT, 0o600)
    return _files[name]


@contextlib.contextmanager
def whole_machine() -> Iterator[None]:
    """Hold the machine from the other workers' server tests (see the module docstring). Re-entrant in one process."""
    global _exclusive
    item = _current[-1] if _current else None
    if item is not None and item.get_closest_marker("saturates") is None:
        raise RuntimeError(
            f"{item.nodeid} saturates the machine but is not marked `saturates` (see {__name__}): mark the test "
            "(or its parameter) with pytest.mark.saturates"
        )
    fds = _fd("machine"), _fd("intent")
    if None in fds or _exclusive:
        yield
        return
    machine, intent = (fd for fd in fds if fd is not None)
    server = item is None or item.get_closest_marker("server") is not None
    # This test's own shared hold is let go first: two workers asking for the machine at once must not each wait for
    # the other's hold.
    fcntl.flock(machine, fcntl.LOCK_UN)
    asked = time.monotonic()
    _through(intent, machine, fcntl.LOCK_EX)
    if item is not None:
        item.user_properties.append(("hold_waited_s", f"{time.monotonic() - asked:.3f}"))
    _exclusive = True
    try:
        yield
    finally:
        _exclusive = False
        if server:
            fcntl.flock(machine, fcntl.LOCK_SH)  # back to this test's shared hold
        else:
            fcntl.flock(machine, fcntl.LOCK_UN)


def _through(intent: int, lock: int, mode: int) -> None:
    """Take ``lock`` in ``mode``, through its ``intent`` lock: exclusively, holding the intent while waiting (the
    shared takers wait behind it); shared, passing through it (waiting while an exclusive taker waits or holds)."""
    if mode == fcntl.LOCK_EX:
        fcntl.flock(intent, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)  # once the holders in the other workers have let go
        finally:
            fcntl.flock(intent, fcntl.LOCK_UN)
    else:
        fcntl.flock(intent, fcntl.LOCK_SH)
        fcntl.flock(intent, fcntl.LOCK_UN)
        fcntl.flock(lock, fcntl.LOCK_SH)


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and LOCKS_ENV not in os.environ:  # the controller (or a run without -n)
        directory = tempfile.mkdtemp(prefix="otel-bridge-test-locks-")
        os.environ[LOCKS_ENV] = directory
        config.add_cleanup(lambda: shutil.rmtree(directory, ignore_errors=True))
        config.add_cleanup(lambda: os.environ.pop(LOCKS_ENV, None))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _current.append(item)
    try:
        fds = _fd("machine"), _fd("intent")
        if None in fds or item.get_closest_marker("server") is None:
            return (yield)
        return (yield from _shared(item, *(fd for fd in fds if fd is not None)))
    finally:
        _current.pop()


def _shared(item: pytest.Item, machine: int, intent: int) -> Generator[None, object, object]:
    """A server test's shared hold of ``machine`` (the time waited for it is the report's ``held_back_s``,
    tests/plugins/timeline.py)."""
    asked = time.monotonic()
    _through(intent, machine, fcntl.LOCK_SH)
    item.user_properties.append(("held_back_s", f"{time.monotonic() - asked:.3f}"))
    try:
        return (yield)
    finally:
        fcntl.flock(machine, fcntl.LOCK_UN)
