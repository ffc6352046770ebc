"""Continuous simulated rollout traffic with an exact log of what was counted when.

:class:`Traffic` completes requests on a list of :class:`~otel_bridge.tools.simulation.vllm.VLLMSimulator` replicas from
one background thread, each replica at a steady-ish seeded-random pace (one request every ``min_gap_s``..``max_gap_s``,
``1..max_tokens`` generated tokens), right across step boundaries and while scrapes happen. Every completion is logged
as ``(t, replica, generation_tokens, 1 request)`` where ``t`` is ``time.time()`` read right after the simulator's
counters were incremented (under the driver's lock, so the log is in time order). A counter increment therefore happened
at or before its logged ``t``, at most a few microseconds earlier.

The truth of a window ``(start, end]`` is what was logged with ``start < t <= end``; :meth:`Traffic.truth` returns it,
:meth:`Traffic.near` counts the completions within a band around a time (the tolerances of a test are built from that).

The driver is bounded: it stops itself after ``max_completions`` completions or ``max_duration_s`` seconds
(:attr:`Traffic.exhausted` says so), and :meth:`Traffic.stop` (also on leaving the ``with`` block) joins the thread:
once it returns, nothing more is counted.

:meth:`Traffic.restart` restarts one replica's simulated process (counters back to zero, same port) while the others
keep going; before the restart that replica is held quiet for ``quiet_before_s``, so every observer (Prometheus, the
bridge's own scrapes) can see its last value. :meth:`Traffic.down` and :meth:`Traffic.up` are a real restart instead
(:class:`~otel_bridge.tools.simulation.vllm.VLLMServer`): the replica completes requests until its process ends, its
port refuses connections meanwhile, and the new process counts from zero: what the old process counted after an observer
last read it is lost to that observer (:meth:`Traffic.lost_before_down` tells how much). :meth:`Traffic.quiet` holds all
traffic around a moment (e.g. a step boundary) for tests that need exact sums over non-contiguous windows.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType

from otel_bridge.tools.simulation.vllm import VLLMSimulator


@dataclass(frozen=True, slots=True)
class Completion:
    """One finished request as the driver logged it."""

    t: float  # time.time() right after the simulator's counters were incremented
    replica: int
    tokens: int  # generation tokens
    requests: int = 1


@dataclass(frozen=True, slots=True)
class Counts:
    """Generated tokens and finished requests (= histogram observations) of some set of completions."""

    tokens: int = 0
    requests: int = 0

    def __add__(self, other: Counts) -> Counts:
        return Counts(self.tokens + other.tokens, self.requests + other.requests)

    def __sub__(self, other: Counts) -> Counts:
        return Counts(self.tokens - other.tokens, self.requests - other.requests)

    def get(self, field: str) -> int:
        """``tokens`` or ``requests`` by name."""
        value: int = getattr(self, field)
        return value


@dataclass(frozen=True, slots=True)
class Restart:
    """A simulated process restart of one replica."""

    t: float  # time.time() right after the simulator's counters were reset
    replica: int


@dataclass(frozen=True, slots=True)
class Outage:
    """A replica's process ended at ``down`` (its last completion was logged before it)."""

    down: float
    replica: int


class Traffic:
    """Drives requests on ``sims`` from a background thread and logs each completion (see the module docstring)."""

    def __init__(
        self,
        sims: Sequence[VLLMSimulator],
        *,
        seed: int = 0,
        min_gap_s: float = 0.01,
        max_gap_s: float = 0.04,
        max_tokens: int = 50,
        start_delay_s: float = 0.0,
        max_completions: int = 50_000,
        max_duration_s: float = 120.0,
        finished_reason: str = "stop",
    ) -> None:
        if not sims:
            raise ValueError("Traffic needs at least one replica")
        if not 0 < min_gap_s <= max_gap_s:
            raise ValueError(f"need 0 < min_gap_s <= max_gap_s, got {min_gap_s}, {max_gap_s}")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        self._sims = list(sims)
        self._rngs = [random.Random(seed * 1000 + i) for i in range(len(self._sims))]
        self._min_gap_s, self._max_gap_s = min_gap_s, max_gap_s
        self._max_tokens = max_tokens
        self._start_delay_s = start_delay_s
        self._max_completions = max_completions
        self._max_duration_s = max_duration_s
        self._finished_reason = finished_reason
        self._lock = threading.Lock()  # held while a request is counted and logged
        self._log: list[Completion] = []
        self._restarts: list[Restart] = []
        self._outages: list[Outage] = []
        self._baseline: list[dict[str, float]] = []
        self._quiet = 0  # > 0: no replica completes requests
        self._paused = [False] * len(self._sims)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started_at: float | None = None
        self.exhausted = False  # stopped itself on max_completions / max_duration_s

    # -- running --------------------------------------------------------------------------------------------------

    def start(self) -> Traffic:
        """Start the background thread; the first request completes after ``start_delay_s`` + one gap."""
        if self._thread is not None:
            raise RuntimeError("Traffic is already started")
        with self._lock:
            self._baseline = [sim.totals() for sim in self._sims]
        self._started_at = time.time()
        self._thread = threading.Thread(target=self._run, name="test-traffic", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop and join the thread: once this returns nothing more is counted. Idempotent."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout_s)
            if thread.is_alive():
                raise RuntimeError(f"the traffic thread did not stop within {timeout_s}s")

    @property
    def running(self) -> bool:
        """Whether the thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> Traffic:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _gap(self, index: int) -> float:
        return self._rngs[index].uniform(self._min_gap_s, self._max_gap_s)

    def _run(self) -> None:
        began = time.monotonic()
        first = began + self._start_delay_s
        next_at = [first + self._gap(i) for i in range(len(self._sims))]
        while True:
            index = min(range(len(next_at)), key=next_at.__getitem__)
            if self._stop.wait(max(0.0, next_at[index] - time.monotonic())):
                return
            now = time.monotonic()
            if now - began > self._max_duration_s or len(self._log) >= self._max_completions:
                self.exhausted = True
                return
            next_at[index] = now + self._gap(index)
            self._complete(index)

    def _complete(self, index: int) -> None:
        rng = self._rngs[index]
        tokens = rng.randint(1, self._max_tokens)
        prompt = rng.randint(8, 64)
        queue_s = rng.uniform(0.0005, 0.005)
        ttft_s = queue_s + rng.uniform(0.005, 0.1)
        itl_s = rng.uniform(0.005, 0.03)
        with self._lock:
            if self._quiet or self._paused[index] or self._stop.is_set():
                return  # this request finishes later: the next one is scheduled as usual
            self._sims[index].complete_request(
                prompt_tokens=prompt,
                generation_tokens=tokens,
                ttft_s=ttft_s,
                e2e_s=ttft_s + itl_s * (tokens - 1) + 0.001,
                queue_s=queue_s,
                itl_s=itl_s,
                finished_reason=self._finished_reason,
            )
            self._log.append(Completion(time.time(), index, tokens))

    # -- interventions ------------------------------------------------------------------------------------------------

    def restart(self, index: int, quiet_before_s: float = 0.0) -> float:
        """Restart replica ``index``'s simulated process mid-traffic (the others keep going); returns its time.

        The replica completes nothing during the ``quiet_before_s`` before the restart (use more than the slowest
        observer's sampling interval), then resumes from zero. Blocks the caller for ``quiet_before_s``.
        """
        with self._lock:  # waits for a request being counted right now
            self._paused[index] = True
        try:
            time.sleep(quiet_before_s)
            with self._lock:
                self._sims[index].restart()
                restart = Restart(time.time(), index)
                self._restarts.append(restart)
        finally:
            with self._lock:
                self._paused[index] = False
        return restart.t

    def down(self, index: int, go_down: Callable[[], float]) -> float:
        """Replica ``index``'s process ends now, in the middle of its traffic: ``go_down`` (e.g.
        :meth:`VLLMServer.go_down`) closes its port; no completion is logged on it until :meth:`up`.

        Returns the time it ended."""
        with self._lock:  # waits for a request being counted right now
            self._paused[index] = True
            t = go_down()
            self._outages.append(Outage(t, index))
        return t

    def up(self, index: int, come_up: Callable[[], float]) -> float:
        """Replica ``index`` serves again as a new process (``come_up``, e.g. :meth:`VLLMServer.come_up`: counters from
        zero) and completes requests again. Returns the restart's time."""
        with self._lock:
            come_up()
            restart = Restart(time.time(), index)
            self._restarts.append(restart)
            self._paused[index] = False
        return restart.t

    @property
    def outages(self) -> list[Outage]:
        """The process ends done through :meth:`down`, in order."""
        with self._lock:
            return list(self._outages)

    def lost_before_down(self, replica: int, last_read: float) -> Counts:
        """What replica ``replica`` completed after ``last_read`` (an observer's last reading of it) and before its
        process ended at its next :meth:`down`: lost to that observer."""
        down = min((o.down for o in self.outages if o.replica == replica and o.down > last_read), default=None)
        if down is None:
            return Counts()
        return self._truth(last_read, down, replica)

    def counted_through(self, replica: int, requests: float, tokens: float) -> float | None:
        """The log time of the last completion a ``/metrics`` page of replica ``replica``'s first process counted, from
        the totals the page showed (``vllm:request_success_total``, ``vllm:generation_tokens_total``): ``-inf`` when
        it counted none of this driver's, ``None`` when no prefix of the replica's log (after what it held when the
        driver started) adds up to both.

        Exact, with no timing in it: the driver counts and logs each completion under one lock, in one order, so a
        page holds a prefix of its replica's log, and what the replica completed after that prefix (logged later) is
        what the page left out."""
        base = self._baseline[replica] if self._baseline else {}
        want = Counts(
            round(tokens - base.get("vllm:generation_tokens_total", 0.0)),
            round(requests - base.get("vllm:request_success_total", 0.0)),
        )
        first_restart = min((r.t for r in self.restarts if r.replica == replica), default=float("inf"))
        counted, through = Counts(), float("-inf")
        for c in self.completions():
            if counted.requests >= want.requests or c.t > first_restart:
                break
            if c.replica == replica:
                counted, through = counted + Counts(c.tokens, c.requests), c.t
        return through if counted == want else None

    @contextmanager
    def quiet(self, after_s: float = 0.0) -> Iterator[None]:
        """No replica completes a request from entering this block until ``after_s`` after leaving it.

        On entry it waits for a request being counted right now, so every completion logged so far happened before
        anything done inside the block. Leaving the block sleeps ``after_s`` in the caller.
        """
        with self._lock:
            self._quiet += 1
        try:
            yield
        finally:
            if after_s > 0:
                time.sleep(after_s)
            with self._lock:
                self._quiet -= 1

    # -- the truth ---------------------------------------------------------------------------------------------------

    def completions(self) -> list[Completion]:
        """Every completion so far, in time order."""
        with self._lock:
            return list(self._log)

    @property
    def restarts(self) -> list[Restart]:
        """The restarts done through :meth:`restart`, in order."""
        with self._lock:
            return list(self._restarts)

    def truth(self, start: float, end: float) -> Counts:
        """Tokens and requests completed with ``start < t <= end``."""
        return self._truth(start, end)

    def replica_truth(self, replica: int, start: float, end: float) -> Counts:
        """What replica ``replica`` completed with ``start < t <= end``."""
        return self._truth(start, end, replica)

    def _truth(self, start: float, end: float, replica: int | None = None) -> Counts:
        tokens = requests = 0
        for c in self.completions():
            if start < c.t <= end and (replica is None or c.replica == replica):
                tokens += c.tokens
                requests += c.requests
        return Counts(tokens, requests)

    def near(self, t: float, before_s: float, after_s: float) -> Counts:
        """What completed within the band ``(t - before_s, t + after_s]`` around ``t`` (for tolerances)."""
        return self.truth(t - before_s, t + after_s)

    def total(self) -> Counts:
        """Everything this driver completed."""
        return self.truth(float("-inf"), float("inf"))

    def check_simulators(self) -> None:
        """Assert the simulators' counters agree with the log (call after :meth:`stop`).

        Each replica's ``vllm:generation_tokens_total`` and ``vllm:request_success_total`` must equal what was there
        when the driver started (zero after a restart) plus what the log says it completed since its last restart.
        """
        if self.running:
            raise RuntimeError("check_simulators() needs the traffic stopped")
        log, restarts = self.completions(), self.restarts
        for index, sim in enumerate(self._sims):
            last_restart = max((r.t for r in restarts if r.replica == index), default=None)
            base = self._baseline[index] if self._baseline and last_restart is None else {}
            since = [c for c in log if c.replica == index and (last_restart is None or c.t > last_restart)]
            totals = sim.totals()
            for name, expected in (
                (
                    "vllm:generation_tokens_total",
                    base.get("vllm:generation_tokens_total", 0.0) + sum(c.tokens for c in since),
                ),
                ("vllm:request_success_total", base.get("vllm:request_success_total", 0.0) + len(since)),
            ):
                assert totals.get(name, 0.0) == expected, (index, name, totals.get(name), expected)
