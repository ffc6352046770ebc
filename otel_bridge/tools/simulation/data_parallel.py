"""A simulated data-parallel vLLM (``vllm serve -dp N``): several API server processes in prometheus_client's
multiprocess mode, as vLLM runs them by default since vLLM#32525 (``--api-server-count`` defaults to the local
data-parallel size).

Each API server is a real child process running a :class:`~otel_bridge.tools.simulation.vllm.VLLMSimulator` with
``PROMETHEUS_MULTIPROC_DIR`` set, so prometheus_client writes its values to that directory's files, and ``/metrics``
is rendered from them by prometheus_client's own ``MultiProcessCollector`` (any API server process answers a scrape
with the same page in vLLM; here the parent renders it). What that changes against a single vLLM process, all from
prometheus_client itself:

- no ``process_start_time_seconds`` (nor any ``process_*``, ``python_*`` family) and no ``_created`` series;
- counters and histograms are summed over the processes;
- a gauge is combined by its ``multiprocess_mode``: vLLM 0.32 creates every ``vllm:`` gauge ``mostrecent`` (the latest
  value written by any process; the engine reports its scheduler's state to one API server at a time), and a gauge
  created without one (prometheus_client's ``all``, e.g. ``gauge_modes={"vllm:kv_cache_usage_perc": "all"}`` as
  vLLM 0.10 created it) has one series per process, told apart by a ``pid`` label.

Requests are spread over the API servers in turn (vLLM's front-end balancing); the scheduler gauges are written by the
API server that completed the latest request. :meth:`DataParallelVLLM.restart` is a new vLLM: new processes and a new,
empty multiprocess directory (vLLM makes a fresh temporary one at each launch), so everything counts from zero.

An API server process is driven over its stdin, one JSON call a line, each answered before the next, so a call has
been counted when it returns (the truth of a test's traffic log holds as it does with one process)::

    python -m otel_bridge.tools.simulation.data_parallel --api-server [--model tiny] [--engine 0] [--gauge-modes JSON]
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from types import MappingProxyType, TracebackType
from typing import IO, Any, Final

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from otel_bridge.tools.simulation.families import cumulative_totals
from otel_bridge.tools.simulation.http import MetricsRoute, exposition
from otel_bridge.tools.simulation.vllm import EngineAsleepError, VLLMSimulator

_log = logging.getLogger(__name__)

CALLS: Final = frozenset(
    {"complete_request", "set_running", "set_waiting", "set_kv_cache_usage", "preempt", "sleep", "wake_up"}
)
"""The :class:`VLLMSimulator` methods an API server process runs on request."""
_GAUGE_CALLS: Final = frozenset({"set_running", "set_waiting", "set_kv_cache_usage"})
_STOP_TIMEOUT_S: Final = 10.0


class _APIServer:
    """One API server process (see the module docstring); :meth:`call` runs one simulator method in it."""

    def __init__(self, directory: str, model_name: str, engine: str, gauge_modes: Mapping[str, str]) -> None:
        command = [sys.executable, "-m", __name__, "--api-server", "--model", model_name, "--engine", engine]
        command += ["--gauge-modes", json.dumps(dict(gauge_modes))]
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": directory},
        )
        self._lock = threading.Lock()

    def wait_ready(self) -> None:
        """Block until the process has created its metrics (its first line)."""
        self._answer()

    def call(self, method: str, kwargs: Mapping[str, Any]) -> Any:
        assert self.process.stdin is not None
        with self._lock:
            self.process.stdin.write(json.dumps({"call": method, "kwargs": dict(kwargs)}) + "\n")
            self.process.stdin.flush()
            return self._answer()

    def _answer(self) -> Any:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"simulated vLLM API server {self.process.pid} exited ({self.process.wait()})")
        answer = json.loads(line)
        if "error" in answer:
            kind = EngineAsleepError if answer["error"] == EngineAsleepError.__name__ else ValueError
            raise kind(answer["message"])
        return answer.get("result")

    def stop(self) -> None:
        """End the process (stdin closed: it exits), killed if it does not within a few seconds. Idempotent."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


class DataParallelVLLM:
    """A vLLM served by ``api_servers`` API server processes in prometheus_client's multiprocess mode (see the module
    docstring), with :class:`VLLMSimulator`'s calls: serve it with
    :class:`~otel_bridge.tools.simulation.vllm.VLLMServer`. Call :meth:`close` (or leave the ``with`` block) to end
    its processes and remove its directory."""

    def __init__(
        self,
        api_servers: int = 2,
        model_name: str = "tiny",
        engine: str = "0",
        gauge_modes: Mapping[str, str] | None = None,
    ) -> None:
        if api_servers < 1:
            raise ValueError(f"api_servers must be >= 1, got {api_servers}")
        self.api_servers = api_servers
        self.model_name = model_name
        self.engine = engine
        self._gauge_modes = MappingProxyType(dict(gauge_modes or {}))
        self._lock = threading.Lock()
        self._servers: list[_APIServer] = []
        self._directory = ""
        self._registry = CollectorRegistry()
        self._started = 0.0
        self._asleep = False
        self._turn: itertools.cycle[int] = itertools.cycle(range(api_servers))
        self._current = 0
        self._launch()

    def _launch(self) -> None:
        directory = tempfile.mkdtemp(prefix="vllm-multiproc-")
        servers = [
            _APIServer(directory, self.model_name, self.engine, self._gauge_modes) for _ in range(self.api_servers)
        ]
        try:
            for server in servers:
                server.wait_ready()
        except BaseException:
            self._end(servers, directory)
            raise
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=directory)
        self._servers, self._directory, self._registry = servers, directory, registry
        self._started = time.time()
        self._asleep = False
        self._turn = itertools.cycle(range(self.api_servers))
        self._current = 0

    @staticmethod
    def _end(servers: Sequence[_APIServer], directory: str) -> None:
        for server in servers:
            server.stop()
        shutil.rmtree(directory, ignore_errors=True)

    @property
    def pids(self) -> list[int]:
        """The API server processes' ids (the ``pid`` label of gauges in mode ``all``)."""
        with self._lock:
            return [server.process.pid for server in self._servers]

    def complete_request(self, **kwargs: Any) -> None:
        """:meth:`VLLMSimulator.complete_request` in the next API server process in turn."""
        with self._lock:
            self._current = next(self._turn)
            server = self._servers[self._current]
        server.call("complete_request", kwargs)

    def _call_current(self, method: str, **kwargs: Any) -> None:
        with self._lock:
            server = self._servers[self._current]
        server.call(method, kwargs)

    def set_running(self, n: int) -> None:
        """``vllm:num_requests_running``, written by the API server that completed the latest request."""
        self._call_current("set_running", n=n)

    def set_waiting(self, n: int) -> None:
        """``vllm:num_requests_waiting`` (and ``_by_reason``), as :meth:`set_running`."""
        self._call_current("set_waiting", n=n)

    def set_kv_cache_usage(self, frac: float) -> None:
        """``vllm:kv_cache_usage_perc``, as :meth:`set_running`."""
        self._call_current("set_kv_cache_usage", frac=frac)

    def set_kv_cache_usage_in(self, index: int, frac: float) -> None:
        """``vllm:kv_cache_usage_perc`` written by API server ``index`` (gauges of mode ``all`` differ by process)."""
        with self._lock:
            server = self._servers[index]
        server.call("set_kv_cache_usage", {"frac": frac})

    def preempt(self, n: int = 1) -> None:
        """``vllm:num_preemptions_total``, as :meth:`set_running`."""
        self._call_current("preempt", n=n)

    def sleep(self, level: int = 1) -> None:
        """Every API server's engine sleeps (:meth:`VLLMSimulator.sleep`)."""
        with self._lock:
            servers = list(self._servers)
            self._asleep = True
        for server in servers:
            server.call("sleep", {"level": level})

    def wake_up(self) -> None:
        """Every API server's engine wakes up."""
        with self._lock:
            servers = list(self._servers)
            self._asleep = False
        for server in servers:
            server.call("wake_up", {})

    @property
    def sleeping(self) -> bool:
        with self._lock:
            return self._asleep

    @property
    def started(self) -> float:
        """When the current processes were launched (no page of theirs says so: no ``process_start_time_seconds``)."""
        with self._lock:
            return self._started

    def restart(self) -> None:
        """A new vLLM: the API server processes end, new ones start on a new, empty multiprocess directory."""
        with self._lock:
            self._end(self._servers, self._directory)
            self._launch()
        _log.debug("simulated data-parallel vLLM %s of %s restarted", self.engine, self.model_name)

    def answer(self, accept: str, route: MetricsRoute) -> tuple[bytes, str]:
        """The ``/metrics`` answer (prometheus_client's ``MultiProcessCollector`` over the processes' files)."""
        with self._lock:
            return exposition(self._registry, accept, route)

    def exposition(self) -> bytes:
        """The ``/metrics`` body in the classic text format."""
        with self._lock:
            return bytes(generate_latest(self._registry))

    def totals(self) -> dict[str, float]:
        """Current cumulative values of every ``vllm:`` counter and histogram, as :meth:`VLLMSimulator.totals`."""
        with self._lock:
            families = list(self._registry.collect())
        return cumulative_totals(families, "vllm:")

    def close(self) -> None:
        """End the API server processes and remove their directory. Idempotent."""
        with self._lock:
            self._end(self._servers, self._directory)
            self._servers = []

    def __enter__(self) -> DataParallelVLLM:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def serve_calls(sim: VLLMSimulator, calls: IO[str], answers: IO[str]) -> None:
    """Run each JSON call read from ``calls`` on ``sim`` and write its answer line to ``answers``, until EOF."""
    answers.write(json.dumps({"result": "ready"}) + "\n")
    answers.flush()
    for line in calls:
        request = json.loads(line)
        method = request["call"]
        try:
            if method not in CALLS:
                raise ValueError(f"unknown call {method!r}; one of {sorted(CALLS)}")
            result = getattr(sim, method)(**request["kwargs"])
            answer: dict[str, Any] = {"result": result}
        except (ValueError, TypeError, EngineAsleepError) as err:
            answer = {"error": type(err).__name__, "message": str(err)}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """One API server process (``PROMETHEUS_MULTIPROC_DIR`` must be set): serve calls from stdin until EOF."""
    parser = argparse.ArgumentParser(prog=f"python -m {__name__}", description=main.__doc__)
    parser.add_argument("--api-server", action="store_true", required=True)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--engine", default="0")
    parser.add_argument("--gauge-modes", default="{}", help="JSON: gauge name -> prometheus_client multiprocess mode")
    args = parser.parse_args(argv)
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        parser.error("PROMETHEUS_MULTIPROC_DIR must name the directory the API servers share")
    sim = VLLMSimulator(model_name=args.model, engine=args.engine, gauge_modes=json.loads(args.gauge_modes))
    serve_calls(sim, sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
