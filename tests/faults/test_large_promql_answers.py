"""A store answering a step's query with one million series, under caps raised to allow it (issue 40): the training
thread's boundaries never wait on that answer. Its HTTP read, JSON decode and reduction run where the training loop
does not wait for the interpreter lock (the PromQL path's child process), so the worst time the trainer's thread
spends in ``begin_step``/``end_step``/``log`` stays under ``delivery.max_block_s``, as on the scrape path.

Before: the answer was decoded and reduced on a worker thread of the trainer's own process, and the training thread
blocked 4.3-4.5 s at a step boundary."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from otel_bridge import Bridge
from tests.faults.support import base_config
from tests.helpers.backends import BackendDouble
from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer, json_response, prom_success

SERIES = 1_000_000
STEPS = 2
RUNNING = "vllm:num_requests_running"
KEY = "rollout/vllm/num_requests_running/max"
CAPS = {"max_series": 2_000_000, "max_samples": 3_000_000, "max_response_bytes": 200_000_000}
MAX_BLOCK_S = 0.5  # delivery.max_block_s, the default: the contract bound of one boundary


@functools.cache
def many_series(series: int) -> bytes:
    """A vector answer with ``series`` series of the gauge's query, one per pod, each at 3; built once per size and
    kept (the bytes are what the store sends at every step)."""
    head = b'{"status":"success","data":{"resultType":"vector","result":['
    body = b",".join(
        b'{"metric":{"otel_bridge_q":"0/max","pod":"p%07d"},"value":[1717171717.123,"3"]}' % i for i in range(series)
    )
    return head + body + b"]}}"


class LargeStore:
    """A Prometheus-compatible store (scripted, on loopback) whose answer to the window's union is ``series`` series;
    ``asked`` is set when a window's union has been asked."""

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
        if "otel_bridge_q" not in query or "unless count_over_time" in query:
            return prom_success({"resultType": "vector", "result": []})
        self.asked.set()
        return Response(body=self.answer, headers={"Content-Type": "application/json"})


def timed(durations: list[float], call: Callable[..., Any], *args: Any) -> None:
    """``call(*args)``, its duration on this (the training) thread appended to ``durations``."""
    began = time.perf_counter()
    call(*args)
    durations.append(time.perf_counter() - began)


def test_the_training_thread_never_waits_on_a_million_series_answer(tmp_path: Path) -> None:
    store = LargeStore(SERIES)
    collecting = BackendDouble()
    config = base_config(
        tmp_path,
        "large-answers",
        prometheus={"url": store.server.url, "retries": 0, "scrape_interval_s": 1.0, "timeout_s": 60, **CAPS},
        metrics=[{"name": RUNNING, "type": "gauge", "stats": ["max"]}],
        delivery={"produce_timeout_s": 300, "max_block_s": MAX_BLOCK_S},
    )
    durations: list[float] = []
    try:
        with Bridge.from_config(config, backends=[collecting]) as bridge:
            timed(durations, bridge.begin_step, 0)
            for step in range(STEPS):
                store.asked.clear()
                timed(durations, bridge.log, {"actor/loss": float(step)}, step)
                timed(durations, bridge.end_step, step)
                timed(durations, bridge.begin_step, step + 1)  # hands this step's window to the worker
                # The next step trains while the worker reads this one: the training thread is busy (it logs, call
                # after call, as a training loop computes) until this step's record has been delivered. A thread that
                # holds the interpreter lock for long (the answer's JSON decode) takes it from the trainer inside one
                # of these calls: the training loop would stall there.
                delivered = threading.Event()
                waiter = threading.Thread(target=lambda s=step, d=delivered: (bridge.collect(s, 600), d.set()))
                waiter.start()
                while not delivered.is_set():
                    timed(durations, bridge.log, {"actor/busy": 1.0}, step + 1)
                waiter.join()
                assert store.asked.is_set(), f"step {step}: the store was never asked the window's union"
            timed(durations, bridge.end_step, STEPS)
    finally:
        store.server.close()
    by_step = collecting.by_step()
    assert [by_step[s].get(KEY) for s in range(STEPS)] == [3.0] * STEPS  # every step read the whole answer
    worst = max(durations)
    assert worst < MAX_BLOCK_S, f"the training thread was held {worst:.3f} s at one call (max_block_s {MAX_BLOCK_S})"
