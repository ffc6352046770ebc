"""Requests to a real vLLM server, logged with what its OpenAI answers say they cost: the ground truth of its counters.

:class:`Requests` sends completions (``/v1/completions``, ``max_tokens`` drawn from a seeded random, ``ignore_eos`` so
the random model runs to it) from ``clients`` threads, each one request at a time, and logs every answered one as
:class:`Answered`: when it was sent and answered (``time.time()``) and its ``usage`` (``prompt_tokens``,
``completion_tokens``). A request that fails is counted in :attr:`Requests.failures`, never logged.

vLLM counts a request's tokens while it runs (prompt tokens at its prefill, generated tokens at every engine step) and
the request itself when it finishes, all of it between the moment it was sent and shortly after its answer was read
(the counters are updated in the loop that hands the outputs to the HTTP handlers: ``BAND_S``). So a window
``(start, end]`` read at its boundaries holds at least the requests wholly inside it and at most the ones that overlap
it: :meth:`Requests.bounds`, widened by how far the readings may lie from the boundaries.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Self

import requests

__all__ = ["BAND_S", "Answered", "Requests", "Usage"]

#: A request's counters are updated at most this long after its answer is read (the handler and the engine's output
#: loop share the API server's event loop, on a loaded 2-core machine).
BAND_S = 0.3
PROMPTS = (
    "one two three",
    "the trainer counts tokens",
    "a step begins and ends and the bridge reads what happened in between",
    "prometheus scrapes every target",
)


@dataclass(frozen=True, slots=True)
class Usage:
    """Generated tokens, prompt tokens and finished requests of some set of requests."""

    tokens: int = 0
    prompt_tokens: int = 0
    requests: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.tokens + other.tokens, self.prompt_tokens + other.prompt_tokens, self.requests + other.requests
        )

    def get(self, field: str) -> int:
        """A field by name."""
        value: int = getattr(self, field)
        return value


@dataclass(frozen=True, slots=True)
class Answered:
    """One request and its answer's ``usage``."""

    sent: float
    answered: float
    prompt_tokens: int
    completion_tokens: int

    @property
    def usage(self) -> Usage:
        return Usage(self.completion_tokens, self.prompt_tokens, 1)


class Requests:
    """Completions to ``url`` from ``clients`` threads, logged (see the module docstring); :meth:`stop` waits for the
    requests in flight."""

    def __init__(
        self, url: str, model: str, *, clients: int = 2, max_tokens: int = 12, seed: int = 0, timeout_s: float = 30.0
    ) -> None:
        self.url = url
        self._model = model
        self._clients = clients
        self._max_tokens = max_tokens
        self._seed = seed
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._log: list[Answered] = []
        self.failures: list[str] = []
        self._open = threading.Event()  # set: the clients send
        self._idle = threading.Condition(self._lock)  # notified when a request ends
        self._in_flight = 0
        self._stopping = False
        self._threads: list[threading.Thread] = []

    def start(self) -> Self:
        """Start the clients (they send at once)."""
        self._open.set()
        for index in range(self._clients):
            thread = threading.Thread(target=self._client, args=(index,), name=f"vllm-requests-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def pause(self) -> None:
        """No new request is sent until :meth:`resume`; returns once none is in flight."""
        self._open.clear()
        with self._idle:
            self._idle.wait_for(lambda: self._in_flight == 0, timeout=self._timeout_s + 5)

    def resume(self, url: str | None = None) -> None:
        """Send again (to ``url``: a server that replaced the first)."""
        if url is not None:
            self.url = url
        self._open.set()

    @contextmanager
    def paused(self) -> Iterator[None]:
        self.pause()
        try:
            yield
        finally:
            self.resume()

    def stop(self) -> None:
        """Stop sending and wait for the requests in flight; nothing is logged afterwards."""
        self._stopping = True
        self._open.set()
        for thread in self._threads:
            thread.join(timeout=self._timeout_s + 5)

    def wait_for_answer(self, after: float) -> None:
        """Block until a request is answered after ``after`` (``time.time()``; fails after ``timeout_s``)."""
        with self._idle:
            if not self._idle.wait_for(lambda: any(a.answered > after for a in self._log), timeout=self._timeout_s):
                raise AssertionError(f"no request was answered after {after:.3f} within {self._timeout_s} s")

    @property
    def log(self) -> list[Answered]:
        with self._lock:
            return list(self._log)

    def total(self) -> Usage:
        """Everything answered."""
        return sum((a.usage for a in self.log), Usage())

    def answered_between(self, start: float, end: float) -> int:
        """How many requests were answered in ``(start, end]``."""
        return sum(start < a.answered <= end for a in self.log)

    def bounds(
        self, start: tuple[float, float], end: tuple[float, float], band_s: float = BAND_S
    ) -> tuple[Usage, Usage]:
        """``(least, most)`` a window can hold whose start was read at some time in ``start`` (earliest, latest) and
        its end in ``end``: least, the requests counted wholly after the latest start and before the earliest end;
        most, those counted in part between the earliest start and the latest end (a request is counted between its
        sending and ``band_s`` after its answer)."""
        least, most = Usage(), Usage()
        for a in self.log:
            first, last = a.sent, a.answered + band_s
            if first >= start[1] and last <= end[0]:
                least += a.usage
            if last > start[0] and first < end[1]:
                most += a.usage
        return least, most

    def _client(self, index: int) -> None:
        rng = random.Random(self._seed * 1000 + index)
        while True:
            self._open.wait()
            with self._lock:
                if self._stopping:
                    return
                if not self._open.is_set():  # paused between the wait and here
                    continue
                self._in_flight += 1
            try:
                self._send(rng)
            finally:
                with self._idle:
                    self._in_flight -= 1
                    self._idle.notify_all()

    def _send(self, rng: random.Random) -> None:
        """One request on a connection of its own (none outlives a server that is killed and replaced)."""
        body = {
            "model": self._model,
            "prompt": rng.choice(PROMPTS),
            "max_tokens": rng.randint(1, self._max_tokens),
            "ignore_eos": True,
            "temperature": 1.0,
        }
        sent = time.time()
        try:
            response = requests.post(f"{self.url}/v1/completions", json=body, timeout=self._timeout_s)
            answered = time.time()
            response.raise_for_status()
            usage = response.json()["usage"]
        except (requests.RequestException, ValueError, KeyError) as error:
            with self._lock:
                self.failures.append(f"{sent:.3f}: {error!r}")
            return
        with self._idle:
            self._log.append(Answered(sent, answered, int(usage["prompt_tokens"]), int(usage["completion_tokens"])))
            self._idle.notify_all()
