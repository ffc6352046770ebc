"""Fixed sleeps, accounted per test: a test that sleeps longer than its behaviour needs fails.

Every ``time.sleep`` the suite's own code calls (a caller in a file under ``tests/``: a test module, a conftest, a
helper) while a test runs, in the test's thread or one it started, is added to the test's account, by the seconds it
asked for. Sleeps of at most :data:`POLL_S` are a poll's (between two looks at an event: a server's readiness, a
file, a query's answer) and are not counted. A test whose account exceeds :data:`BUDGET_S` fails, listing where it
slept, unless its module declares why it needs more::

    pytestmark = pytest.mark.sleeps(40, reason="steps are wall-clock windows of live traffic (1.2-2.8 s each)")

(the seconds are the most one test of the module may sleep). Every test's account is written to the JUnit report as the
property ``fixed_sleep_s``. A wait on an event that never comes (``Event().wait(5)``) is a sleep this does not see:
review keeps those out.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import SupportsIndex

import pytest

TESTS = str(Path(__file__).resolve().parents[1])
#: Seconds of fixed sleep a test may take without saying why.
BUDGET_S = 5.0
#: Sleeps of at most this long are a poll's, not counted.
POLL_S = 0.5

_real_sleep = time.sleep
_lock = threading.Lock()
_account: dict[str, float] | None = None  # call site -> seconds, for the test running now


def _sleep(seconds: float | SupportsIndex) -> None:
    account = _account
    if account is not None and isinstance(seconds, int | float) and seconds > POLL_S:
        caller = sys._getframe(1).f_code
        if caller.co_filename.startswith(TESTS):
            site = f"{Path(caller.co_filename).relative_to(Path(TESTS).parent)}:{caller.co_name}"
            with _lock:
                account[site] = account.get(site, 0.0) + seconds
    _real_sleep(seconds)


def budget_of(item: pytest.Item) -> float:
    """The fixed sleep ``item`` may take: :data:`BUDGET_S`, or what its ``sleeps`` marker declares (with a reason)."""
    marker = item.get_closest_marker("sleeps")
    if marker is None:
        return BUDGET_S
    if not marker.kwargs.get("reason") or len(marker.args) != 1:
        raise pytest.UsageError(f"{item.nodeid}: use pytest.mark.sleeps(seconds, reason='why the behaviour needs it')")
    return float(marker.args[0])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    global _account
    _account = {}
    try:
        return (yield)
    finally:
        _account = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    result = yield  # a test that failed keeps its own failure
    with _lock:
        account = dict(_account or {})
    slept = sum(account.values())
    item.user_properties.append(("fixed_sleep_s", round(slept, 3)))
    budget = budget_of(item)
    if slept > budget:
        sites = ", ".join(f"{site} {s:.1f} s" for site, s in sorted(account.items(), key=lambda kv: -kv[1]))
        pytest.fail(
            f"{item.nodeid} slept {slept:.1f} s on fixed intervals (at most {budget:g} s here: {sites}); wait on the "
            "event instead (a server's readiness, Prometheus' scrape or rule-evaluation timestamps), shorten the "
            "interval, or declare what the behaviour needs: pytest.mark.sleeps(seconds, reason=...) (tests/plugins/"
            "sleeps.py)",
            pytrace=False,
        )
    return result


def pytest_configure(config: pytest.Config) -> None:
    time.sleep = _sleep
