"""TargetWatcher: re-resolves scrape targets periodically on its own daemon thread, reporting only changes.

::

    watcher = TargetWatcher(lambda: rollout_targets(actors), on_change=producer_targets_changed, interval_s=30)
    watcher.start()          # returns at once; the first resolution runs on the watcher thread
    ...
    watcher.close()

``on_change(targets)`` is called on the watcher thread with the sorted ``host:port`` list, only when the set differs
from the last one reported (or from ``initial``); if ``on_change`` raises, it is logged and the change is reported
again at the next resolution. A resolution that fails is logged (WARNING, rate-limited) and
counted in :attr:`TargetWatcher.failures`; the last known set stays in force and ``on_change`` is not called.
Nothing the watcher does blocks the caller: :meth:`start` and :meth:`refresh` return at once, :meth:`close` waits at
most its timeout.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from types import TracebackType

from otel_bridge.discovery.targets import normalize_targets
from otel_bridge.errors import ConfigError
from otel_bridge.ratelimit import RateLimitedLogger

_log = logging.getLogger(__name__)

TargetResolver = Callable[[], Iterable[str]]
"""Returns the current ``host:port`` targets; may raise (the watcher logs and keeps the last set)."""

OnChange = Callable[[list[str]], None]
"""Receives the new sorted target list whenever the set changes."""


class TargetWatcher:
    """Calls ``resolve()`` every ``interval_s`` seconds on a daemon thread and ``on_change`` when the set changes.

    ``initial`` is the set the caller already knows (e.g. resolved synchronously at start-up): the first resolution
    comes one interval later and reports only a difference from it. Without ``initial`` the watcher resolves at once,
    and the first successful resolution is always reported.
    ``name`` appears in the thread name and log messages. ``normalize`` checks and sorts what ``resolve`` returns
    (``host:port`` by default; pass another to watch URLs).
    """

    def __init__(
        self,
        resolve: TargetResolver,
        on_change: OnChange,
        *,
        interval_s: float = 30.0,
        initial: Iterable[str] | None = None,
        name: str = "targets",
        warn_interval_s: float = 60.0,
        normalize: Callable[[Iterable[object], str], list[str]] = normalize_targets,
    ) -> None:
        if not interval_s > 0:
            raise ConfigError(f"TargetWatcher interval_s = {interval_s} must be > 0 seconds")
        self._resolve = resolve
        self._on_change = on_change
        self._interval_s = interval_s
        self._name = name
        self._normalize = normalize
        self._current: list[str] | None = normalize(initial, "target") if initial is not None else None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._warn = RateLimitedLogger(_log, warn_interval_s)
        self._failures = 0
        self._resolutions = 0

    @property
    def current(self) -> list[str] | None:
        """The last target set reported (or ``initial``); ``None`` before the first successful resolution."""
        with self._lock:
            return None if self._current is None else list(self._current)

    @property
    def failures(self) -> int:
        """How many resolutions (or ``on_change`` calls) have failed so far."""
        with self._lock:
            return self._failures

    @property
    def resolutions(self) -> int:
        """How many resolution rounds (resolve, compare, ``on_change`` if needed) have completed so far."""
        with self._lock:
            return self._resolutions

    def start(self) -> TargetWatcher:
        """Start the watcher thread (returns at once); the first resolution happens on that thread."""
        with self._lock:
            if self._stopping:
                raise RuntimeError(f"TargetWatcher {self._name!r} is closed; create a new one")
            if self._thread is not None:
                raise RuntimeError(f"TargetWatcher {self._name!r} is already started")
            self._thread = threading.Thread(target=self._run, name=f"otel-bridge-watch-{self._name}", daemon=True)
        self._thread.start()
        return self

    def refresh(self) -> None:
        """Ask for a resolution now instead of at the next interval (returns at once)."""
        self._wake.set()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the thread, waiting at most ``timeout_s`` for a resolution in progress (a WARNING if it lingers)."""
        with self._lock:
            self._stopping = True
            thread = self._thread
        self._wake.set()
        if thread is None or thread is threading.current_thread():
            return
        thread.join(timeout_s)
        if thread.is_alive():
            _log.warning(
                "target watcher %r is still inside a resolution after %.1fs; leaving its daemon thread behind",
                self._name,
                timeout_s,
            )

    def _run(self) -> None:
        if self.current is not None:  # the caller just resolved it
            self._wake.wait(self._interval_s)
        while True:
            self._wake.clear()
            with self._lock:
                if self._stopping:
                    return
            self._resolve_once()
            self._wake.wait(self._interval_s)

    def _resolve_once(self) -> None:
        try:
            self._round()
        finally:
            with self._lock:
                self._resolutions += 1

    def _round(self) -> None:
        try:
            targets = self._normalize(self._resolve(), f"target from watcher {self._name!r}")
        except Exception as exc:  # noqa: BLE001 - any resolver failure is logged, counted, and the last set kept
            with self._lock:
                self._failures += 1
            self._warn.warning(
                "resolve",
                "target watcher %r: resolving targets failed (%s: %s); keeping the last known targets %s",
                self._name,
                type(exc).__name__,
                exc,
                self.current,
            )
            return
        self._warn.forget("resolve")
        with self._lock:
            if self._stopping or targets == self._current:
                return
            previous, self._current = self._current, targets
        _log.info("target watcher %r: targets changed from %s to %s", self._name, previous, targets)
        try:
            self._on_change(list(targets))
        except Exception:  # noqa: BLE001 - a failing callback must not kill the watcher thread; it is retried
            with self._lock:
                self._failures += 1
                if self._current == targets:
                    self._current = previous  # so the next resolution reports the change again
            _log.exception("target watcher %r: on_change(%s) raised; it will be called again", self._name, targets)

    def __enter__(self) -> TargetWatcher:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
