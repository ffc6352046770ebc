"""ProducerProcess: a producer whose work runs in a child process, off the trainer's interpreter lock.

A producer's HTTP reads, decoding and window statistics grow with what its sources answer: the scrape path's with the
targets' pages, the PromQL path's with the store's answers (up to the ``prometheus`` caps a user may raise). In the
trainer's process that work holds the interpreter lock beside the training loop and allocates what the trainer's
garbage collections then walk: with 64 vLLM endpoints the training thread's p99 step time was 46x its median, and a
Prometheus answer of one million series held it 4.3-4.5 s at a step boundary. Here the producer runs in a child
(:mod:`otel_bridge.producers.isolation.child`, started as the wing's own ``child`` module) and the trainer's process
only sends boundary times and receives each window's statistics, so its cost per step is in proportion to the
configured metrics, not to the targets or the answers.

The records are the same as the in-process producer's; the child's log records go to this process' loggers of the
same names and its health updates to this process' :class:`Health`. A child that dies is reported (an error logged
once, each later step's infrastructure marked missing), never silent.

The child never outlives this process: it is started by the thread that reads its answers (which lives exactly as long
as the child is wanted) and asks Linux to SIGKILL it when that thread ends (``PR_SET_PDEATHSIG``: a stopped child is
killed too, and a forked worker holding copies of the pipes keeps nothing alive); it also watches its parent's pid.
A copy of this object in a forked process (a data-loader worker) cannot reach the child: at the fork its ends of the
pipes are pointed at ``/dev/null`` and every call there answers as if the child were gone. :meth:`ProducerProcess.close`
kills, by its pid, a child that does not answer.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import queue
import subprocess
import sys
import threading
import weakref
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics.export import ScopeMetrics

from otel_bridge.errors import ConfigError, PrometheusError, ScrapeError, SourceError
from otel_bridge.health import Health
from otel_bridge.producers.base import infra_scope
from otel_bridge.producers.isolation.frames import PARENT_ENV, FrameWriter, read_frame
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.window import StepWindow

_log = logging.getLogger(__name__)
ANSWER_MARGIN_S = 10.0
"""Beyond the child's own deadline for a request: its start-up, a loaded machine."""
_EXIT_WAIT_S = 5.0
_RAISED: tuple[type[SourceError | ConfigError], ...] = (ConfigError, PrometheusError, ScrapeError, SourceError)
"""The errors a child's answer is raised as here, by the most specific name in its type's ancestry."""


@dataclass(frozen=True)
class ChildKind:
    """Which producer a child runs and how this process speaks of it.

    ``module``: the wing's child module (``python -m`` runs it; it serves its producer through
    :func:`otel_bridge.producers.isolation.child.serve`); ``what``: its name in messages ("the scrape process");
    ``path``: what goes missing when it dies ("the scrape path"); ``error``: the error a failure to answer raises.
    """

    module: str
    what: str
    path: str
    error: type[SourceError]


class ProducerProcess:
    """A producer in a child process (see the module docstring): the channel, the child's lifetime, its logs and
    health, and the requests. A wing's face (:class:`~otel_bridge.producers.scrape.ScrapeProcess`,
    :class:`~otel_bridge.producers.promql.PromQLProcess`) says which requests it makes.

    ``options`` are the child's producer's arguments (picklable); ``health`` is this process' :class:`Health`, kept
    current from the child's. The child is started here and builds its producer meanwhile, without this call waiting
    for it (the child's interpreter takes a moment to start, which a bridge's start-up under ``startup: degrade`` must
    not spend outside its time box): the build's errors raise from the first request that needs the producer
    (:meth:`ready`; a wing's ``start()``), and from every later one.
    """

    def __init__(
        self, kind: ChildKind, options: dict[str, Any], *, health: Health | None = None, start_timeout_s: float = 60.0
    ) -> None:
        self._kind = kind
        self._health = health or Health()
        self._requests = itertools.count()
        self._pending: dict[int, Future[Any]] = {}
        self._lock = threading.Lock()
        self._gone: str | None = None  # why the child cannot answer any more
        self._closing = False
        self._outbox: queue.SimpleQueue[tuple[str, int, Any] | None] = queue.SimpleQueue()
        self._queued = 0  # messages in the outbox not yet written: a direct write must wait its turn behind them
        self._order = threading.Lock()
        self._forked = False
        started: Future[subprocess.Popen[bytes]] = Future()
        requests, self._requests_fd = os.pipe()
        try:
            self._reader = threading.Thread(
                target=self._keep, args=(requests, started), name=f"otel-bridge-{kind.what}-replies", daemon=True
            )
            self._reader.start()
            started.result()  # the reader started the child (see _keep) or failed to
        except BaseException:
            os.close(self._requests_fd)
            raise
        finally:
            os.close(requests)
        assert self._process.stdout is not None
        self._writer = FrameWriter(self._requests_fd)
        _LIVE.add(self)
        self._sender = threading.Thread(target=self._send, name=f"otel-bridge-{kind.what}-requests", daemon=True)
        self._sender.start()
        levels = {"": logging.getLogger().getEffectiveLevel(), "otel_bridge": _log.getEffectiveLevel()}
        self._start_timeout_s = start_timeout_s
        self._init = self._submit("init", {"log_levels": levels, "options": options})

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self._process.pid

    def ready(self) -> None:
        """Wait until the child has built its producer (at most the start-up timeout); its build's error raises here,
        now and at every later call."""
        self._result("init", *self._init, self._start_timeout_s)

    def call(self, kind: str, payload: Any, timeout_s: float) -> Any:
        """The child's answer to request ``kind`` (once its producer is built: :meth:`ready`): its error raised here
        (the same error; one that does not pickle as the nearest of :data:`_RAISED`), the kind's ``error`` when it is
        gone or does not answer in ``timeout_s``."""
        if kind != "close":
            self.ready()
        return self._result(kind, *self._submit(kind, payload), timeout_s)

    def _submit(self, kind: str, payload: Any) -> tuple[int, Future[Any]]:
        """Send request ``kind``; its answer comes to the returned future (:meth:`_result`)."""
        future: Future[Any] = Future()
        with self._lock:
            if self._gone is not None:
                raise self._kind.error(self._gone)
            request = next(self._requests)
            self._pending[request] = future
        # This thread may wait for room in the pipe. OSError: the child is gone, the reader fails the future with why.
        with contextlib.suppress(OSError):
            self._writer.send((kind, request, payload))
        return request, future

    def _result(self, kind: str, request: int, future: Future[Any], timeout_s: float) -> Any:
        """The answer to request ``kind`` (see :meth:`call`)."""
        try:
            ok, value = future.result(timeout=timeout_s)
        except FutureTimeout:
            raise self._kind.error(
                f"{self._kind.what} (pid {self._process.pid}) did not answer {kind} within {timeout_s:.0f}s"
            ) from None
        finally:
            if future.done() or kind != "init":  # the build's answer stays awaited for the next ready()
                with self._lock:
                    self._pending.pop(request, None)
        if ok:
            return value
        if isinstance(value, BaseException):
            raise value from None  # one traceback, as in the child: its lower-level errors stay as its ``cause``
        ancestry, message = value
        raised = next((e for name in ancestry for e in _RAISED if e.__name__ == name), self._kind.error)
        raise raised(message)

    def post(self, kind: str, payload: Any) -> None:
        """Send request ``kind`` without an answer and without ever waiting: written at once when the pipe has room
        and nothing queued earlier is still unwritten (a boundary reaches the child in microseconds, with no other
        thread to wake), otherwise queued for the sender thread. Requests reach the child in the order they were
        posted; none from a forked copy."""
        if self._forked:
            return
        message = (kind, -1, payload)
        with self._order:
            if self._queued == 0:
                try:
                    if self._writer.try_send(message):
                        return
                except OSError:  # the child is gone; the reader reports it
                    return
            self._queued += 1
            self._outbox.put(message)

    def close(self) -> None:
        """Close the child's producer, then end the child: killed, by its pid, when it does not answer (stopped,
        hung) or has not exited in time. A forked copy does nothing: the child is the parent's."""
        if self._forked:
            return
        with self._lock:
            self._closing = True
        answered = self._gone is not None
        if not answered:
            try:
                self.call("close", None, ANSWER_MARGIN_S + 10.0)
                answered = True
            except SourceError as exc:
                _log.warning("closing %s (pid %d): %s; killing it", self._kind.what, self._process.pid, exc)
        if not answered:
            self._process.kill()  # SIGKILL ends a stopped process too
        self._outbox.put(None)
        self._sender.join(timeout=_EXIT_WAIT_S)
        try:
            self._process.wait(timeout=_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            _log.warning("%s (pid %d) did not exit; killing it", self._kind.what, self._process.pid)
            self._process.kill()
            self._process.wait()
        self._reader.join(timeout=_EXIT_WAIT_S)
        _LIVE.discard(self)  # a later fork has nothing of it to forsake: its pipes close here
        assert self._process.stdout is not None
        self._process.stdout.close()

    def _after_fork_in_child(self) -> None:
        """In a forked copy of this process: point this copy's ends of the pipes at ``/dev/null`` (the child sees
        nothing from here, and the pipes close when the parent's ends do) and answer every later call as if the
        child were gone. No lock is taken: another thread of the parent may have held one at the fork."""
        self._forked = True
        self._gone = (
            f"this is a forked copy of the trainer's process (a data-loader worker?): {self._kind.what} belongs to "
            "the parent"
        )
        self._lock, self._order = threading.Lock(), threading.Lock()
        self._pending = {}
        null = os.open(os.devnull, os.O_RDWR)
        try:
            assert self._process.stdout is not None
            for fd in (self._requests_fd, self._process.stdout.fileno()):
                os.dup2(null, fd, inheritable=False)
        finally:
            os.close(null)
        self._writer.abandon()

    def _send(self) -> None:
        while (message := self._outbox.get()) is not None:
            with contextlib.suppress(OSError):  # the child is gone; the reader reports it
                self._writer.send(message)
            with self._order:
                self._queued -= 1
        with contextlib.suppress(OSError):
            self._writer.close()

    def _keep(self, requests: int, started: Future[subprocess.Popen[bytes]]) -> None:
        """Start the child (from this thread: its ``PR_SET_PDEATHSIG`` fires when this thread ends), then read its
        answers until it exits."""
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", self._kind.module],
                stdin=requests,
                stdout=subprocess.PIPE,
                env=_child_environment(),
            )
        except BaseException as exc:  # noqa: BLE001 - handed to __init__, which raises it
            started.set_exception(exc)
            return
        self._process = process
        started.set_result(process)
        assert process.stdout is not None
        self._read(process.stdout)

    def _read(self, channel: Any) -> None:
        while (message := read_frame(channel)) is not None:
            if message[0] == "log":
                _relay_log(message[1])
                continue
            _, request, ok, value, ops = message
            for op, name, amount, labels in ops:
                if op == "count":
                    self._health.count(name, amount, dict(labels))
                elif op == "set":
                    self._health.set(name, amount, dict(labels))
                else:
                    self._health.forget(name, dict(labels))
            with self._lock:
                future = self._pending.get(request)
            if future is not None and not future.done():
                future.set_result((ok, value))
        self._ended()

    def _ended(self) -> None:
        try:
            code: int | None = self._process.wait(timeout=_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            code = None
        gone = (
            f"{self._kind.what} (pid {self._process.pid}) exited (code {code}): {self._kind.path}'s metrics are "
            "missing from here on; its standard error says why"
        )
        with self._lock:
            self._gone = gone
            pending = list(self._pending.values())
            closing = self._closing
        if not closing:
            _log.error("%s", gone)
        for future in pending:
            if not future.done():
                future.set_result((False, ((self._kind.error.__name__,), gone)))


_LIVE: weakref.WeakSet[ProducerProcess] = weakref.WeakSet()


def _forsake_children() -> None:
    for process in list(_LIVE):
        process._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forsake_children)


def _relay_log(fields: dict[str, Any]) -> None:
    logger = logging.getLogger(fields["name"])
    if logger.isEnabledFor(fields["levelno"]):
        logger.handle(logging.makeLogRecord(fields))


def _child_environment() -> dict[str, str]:
    """This process' environment, with this package importable (wherever it was imported from) and the OTel SDK off
    in the child: it builds no provider, and auto-instrumentation must not start one there."""
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[__name__.count(".")])  # the folder holding otel_bridge/
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    env["OTEL_SDK_DISABLED"] = "true"
    env[PARENT_ENV] = str(os.getpid())
    return env


class IsolatedProducer:
    """What a wing's producer in a child process does the same on both wings: its queries, boundaries, windows and
    end; a wing's subclass says what the child is (``kind``), what its producer is built with (``options``) and what
    it learns at start-up (:meth:`_start`).

    ``produce_timeout_s``: the longest a request to the child (its start-up, one window) may take, beyond the child's
    own deadline, before it is given up."""

    def __init__(
        self,
        kind: ChildKind,
        queries: Sequence[MetricQuery],
        options: dict[str, Any],
        *,
        health: Health | None,
        produce_timeout_s: float,
        start_timeout_s: float,
    ) -> None:
        self._queries = list(queries)
        self._produce_timeout_s = produce_timeout_s
        arguments = {"queries": self._queries, "produce_timeout_s": produce_timeout_s, **options}
        self._child = ProducerProcess(kind, arguments, health=health, start_timeout_s=start_timeout_s)

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self._child.pid

    @property
    def queries(self) -> list[MetricQuery]:
        """The resolved queries (types filled in after :meth:`start`)."""
        return list(self._queries)

    def _start(self, names: Sequence[str]) -> dict[str, Any]:
        """Start the child's producer (its start-up errors raise here, of the same types) and answer its attributes
        ``names`` and ``queries``."""
        started: dict[str, Any] = self._child.call(
            "start", ["queries", *names], self._produce_timeout_s + ANSWER_MARGIN_S
        )
        self._queries = list(started["queries"])
        return started

    def on_boundary(self, t: float) -> None:
        """Tell the child about a boundary at ``t`` (never blocks, whatever the child does)."""
        self._child.post("on_boundary", t)

    def produce(self, timeout_millis: float = 10_000, *, window: StepWindow) -> list[ScopeMetrics]:
        """The child's statistics for ``window`` (its errors raised here, of the same types).

        The child sends the metrics alone (an ``InstrumentationScope`` does not pickle); they get their scope here."""
        payload = (window, timeout_millis)  # the child keeps to the caller's deadline too
        return infra_scope(self._child.call("produce", payload, self._produce_timeout_s + ANSWER_MARGIN_S))

    def close(self) -> None:
        """Close the child's producer and end the child (:meth:`ProducerProcess.close`)."""
        self._child.close()
