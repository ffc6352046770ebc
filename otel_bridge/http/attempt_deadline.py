"""Whole-attempt deadlines for HTTP requests sent through ``requests``/urllib3.

A per-read timeout does not bound a request: a server that sends one byte every 2 s never lets a 10 s read timeout
expire. Here every attempt of a request (connect, send, the answer and its body, redirects included) gets a deadline:

- the connect and first-answer waits of the socket shrink to the time left, so a server that says nothing still
  fails as a connect or read timeout, at the deadline;
- a watchdog thread shuts down the sockets of an attempt still running :data:`GRACE_S` after its deadline (a server
  trickling bytes), which ends the blocked read at once with a connection error.

:func:`attempt_deadline` arms a deadline for the current thread; the connections made by :class:`DeadlineAdapter`
consult it. A retry starts a new attempt with a fresh deadline (:meth:`AttemptDeadline.next_attempt`).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import urllib3
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.response import HTTPResponse

__all__ = ["GRACE_S", "AttemptDeadline", "DeadlineAdapter", "active_deadline", "attempt_deadline"]

_log = logging.getLogger(__name__)

#: How long after its deadline an attempt that is still receiving has its sockets shut down. An attempt whose server
#: says nothing ends at the deadline itself, by its socket timeout (with the usual connect/read timeout reason).
GRACE_S = 0.25
_MIN_SOCKET_TIMEOUT_S = 0.001

_local = threading.local()


def active_deadline() -> AttemptDeadline | None:
    """The deadline of the request this thread is sending, if any."""
    deadline: AttemptDeadline | None = getattr(_local, "deadline", None)
    return deadline


@contextmanager
def attempt_deadline(seconds: float) -> Iterator[AttemptDeadline]:
    """Give every attempt of the requests this thread sends in the block ``seconds`` to complete."""
    deadline = AttemptDeadline(seconds)
    previous = active_deadline()
    _local.deadline = deadline
    try:
        yield deadline
    finally:
        deadline.finish()
        _local.deadline = previous


class AttemptDeadline:
    """The clock of one request: each attempt must end within ``seconds`` of its start (see the module docstring).

    ``expired`` tells whether the current (or last) attempt ran out of time and had its sockets shut down.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._lock = threading.Lock()
        self._expires_at: float | None = None  # None: no attempt running
        self._attempt = 0
        # each connection with the socket it had when watched (a response that closes its connection keeps reading
        # from that socket after the connection let go of it)
        self._sockets: list[tuple[HTTPConnection, socket.socket]] = []
        self._done = False

    def remaining(self) -> float:
        """Seconds left for the current attempt, which starts now if none is running."""
        with self._lock:
            if self._expires_at is None and not self._done:
                self._attempt += 1
                self._expires_at = time.monotonic() + self.seconds
                self.expired = False
                _WATCHDOG.schedule(self._expires_at + GRACE_S, self, self._attempt)
            expires_at = self._expires_at if self._expires_at is not None else time.monotonic()
        return max(expires_at - time.monotonic(), 0.0)

    def cap(self, timeout: Any) -> Any:
        """``timeout`` (a connection's socket timeout) capped at the time left."""
        left = max(self.remaining(), _MIN_SOCKET_TIMEOUT_S)
        return min(timeout, left) if isinstance(timeout, int | float) else timeout

    def watch(self, connection: HTTPConnection) -> None:
        """Shut ``connection``'s socket down if the current attempt outlives its deadline (the connection becomes this
        deadline's until another request uses it)."""
        self.remaining()  # starts the attempt
        connection.otel_bridge_deadline = self  # type: ignore[attr-defined]
        sock = connection.sock
        if not isinstance(sock, socket.socket):
            return  # not connected yet: connect() watches it again
        with self._lock:
            if all(s is not sock for _, s in self._sockets):
                self._sockets.append((connection, sock))
            if self.expired:
                _shut_down(sock)

    def next_attempt(self) -> None:
        """The current attempt failed and will be retried: the next one gets a fresh deadline."""
        with self._lock:
            self._expires_at = None
            self._sockets.clear()

    def finish(self) -> None:
        """The request is over: the watchdog leaves its connections alone from now on."""
        with self._lock:
            self._done = True
            self._expires_at = None
            self._sockets.clear()

    def _fire(self, attempt: int) -> None:
        with self._lock:
            if self._done or attempt != self._attempt or self._expires_at is None:
                return
            self.expired = True
            sockets = [s for c, s in self._sockets if getattr(c, "otel_bridge_deadline", None) is self]
        _log.debug("an HTTP attempt outlived its %gs deadline; shutting its connection down", self.seconds)
        for sock in sockets:
            _shut_down(sock)


def _shut_down(sock: socket.socket) -> None:
    """End any blocked read or write on ``sock`` now (it is closed later by its owner; once closed, this is a no-op).

    socket.socket's own shutdown, also for an SSLSocket: its TLS state is left for the reader to fail on.
    """
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _Watchdog:
    """One daemon thread firing deadlines in time order (started on first use, and again in a forked child)."""

    def __init__(self) -> None:
        self._reset()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, AttemptDeadline, int]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def schedule(self, at: float, deadline: AttemptDeadline, attempt: int) -> None:
        with self._cond:
            heapq.heappush(self._heap, (at, next(self._order), deadline, attempt))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="otel-bridge-http-deadlines", daemon=True)
                self._thread.start()
            elif self._heap[0][2] is deadline:
                self._cond.notify()  # the thread sleeps until a later deadline

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    self._cond.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                _, _, deadline, attempt = heapq.heappop(self._heap)
            deadline._fire(attempt)


_WATCHDOG = _Watchdog()


class _DeadlineHTTPConnection(HTTPConnection):
    """An urllib3 connection that bounds its socket waits by the active deadline and lets it watch the socket."""

    def connect(self) -> None:
        deadline = active_deadline()
        if deadline is not None:
            self.timeout = deadline.cap(self.timeout)
        super().connect()
        if deadline is not None:
            deadline.watch(self)

    def request(self, *args: Any, **kwargs: Any) -> None:
        deadline = active_deadline()
        if deadline is not None:
            self.timeout = deadline.cap(self.timeout)
            deadline.watch(self)
        super().request(*args, **kwargs)

    def getresponse(self) -> HTTPResponse:  # type: ignore[override]  # as urllib3 declares it
        deadline = active_deadline()
        if deadline is not None:
            self.timeout = deadline.cap(self.timeout)
        return super().getresponse()


class _DeadlineHTTPSConnection(_DeadlineHTTPConnection, HTTPSConnection):
    pass


class _DeadlineHTTPPool(HTTPConnectionPool):
    ConnectionCls = _DeadlineHTTPConnection


class _DeadlineHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _DeadlineHTTPSConnection


_POOL_CLASSES: dict[str, type[HTTPConnectionPool]] = {"http": _DeadlineHTTPPool, "https": _DeadlineHTTPSPool}


class DeadlineAdapter(HTTPAdapter):
    """``HTTPAdapter`` whose connections honour :func:`attempt_deadline` (direct and through HTTP(S) proxies)."""

    def init_poolmanager(self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any) -> None:
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)
        self.poolmanager.pool_classes_by_scheme = _POOL_CLASSES

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        # SOCKS managers bring their own pool classes; only the stock HTTP(S) proxy pools are swapped.
        if manager.pool_classes_by_scheme is urllib3.poolmanager.pool_classes_by_scheme:
            manager.pool_classes_by_scheme = _POOL_CLASSES
        return manager
