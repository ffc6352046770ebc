"""The child process of a :class:`~otel_bridge.producers.isolation.parent.ProducerProcess`: a producer whose HTTP
reads, decoding and window statistics run here, on this process' interpreter lock, instead of the trainer's.

A wing's ``child`` module (``python -m otel_bridge.producers.scrape.child``, ``...promql.child``) calls :func:`serve`
with how to build its producer; the channel is on stdin/stdout (:mod:`otel_bridge.producers.isolation.frames`).
Requests are ``(kind, id, payload)``: ``init`` builds the producer (``build(health=..., **options)``); ``start``
starts it and answers the producer's attributes the payload names; ``produce`` answers a window's metrics; ``close``
closes it; any other kind is one of :data:`REQUESTS`, called with the payload (posted, ``id`` -1: no answer) or with
no argument (answered). Every answer is ``("reply", id, ok, value, health_ops)``, carrying the health updates made
since the last answer (a failure's value is the error itself, or its type's ancestry and its text when it does
not pickle), and log records travel as ``("log", fields)``. The end of stdin (the parent closed it or died) closes
the producer and ends the process.

This process never outlives its parent, even while it is stopped or while a forked copy of the parent holds the
pipes: Linux SIGKILLs it when the parent's thread that started it ends (``PR_SET_PDEATHSIG``), and a watcher thread
ends it when its parent's pid is no longer the one the parent gave (``frames.PARENT_ENV``: the parent died before the
request took effect, or the platform has no such request).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

from otel_bridge.errors import ConfigError, OtelBridgeError
from otel_bridge.health import Health
from otel_bridge.producers.base import metrics_of
from otel_bridge.producers.isolation.frames import PARENT_ENV, FrameWriter, read_frame

_log = logging.getLogger(__name__)
_NICE = 10
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_PARENT_WATCH_S = 0.5

HealthOp = tuple[str, str, float, tuple[tuple[str, str], ...]]
"""``(count | set | forget, name, value, labels)``: one update of the child's health, replayed on the parent's."""

_RECORD_FIELDS = (
    "name",
    "levelno",
    "levelname",
    "pathname",
    "filename",
    "module",
    "lineno",
    "funcName",
    "created",
    "msecs",
    "relativeCreated",
    "thread",
    "threadName",
    "process",
    "processName",
)


class RelayedHealth(Health):
    """The child's :class:`Health`: every update is also kept, in order, for the next answer to carry."""

    def __init__(self) -> None:
        self._ops: list[HealthOp] = []
        self._ops_lock = threading.Lock()
        super().__init__()

    def count(self, name: str, amount: float = 1.0, labels: Mapping[str, str] | None = None) -> None:
        """Count, and keep the update for the parent."""
        super().count(name, amount, labels)
        self._keep("count", name, amount, labels)

    def set(self, name: str, value: float, labels: Mapping[str, str] | None = None) -> None:
        """Set, and keep the update for the parent."""
        super().set(name, value, labels)
        self._keep("set", name, value, labels)

    def forget(self, name: str, labels: Mapping[str, str]) -> None:
        """Forget, and keep the update for the parent."""
        super().forget(name, labels)
        self._keep("forget", name, 0.0, labels)

    def _keep(self, op: str, name: str, value: float, labels: Mapping[str, str] | None) -> None:
        with self._ops_lock:
            self._ops.append((op, name, value, tuple(sorted((labels or {}).items()))))

    def drain(self) -> list[HealthOp]:
        """The updates since the last call."""
        with self._ops_lock:
            ops, self._ops = self._ops, []
        return ops


class _RelayHandler(logging.Handler):
    """Sends this process' log records to the parent, which hands them to its own loggers of the same name."""

    def __init__(self, writer: FrameWriter) -> None:
        super().__init__()
        self._writer = writer

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields = {name: getattr(record, name, None) for name in _RECORD_FIELDS}
            fields["msg"] = record.getMessage()
            if record.exc_info:
                fields["exc_text"] = logging.Formatter().formatException(record.exc_info)
            self._writer.send(("log", fields))
        except Exception:  # noqa: BLE001 - logging's own contract: a failing handler reports, never raises
            self.handleError(record)


REQUESTS = frozenset({"on_boundary", "set_targets", "unanswered"})
"""The producer's methods a parent may name as a request's kind, beside ``init``, ``start``, ``produce``, ``close``."""


class _Child:
    def __init__(self, writer: FrameWriter, build: Callable[..., Any], what: str) -> None:
        self._writer = writer
        self._build = build
        self._what = what
        self._health = RelayedHealth()
        self._producer: Any = None
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="otel-bridge-child")

    def serve(self, channel: IO[bytes]) -> None:
        while (message := read_frame(channel)) is not None:
            kind, request, payload = message
            if kind == "init":
                self._answer(request, functools.partial(self._init, payload))
            elif self._producer is None:
                self._reply(request, False, (("SourceError",), f"{kind} before init"))
            elif request < 0:  # posted: in order, at once (a boundary's time must not wait behind a reading)
                self._posted(kind, payload)
            elif kind == "close":
                self._answer(request, self._producer.close)
                break
            else:
                self._pool.submit(self._answer, request, self._handler(self._producer, kind, payload))
        else:
            if self._producer is not None:
                self._producer.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _init(self, payload: dict[str, Any]) -> None:
        levels: dict[str, int] = payload["log_levels"]
        for name, level in levels.items():
            logging.getLogger(name or None).setLevel(level)
        self._producer = self._build(health=self._health, **payload["options"])

    def _posted(self, kind: str, payload: Any) -> None:
        if kind not in REQUESTS:
            _log.error("%s: unknown request %r", self._what, kind)
            return
        getattr(self._producer, kind)(payload)

    def _handler(self, producer: Any, kind: str, payload: Any) -> Callable[[], Any]:
        if kind == "start":

            def start() -> Any:
                producer.start()
                return {name: getattr(producer, name) for name in payload}

            return start
        if kind == "produce":
            window, timeout_millis = payload
            # the parent puts them in their scope
            return lambda: metrics_of(producer.produce(timeout_millis, window=window))
        if kind in REQUESTS:
            return getattr(producer, kind)  # type: ignore[no-any-return]
        raise ConfigError(f"unknown request {kind!r} to {self._what}")

    def _answer(self, request: int, work: Callable[[], Any]) -> None:
        try:
            value = work()
        except OtelBridgeError as exc:
            self._reply(request, False, _portable(exc))
        except Exception as exc:  # noqa: BLE001 - answered with its text; the parent raises a typed error
            _log.error("%s: unexpected %s", self._what, type(exc).__name__, exc_info=True)
            self._reply(request, False, ((), f"unexpected {type(exc).__name__}: {exc}"))
        else:
            self._reply(request, True, value)

    def _reply(self, request: int, ok: bool, value: Any) -> None:
        # OSError: the parent is gone (its end of the channel closed); the loop ends at its EOF
        with contextlib.suppress(OSError):
            self._writer.send(("reply", request, ok, value, self._health.drain()))


def _portable(exc: OtelBridgeError) -> OtelBridgeError | tuple[tuple[str, ...], str]:
    """``exc`` itself when it crosses the channel whole (the parent raises the same type with the same fields; a
    lower-level ``cause`` that does not pickle is left here, its text is in the message), else its type's ancestry
    and its text."""
    for attempt in range(2):
        try:
            pickle.loads(pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL))
        except Exception:  # noqa: BLE001 - a field or constructor that does not cross: without the cause, or names
            if attempt == 0 and exc.cause is not None:
                exc.cause = None
                continue
            break
        else:
            return exc
    return tuple(t.__name__ for t in type(exc).__mro__), str(exc)


def _die_with(parent: int, what: str) -> None:
    """End this process when ``parent`` does (see the module docstring)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            _log.warning("%s: prctl(PR_SET_PDEATHSIG) failed (errno %d)", what, ctypes.get_errno())
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(0)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_PARENT_WATCH_S)
        os._exit(0)  # nothing of this process is wanted once its parent is gone

    threading.Thread(target=watch, name="otel-bridge-parent-watch", daemon=True).start()


def serve(build: Callable[..., Any], what: str) -> None:
    """Serve the producer ``build(health=..., **options)`` makes over stdin/stdout until the parent closes the channel
    or dies (a wing's child module's ``main``; ``what`` names this process in its messages)."""
    _die_with(int(os.environ[PARENT_ENV]), what)
    # Ctrl-C in a terminal signals the whole foreground group: the parent decides when this process ends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Below the trainer in the scheduler's eyes: on a node short of cores, training comes first and a boundary's
    # reading comes later (boundary_lag_s says how much).
    os.nice(_NICE)
    channel_out = os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a stray print cannot corrupt the channel
    writer = FrameWriter(channel_out)
    root = logging.getLogger()
    root.handlers[:] = [_RelayHandler(writer)]
    _Child(writer, build, what).serve(sys.stdin.buffer)
    # The producer is closed: a reading still waiting on its source (a store trickling its answer) is not wanted, and
    # the interpreter's exit would wait for its thread.
    os._exit(0)
