"""A store answering a step's query with as many series as asked (issue 40), and a training loop that measures what
its thread pays at each call while the bridge reads those answers: shared by tests/faults/test_large_promql_answers.py
(the contract bound) and bench/suite_large_answers.py (the figures).

:class:`LargeStore` is a Prometheus-compatible store on loopback (:class:`ScriptedHTTPServer`): start-up answers
are empty, the window's union (a query naming ``otel_bridge_q``) is answered with ``series`` series of the gauge's
query (read ``by: [pod]``: a label with as many values as a large cluster has), one per pod, each at
:data:`VALUE`; the answer's bytes are built once per size and kept.
:func:`busy_training` runs steps whose training thread stays busy (call after call) while each step's record is read.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from otel_bridge import Bridge
from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer, json_response, prom_success

GAUGE = "vllm:num_requests_running"
KEY = "rollout/vllm/num_requests_running/max/pod.p0000000"
"""The first pod's key: the metric is read ``by: [pod]``, its groups beyond ``max_groups`` folded in the reduction."""
DROPPED = "otel_bridge/groups_dropped/metric.vllm_num_requests_running"
METRICS = [{"name": GAUGE, "type": "gauge", "stats": ["max"], "by": ["pod"]}]
UNAGGREGATED = [{"name": GAUGE, "type": "gauge", "stats": ["max"]}]
"""The same gauge read without ``by``: one value a step, which the store answers with a series per pod instead."""
ANSWER_ERRORS = "otel_bridge/answer_errors/metric.vllm_num_requests_running"
VALUE = 3.0
RAISED_CAPS = {"max_series": 2_000_000, "max_samples": 3_000_000, "max_response_bytes": 200_000_000}
"""The ``prometheus`` caps a user with a large cluster raises to (the largest the issue's figures used)."""


@functools.cache
def many_series(series: int) -> bytes:
    """A vector answer with ``series`` series of the gauge's query (see the module docstring)."""
    head = b'{"status":"success","data":{"resultType":"vector","result":['
    one = b'{"metric":{"otel_bridge_q":"0/max","pod":"p%07d"},"value":[1717171717.123,"%d"]}'
    return head + b",".join(one % (i, VALUE) for i in range(series)) + b"]}}"


class LargeStore:
    """The store (see the module docstring); ``asked`` is set when a window's union has been asked."""

    def __init__(self, series: int) -> None:
        self.answer = many_series(series)
        self.asked = threading.Event()
        self.server = ScriptedHTTPServer(self._answer)

    def _answer(self, request: RecordedRequest) -> Response:
        if request.path.endswith("/targets"):
            return json_response({"status": "success", "data": {"activeTargets": [], "droppedTargets": []}})
        if request.path.endswith("/buildinfo"):
            return prom_success({"version": "2.42.0", "revision": "", "branch": "", "goVersion": "go1.19"})
        query = request.param("query") or ""
        if query == "time()":  # the store's clock, as Prometheus answers it
            now = time.time()
            return prom_success({"resultType": "scalar", "result": [now, repr(now)]})
        if "otel_bridge_q" not in query or "unless count_over_time" in query:
            return prom_success({"resultType": "vector", "result": []})
        self.asked.set()
        return Response(body=self.answer, headers={"Content-Type": "application/json"})

    def shrink(self) -> None:
        """Answer one series from now on (the run's last window, read at close, costs nothing to measure)."""
        self.answer = many_series(1)

    def close(self) -> None:
        """Stop serving."""
        self.server.close()


@dataclass
class CallTimes:
    """The training thread's time in each bridge call: exact worst, and a histogram in whole microseconds (bounded
    memory however many calls)."""

    worst_s: float = 0.0
    calls: int = 0
    micros: Counter[int] = field(default_factory=Counter)

    def timed(self, call: Callable[..., Any], *args: Any) -> None:
        """``call(*args)``, its duration on this thread counted."""
        began = time.perf_counter()
        call(*args)
        took = time.perf_counter() - began
        self.worst_s = max(self.worst_s, took)
        self.calls += 1
        self.micros[int(took * 1e6)] += 1

    def quantile_s(self, q: float) -> float:
        """The ``q`` quantile (nearest rank, to the microsecond)."""
        rank = max(1, int(q * self.calls + 0.999999))
        seen = 0
        for micros in sorted(self.micros):
            seen += self.micros[micros]
            if seen >= rank:
                return micros / 1e6
        return self.worst_s


def busy_training(bridge: Bridge, store: LargeStore, steps: int, *, collect_timeout_s: float = 600) -> CallTimes:
    """``steps`` steps (0 .. steps-1, then step ``steps`` is begun and ended): each step logs and ends, the next one
    begins (which hands the step's window to the worker) and trains while the worker reads it, its thread busy, call
    after call (``log``, as a training loop computes), until the step's record has been delivered; then the store
    shrinks (:meth:`LargeStore.shrink`). A thread holding the interpreter lock for long (an answer's JSON decode) takes
    it from the trainer inside one of these calls: the training loop would stall there. Every call's time on this
    thread is counted."""
    times = CallTimes()
    times.timed(bridge.begin_step, 0)
    for step in range(steps):
        store.asked.clear()
        times.timed(bridge.log, {"actor/loss": float(step)}, step)
        times.timed(bridge.end_step, step)
        times.timed(bridge.begin_step, step + 1)
        delivered = threading.Event()
        waiter = threading.Thread(target=lambda s=step, d=delivered: (bridge.collect(s, collect_timeout_s), d.set()))
        waiter.start()
        while not delivered.is_set():
            times.timed(bridge.log, {"actor/busy": 1.0}, step + 1)
        waiter.join()
        if not store.asked.is_set():
            raise AssertionError(f"step {step}: the store was never asked the window's union")
    store.shrink()
    times.timed(bridge.end_step, steps)
    return times
