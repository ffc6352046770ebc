"""TargetWatcher: on_change only on changes, failures logged and counted, never blocking the caller."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from otel_bridge.discovery import TargetWatcher
from otel_bridge.errors import ConfigError


class Source:
    """A resolver the test controls: returns ``targets`` (or raises ``error``); counts calls; can block."""

    def __init__(self, targets: list[str]) -> None:
        self.targets = targets
        self.error: Exception | None = None
        self.calls = 0
        self.gate: threading.Event | None = None
        self.called = threading.Condition()

    def __call__(self) -> list[str]:
        if self.gate is not None:
            self.gate.wait(10)
        with self.called:
            self.calls += 1
            self.called.notify_all()
        if self.error is not None:
            raise self.error
        return list(self.targets)

    def wait_calls(self, n: int, timeout_s: float = 5.0) -> None:
        with self.called:
            assert self.called.wait_for(lambda: self.calls >= n, timeout_s), f"{self.calls} calls, wanted {n}"


class Changes:
    """Records on_change calls."""

    def __init__(self) -> None:
        self.seen: list[list[str]] = []
        self.cond = threading.Condition()

    def __call__(self, targets: list[str]) -> None:
        with self.cond:
            self.seen.append(targets)
            self.cond.notify_all()

    def wait(self, n: int, timeout_s: float = 5.0) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.seen) >= n, timeout_s), f"changes: {self.seen}"


@pytest.fixture
def make_watcher() -> Iterator[Callable[..., TargetWatcher]]:
    made: list[TargetWatcher] = []

    def make(*args: object, **kwargs: object) -> TargetWatcher:
        watcher = TargetWatcher(*args, **kwargs)  # type: ignore[arg-type]
        made.append(watcher)
        return watcher

    yield make
    for watcher in made:
        watcher.close()


def settle(watcher: TargetWatcher, rounds: int = 1) -> None:
    """Trigger ``rounds`` resolutions, one after the other, and wait until each has completed (incl. on_change)."""
    for _ in range(rounds):
        wait_rounds(watcher, watcher.resolutions + 1, refresh=True)


def wait_rounds(watcher: TargetWatcher, n: int, *, refresh: bool = False, timeout_s: float = 5.0) -> None:
    """Wait until ``n`` resolution rounds have completed (asking for one first when ``refresh``)."""
    if refresh:
        watcher.refresh()
    deadline = time.monotonic() + timeout_s
    while watcher.resolutions < n:
        assert time.monotonic() < deadline, f"only {watcher.resolutions} rounds, wanted {n}"
        time.sleep(0.002)


def test_on_change_only_when_the_set_changes(make_watcher: Callable[..., TargetWatcher]) -> None:
    source, changes = Source(["b:2", "a:1"]), Changes()
    watcher = make_watcher(source, changes, interval_s=3600).start()
    wait_rounds(watcher, 1)
    assert changes.seen == [["a:1", "b:2"]]  # sorted
    settle(watcher, rounds=3)
    assert len(changes.seen) == 1  # same set three more times: no call
    source.targets = ["a:1", "b:2", "a:1"]  # same set, other order, duplicate
    settle(watcher)
    assert len(changes.seen) == 1
    source.targets = ["a:1", "c:3"]
    settle(watcher)
    assert changes.seen[-1] == ["a:1", "c:3"]
    assert len(changes.seen) == 2
    source.targets = []
    settle(watcher)
    assert changes.seen[-1] == []
    assert len(changes.seen) == 3
    assert watcher.current == []


def test_initial_set_is_not_resolved_at_once_nor_reported_again(make_watcher: Callable[..., TargetWatcher]) -> None:
    source, changes = Source(["a:1"]), Changes()
    idle = make_watcher(source, changes, interval_s=3600, initial=["a:1"]).start()
    watcher = make_watcher(source, changes, interval_s=0.05, initial=["a:1"]).start()
    wait_rounds(watcher, 1)
    settle(watcher)
    assert changes.seen == []
    assert watcher.current == ["a:1"]
    assert idle.resolutions == 0  # its first resolution is an interval away: the caller knows the set already


def test_resolves_periodically_on_its_own_thread(make_watcher: Callable[..., TargetWatcher]) -> None:
    source, changes = Source(["a:1"]), Changes()
    make_watcher(source, changes, interval_s=0.05).start()
    source.wait_calls(4, timeout_s=5)
    source.targets = ["z:9"]
    changes.wait(2)
    assert changes.seen == [["a:1"], ["z:9"]]


def test_failures_are_logged_counted_and_keep_the_last_set(
    make_watcher: Callable[..., TargetWatcher], caplog: pytest.LogCaptureFixture
) -> None:
    source, changes = Source(["a:1"]), Changes()
    watcher = make_watcher(source, changes, interval_s=3600).start()
    wait_rounds(watcher, 1)
    source.error = RuntimeError("registry down")
    settle(watcher, rounds=2)
    assert watcher.failures == 2
    assert watcher.current == ["a:1"]
    assert len(changes.seen) == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1  # rate-limited
    assert "RuntimeError: registry down" in warnings[0]
    assert "['a:1']" in warnings[0]
    source.error = None
    source.targets = ["bad target"]
    settle(watcher)
    assert watcher.failures == 3
    assert changes.seen == [["a:1"]]
    source.targets = ["b:2"]
    settle(watcher)
    assert changes.seen[-1] == ["b:2"]


def test_a_failing_on_change_is_logged_and_called_again(
    make_watcher: Callable[..., TargetWatcher], caplog: pytest.LogCaptureFixture
) -> None:
    source = Source(["a:1"])
    calls: list[list[str]] = []

    def on_change(targets: list[str]) -> None:
        calls.append(targets)
        if len(calls) == 1:
            raise ValueError("tracker busy")

    watcher = make_watcher(source, on_change, interval_s=3600).start()
    wait_rounds(watcher, 1)
    settle(watcher)
    assert calls == [["a:1"], ["a:1"]]
    assert watcher.failures == 1
    assert "on_change(['a:1']) raised" in caplog.text
    assert "tracker busy" in caplog.text
    settle(watcher)
    assert len(calls) == 2


def test_start_refresh_and_close_never_block_on_a_slow_resolver(make_watcher: Callable[..., TargetWatcher]) -> None:
    source, changes = Source(["a:1"]), Changes()
    source.gate = threading.Event()  # the resolver hangs until released
    watcher = make_watcher(source, changes, interval_s=3600)
    t0 = time.monotonic()
    watcher.start()
    watcher.refresh()
    watcher.close(timeout_s=0.2)
    assert time.monotonic() - t0 < 1.0
    source.gate.set()
    wait_rounds(watcher, 1)  # the resolution in progress has now returned and been handled
    assert source.calls == 1
    assert changes.seen == []  # closed while resolving: the late answer is not reported...
    assert watcher.current is None  # ...nor taken as the current targets


def test_lifecycle_errors() -> None:
    with pytest.raises(ConfigError, match="interval_s = 0 must be > 0"):
        TargetWatcher(list, print, interval_s=0)
    with (
        TargetWatcher(lambda: ["a:1"], lambda _t: None, interval_s=3600) as watcher,
        pytest.raises(RuntimeError, match="already started"),
    ):
        watcher.start()
    with pytest.raises(RuntimeError, match="is closed"):
        watcher.start()
