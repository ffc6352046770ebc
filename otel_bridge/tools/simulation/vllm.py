"""A simulated vLLM 0.32 rollout server: vLLM's exact ``/metrics`` families driven by a known script.

:class:`VLLMSimulator` exposes every ``vllm:`` family of a real vLLM 0.32.0 capture (names, types, HELP texts,
label names, fixed label values, histogram buckets; table in ``data/vllm_0_32_metrics.json``) through a private
``prometheus_client`` registry, so ``_total`` counters and ``_created`` gauges are rendered exactly as vLLM
renders them. Tests drive it request by request (:meth:`VLLMSimulator.complete_request`) and know the truth
(:meth:`VLLMSimulator.totals`); :class:`SimulatedWorkload` drives it with a seeded random load for the demo.

:class:`VLLMServer` serves ``/metrics`` through the route real vLLM 0.32 has (text, whatever the scraper asks) or,
with ``route="negotiate"``, through prometheus_client's own content negotiation (OpenMetrics to a Prometheus that asks
for it): :func:`otel_bridge.tools.simulation.http.exposition`. A data-parallel vLLM (several API server processes in
prometheus_client's multiprocess mode) is :class:`otel_bridge.tools.simulation.data_parallel.DataParallelVLLM`.

A process lifetime is what a real server's is: :meth:`VLLMSimulator.restart` starts a new one, whose counters and
histograms count from zero, whose ``_created`` gauges and ``process_start_time_seconds`` give its start, and
:class:`VLLMServer` puts the simulator behind its ``/metrics`` port and restarts it the way vLLM restarts: the port
refuses connections while the server is down (a real vLLM takes 48-115 s from launch to a healthy ``/health`` on a
CPU node; :data:`RESTART_DOWN_S` by default), then the new process serves.

Run as a separate process::

    python -m otel_bridge.tools.simulation.vllm --port 0 [--model tiny] [--route text] [--workload] \
        [--restart-down-s 60]

which prints exactly one line, ``serving http://127.0.0.1:PORT/metrics``, once it is ready; SIGHUP restarts it
(down for ``--restart-down-s``, then counting from zero).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import logging
import math
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import FrameType, MappingProxyType, TracebackType
from typing import Any, Final, Protocol, runtime_checkable

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from otel_bridge.tools.simulation.families import FamilySpec, create_metric, cumulative_totals, family_specs
from otel_bridge.tools.simulation.http import (
    METRICS_ROUTES,
    MetricsHTTPServer,
    MetricsRequest,
    MetricsRoute,
    Route,
    exposition,
)

_log = logging.getLogger(__name__)

_TABLE_RESOURCE: Final = "data/vllm_0_32_metrics.json"
RESTART_DOWN_S: Final = 60.0
"""How long :meth:`VLLMServer.restart` refuses connections by default: a real vLLM 0.32 CPU server took 48-115 s
from launch to a healthy ``/health`` on a 2-core node."""
FINISHED_REASONS: Final = ("stop", "length", "abort", "error", "repetition")
_VARIABLE_LABELS: Final = ("engine", "model_name")


class EngineAsleepError(RuntimeError):
    """A request was run or completed on a simulated engine that sleeps (:meth:`VLLMSimulator.sleep`)."""


@functools.cache
def vllm_family_specs() -> tuple[FamilySpec, ...]:
    """Every ``vllm:`` family of the vLLM 0.32.0 capture, in exposition order (read from the package data)."""
    return family_specs(_TABLE_RESOURCE)


class _ProcessCollector:
    """prometheus_client's ``process_*`` families of this (test) process, but with the simulated process' start:
    a restart shows a new ``process_start_time_seconds``, as a new vLLM process does."""

    def __init__(self, started: float) -> None:
        self._started = started

    def collect(self) -> list[Metric]:
        families: list[Metric] = []
        for family in PROCESS_COLLECTOR.collect():
            if family.name == "process_start_time_seconds":
                family = GaugeMetricFamily(family.name, family.documentation, value=self._started)
            families.append(family)
        return families


class _Instruments:
    """One vLLM process lifetime: a fresh registry with every family created and zeroed, as at start-up.

    ``gauge_modes`` overrides the multiprocess mode of the gauges it names (only prometheus_client's multiprocess
    mode reads it)."""

    def __init__(self, model_name: str, engine: str, gauge_modes: Mapping[str, str]) -> None:
        self.started = time.time()
        self.registry = CollectorRegistry()
        # prometheus_client's process/platform/GC families precede vLLM's in a real server's exposition.
        self.registry.register(_ProcessCollector(self.started))
        for collector in (PLATFORM_COLLECTOR, GC_COLLECTOR):
            self.registry.register(collector)
        self._model_name = model_name
        self._engine = engine
        self._gauge_modes = gauge_modes
        self._metrics: dict[str, Any] = {}
        self._labelnames: dict[str, tuple[str, ...]] = {}
        for spec in vllm_family_specs():
            self._create(spec)

    def _create(self, spec: FamilySpec) -> None:
        metric = create_metric(spec, self.registry, self._gauge_modes)
        self._metrics[spec.name] = metric
        self._labelnames[spec.name] = spec.labelnames
        base = self._base_labels(spec.name)
        if spec.constant_labels:
            metric.labels(**base, **spec.constant_labels).set(1)
            return
        fixed_names = list(spec.fixed_labels)
        for values in itertools.product(*(spec.fixed_labels[name] for name in fixed_names)):
            fixed = dict(zip(fixed_names, values, strict=True))
            child = metric.labels(**base, **fixed)  # creating the child exposes it at zero, as vLLM does
            if fixed.get("sleep_state") == "awake":
                child.set(1)

    def _base_labels(self, name: str) -> dict[str, str]:
        values = {"engine": self._engine, "model_name": self._model_name}
        return {label: values[label] for label in _VARIABLE_LABELS if label in self._labelnames[name]}

    def child(self, name: str, **labels: str) -> Any:
        """The labelled child of family ``name`` for this engine and model."""
        return self._metrics[name].labels(**self._base_labels(name), **labels)


class VLLMSimulator:
    """vLLM 0.32's ``/metrics`` for one engine of one served model, updated by explicit, thread-safe calls.

    ``gauge_modes`` (gauge name -> prometheus_client multiprocess mode) matters only where prometheus_client runs in
    multiprocess mode (:mod:`otel_bridge.tools.simulation.data_parallel`'s API server processes)."""

    def __init__(
        self, model_name: str = "tiny", engine: str = "0", gauge_modes: Mapping[str, str] | None = None
    ) -> None:
        self.model_name = model_name
        self.engine = engine
        self._gauge_modes = MappingProxyType(dict(gauge_modes or {}))
        self._lock = threading.Lock()
        self._instruments = _Instruments(model_name, engine, self._gauge_modes)
        self._asleep = False

    def complete_request(
        self,
        prompt_tokens: int,
        generation_tokens: int,
        ttft_s: float,
        e2e_s: float,
        queue_s: float,
        itl_s: Sequence[float] | float,
        cached_prompt_tokens: int = 0,
        finished_reason: str = "length",
        max_tokens: int | None = None,
    ) -> None:
        """Record one finished request as vLLM does.

        ``itl_s`` is the inter-token latency: one value per generated token after the first, or a single float
        used for each of them. Derived as in vLLM: decode time = sum of the inter-token latencies, prefill time =
        ``ttft_s - queue_s``, inference time = prefill + decode, time per output token = decode /
        (generation_tokens - 1). ``max_tokens`` (the request parameter) defaults to ``generation_tokens``.
        Raises ``ValueError`` for impossible arguments.
        """
        itls = self._check_request(
            prompt_tokens, generation_tokens, ttft_s, e2e_s, queue_s, itl_s, cached_prompt_tokens, finished_reason
        )
        max_tokens = generation_tokens if max_tokens is None else max_tokens
        if max_tokens < generation_tokens:
            raise ValueError(f"max_tokens={max_tokens} is below generation_tokens={generation_tokens}")
        computed_tokens = prompt_tokens - cached_prompt_tokens
        decode_s = math.fsum(itls)
        prefill_s = max(ttft_s - queue_s, 0.0)
        with self._lock:
            self._check_awake("complete a request")
            m = self._instruments
            m.child("vllm:prompt_tokens_total").inc(prompt_tokens)
            m.child("vllm:prompt_tokens_by_source_total", source="local_compute").inc(computed_tokens)
            m.child("vllm:prompt_tokens_by_source_total", source="local_cache_hit").inc(cached_prompt_tokens)
            m.child("vllm:prompt_tokens_cached_total").inc(cached_prompt_tokens)
            m.child("vllm:prompt_tokens_cached_by_source_total", source="device").inc(cached_prompt_tokens)
            m.child("vllm:prefix_cache_queries_total").inc(prompt_tokens)
            m.child("vllm:prefix_cache_hits_total").inc(cached_prompt_tokens)
            m.child("vllm:generation_tokens_total").inc(generation_tokens)
            m.child("vllm:request_success_total", finished_reason=finished_reason).inc()
            m.child("vllm:request_prompt_tokens").observe(prompt_tokens)
            m.child("vllm:request_generation_tokens").observe(generation_tokens)
            m.child("vllm:request_max_num_generation_tokens").observe(max_tokens)
            m.child("vllm:request_params_max_tokens").observe(max_tokens)
            m.child("vllm:request_params_n").observe(1)
            m.child("vllm:request_prefill_kv_computed_tokens").observe(computed_tokens)
            m.child("vllm:request_num_preemptions").observe(0)
            m.child("vllm:time_to_first_token_seconds").observe(ttft_s)
            m.child("vllm:e2e_request_latency_seconds").observe(e2e_s)
            m.child("vllm:request_queue_time_seconds").observe(queue_s)
            m.child("vllm:request_prefill_time_seconds").observe(prefill_s)
            m.child("vllm:request_decode_time_seconds").observe(decode_s)
            m.child("vllm:request_inference_time_seconds").observe(prefill_s + decode_s)
            tpot = decode_s / (generation_tokens - 1) if generation_tokens > 1 else 0.0
            m.child("vllm:request_time_per_output_token_seconds").observe(tpot)
            itl_child = m.child("vllm:inter_token_latency_seconds")
            for itl in itls:
                itl_child.observe(itl)
            # Engine steps: the prefill step computes the prompt and samples the first token, then one token a step.
            iteration = m.child("vllm:iteration_tokens_total")
            if generation_tokens > 0 or computed_tokens > 0:
                iteration.observe(computed_tokens + min(generation_tokens, 1))
            for _ in range(generation_tokens - 1):
                iteration.observe(1)

    @staticmethod
    def _check_request(
        prompt_tokens: int,
        generation_tokens: int,
        ttft_s: float,
        e2e_s: float,
        queue_s: float,
        itl_s: Sequence[float] | float,
        cached_prompt_tokens: int,
        finished_reason: str,
    ) -> list[float]:
        if prompt_tokens < 0 or generation_tokens < 0:
            raise ValueError(f"token counts must be >= 0, got prompt={prompt_tokens} generation={generation_tokens}")
        if not 0 <= cached_prompt_tokens <= prompt_tokens:
            raise ValueError(f"cached_prompt_tokens={cached_prompt_tokens} must be within 0..{prompt_tokens}")
        if finished_reason not in FINISHED_REASONS:
            raise ValueError(f"finished_reason={finished_reason!r}; vLLM 0.32 uses one of {FINISHED_REASONS}")
        gaps = max(generation_tokens - 1, 0)
        itls = [float(itl_s)] * gaps if isinstance(itl_s, int | float) else [float(v) for v in itl_s]
        if len(itls) != gaps:
            raise ValueError(f"itl_s has {len(itls)} values; a {generation_tokens}-token generation has {gaps} gaps")
        if min((ttft_s, e2e_s, queue_s, *itls)) < 0:
            raise ValueError("latencies (ttft_s, e2e_s, queue_s, itl_s) must be >= 0")
        return itls

    def set_running(self, n: int) -> None:
        """Set ``vllm:num_requests_running``; :class:`EngineAsleepError` for ``n > 0`` while the engine sleeps."""
        with self._lock:
            if n > 0:
                self._check_awake("run requests")
            self._instruments.child("vllm:num_requests_running").set(n)

    def _check_awake(self, what: str) -> None:
        if self._asleep:
            raise EngineAsleepError(
                f"engine {self.engine} of {self.model_name} sleeps: it cannot {what}; wake_up() first"
            )

    def set_waiting(self, n: int) -> None:
        """Set ``vllm:num_requests_waiting`` (all waiting for capacity, as in ``num_requests_waiting_by_reason``)."""
        with self._lock:
            self._instruments.child("vllm:num_requests_waiting").set(n)
            self._instruments.child("vllm:num_requests_waiting_by_reason", reason="capacity").set(n)
            self._instruments.child("vllm:num_requests_waiting_by_reason", reason="deferred").set(0)

    def set_kv_cache_usage(self, frac: float) -> None:
        """Set ``vllm:kv_cache_usage_perc`` (a fraction: 1 means 100 percent)."""
        if not 0.0 <= frac <= 1.0:
            raise ValueError(f"KV-cache usage is a fraction in [0, 1], got {frac}")
        with self._lock:
            self._instruments.child("vllm:kv_cache_usage_perc").set(frac)

    def sleep(self, level: int = 1) -> None:
        """Put the engine to sleep as vLLM's ``/sleep?level=N`` does, in ``vllm:engine_sleep_state`` (vLLM's
        ``record_sleep_state``): ``awake`` 0, ``weights_offloaded`` 1 at level 1 (weights offloaded to CPU),
        ``discard_all`` 1 at level 2 (weights and KV cache discarded). A sleeping engine runs no request (vLLM answers
        503 to generation requests): ``vllm:num_requests_running`` is 0 until :meth:`wake_up`, and running or
        completing requests raises :class:`EngineAsleepError`."""
        if level not in (1, 2):
            raise ValueError(f"vLLM's sleep levels are 1 and 2, got {level}")
        with self._lock:
            self._asleep = True
            self._instruments.child("vllm:num_requests_running").set(0)
        self._set_sleep_state(awake=0, weights_offloaded=int(level == 1), discard_all=int(level == 2))

    @property
    def sleeping(self) -> bool:
        """Whether the engine sleeps (:meth:`sleep` without a :meth:`wake_up` since)."""
        with self._lock:
            return self._asleep

    def wake_up(self) -> None:
        """Wake the engine up as vLLM's ``/wake_up`` does: ``awake`` 1, the other sleep states 0."""
        self._set_sleep_state(awake=1, weights_offloaded=0, discard_all=0)
        with self._lock:
            self._asleep = False

    def _set_sleep_state(self, **states: int) -> None:
        with self._lock:
            for state, value in states.items():
                self._instruments.child("vllm:engine_sleep_state", sleep_state=state).set(value)

    def preempt(self, n: int = 1) -> None:
        """Count ``n`` preemptions in ``vllm:num_preemptions_total``."""
        if n < 0:
            raise ValueError(f"preempt(n) needs n >= 0, got {n}")
        with self._lock:
            self._instruments.child("vllm:num_preemptions_total").inc(n)

    @property
    def started(self) -> float:
        """When the current process lifetime began (its ``process_start_time_seconds``)."""
        with self._lock:
            return self._instruments.started

    def restart(self) -> None:
        """A new vLLM process: counters and histograms back to zero, gauges reset, new ``_created`` gauges and a new
        ``process_start_time_seconds``. (The time the server is down in between is :class:`VLLMServer`'s.)"""
        instruments = _Instruments(self.model_name, self.engine, self._gauge_modes)
        with self._lock:
            self._instruments = instruments
            self._asleep = False  # a new process starts awake
        _log.debug("simulated vLLM engine %s of %s restarted", self.engine, self.model_name)

    def exposition(self) -> bytes:
        """The ``/metrics`` body, in the classic text format (what vLLM serves)."""
        with self._lock:
            return bytes(generate_latest(self._instruments.registry))

    def answer(self, accept: str, route: MetricsRoute) -> tuple[bytes, str]:
        """The ``/metrics`` answer (body, ``Content-Type``) to a scraper sending ``accept`` through ``route``."""
        with self._lock:
            return exposition(self._instruments.registry, accept, route)

    def totals(self) -> dict[str, float]:
        """Current cumulative values: every ``vllm:`` counter (``_total`` sample, summed over its label values)
        and every histogram's ``_count`` and ``_sum``, keyed by sample name."""
        with self._lock:
            families = list(self._instruments.registry.collect())
        return cumulative_totals(families, "vllm:")


class SimulatedWorkload:
    """Drives a :class:`VLLMSimulator` from a daemon thread: about ``requests_per_s`` finished requests a second
    with seeded random sizes and latencies, plus running/waiting/KV-cache gauges and occasional preemptions.

    The sequence of requests depends only on ``rng_seed``; how many happen by a given time depends on the clock.
    """

    def __init__(
        self, sim: VLLMSimulator, rng_seed: int = 0, requests_per_s: float = 10.0, max_tokens: int = 128
    ) -> None:
        if requests_per_s <= 0:
            raise ValueError(f"requests_per_s must be > 0, got {requests_per_s}")
        if max_tokens < 2:
            raise ValueError(f"max_tokens must be >= 2, got {max_tokens}")
        self._sim = sim
        self._rng = random.Random(rng_seed)
        self._interval_s = 1.0 / requests_per_s
        self._max_tokens = max_tokens
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.requests = 0  # finished requests so far

    @property
    def requests_per_s(self) -> float:
        """The request rate; may be changed while the workload runs."""
        return 1.0 / self._interval_s

    @requests_per_s.setter
    def requests_per_s(self, value: float) -> None:
        if value <= 0:
            raise ValueError(f"requests_per_s must be > 0, got {value}")
        self._interval_s = 1.0 / value

    def start(self) -> SimulatedWorkload:
        """Start the background thread; returns ``self``."""
        if self._thread is not None:
            raise RuntimeError("SimulatedWorkload is already started")
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="vllm-sim-workload", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread and wait for it. Idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            next_at += self._interval_s
            try:
                self.step()
            except ValueError:
                _log.exception("simulated workload stopped on an invalid request")
                return

    def step(self) -> None:
        """One tick: one finished request and fresh gauge values (also callable directly, without the thread); nothing
        while the engine sleeps."""
        try:
            self._tick()
        except EngineAsleepError:
            return

    def _tick(self) -> None:
        rng = self._rng
        prompt = rng.randint(8, 160)
        cached = rng.randrange(0, prompt + 1, 16) if rng.random() < 0.6 else 0
        truncated = rng.random() < 0.3
        generation = self._max_tokens if truncated else rng.randint(2, self._max_tokens)
        queue_s = rng.expovariate(1 / 0.02)
        prefill_s = 0.004 + (prompt - cached) * 0.0002 * rng.lognormvariate(0.0, 0.3)
        itls = [rng.lognormvariate(math.log(0.015), 0.3) for _ in range(generation - 1)]
        ttft_s = queue_s + prefill_s
        self._sim.complete_request(
            prompt_tokens=prompt,
            generation_tokens=generation,
            ttft_s=ttft_s,
            e2e_s=ttft_s + math.fsum(itls) + 0.001,
            queue_s=queue_s,
            itl_s=itls,
            cached_prompt_tokens=cached,
            finished_reason="length" if truncated else "stop",
            max_tokens=self._max_tokens,
        )
        running = rng.randint(1, 16)
        self._sim.set_running(running)
        self._sim.set_waiting(rng.choice((0, 0, 0, 1, 2, 5)))
        self._sim.set_kv_cache_usage(min(1.0, running * 0.05 + rng.random() * 0.1))
        if rng.random() < 0.02:
            self._sim.preempt()
        self.requests += 1


class ServedEngine(Protocol):
    """What :class:`VLLMServer` serves and restarts: a :class:`VLLMSimulator`, a data-parallel vLLM's API server
    processes (:class:`~otel_bridge.tools.simulation.data_parallel.DataParallelVLLM`), an
    :class:`~otel_bridge.tools.simulation.sglang.SGLangSimulator`."""

    @property
    def started(self) -> float: ...

    def answer(self, accept: str, route: MetricsRoute) -> tuple[bytes, str]: ...

    def restart(self) -> None: ...


@runtime_checkable
class SleepingEngine(ServedEngine, Protocol):
    """An engine with vLLM's sleep mode: :class:`VLLMServer` adds its dev-mode routes (``/sleep``, ``/wake_up``,
    ``/is_sleeping``)."""

    @property
    def sleeping(self) -> bool: ...

    def sleep(self, level: int = 1) -> None: ...

    def wake_up(self) -> None: ...


def _sleep_routes(engine: SleepingEngine) -> dict[tuple[str, str], Route]:
    """vLLM's dev-mode sleep API (``VLLM_SERVER_DEV_MODE=1``) on ``engine``."""

    def sleep(params: Mapping[str, str]) -> tuple[int, bytes]:
        """``POST /sleep?level=N`` (level 1 by default)."""
        try:
            engine.sleep(int(params.get("level", "1")))
        except ValueError as err:
            return 400, json.dumps({"error": str(err)}).encode()
        return 200, b"{}"

    def wake_up(params: Mapping[str, str]) -> tuple[int, bytes]:
        """``POST /wake_up``."""
        engine.wake_up()
        return 200, b"{}"

    def is_sleeping(params: Mapping[str, str]) -> tuple[int, bytes]:
        """``GET /is_sleeping``: ``{"is_sleeping": bool}``."""
        return 200, json.dumps({"is_sleeping": engine.sleeping}).encode()

    return {("POST", "/sleep"): sleep, ("POST", "/wake_up"): wake_up, ("GET", "/is_sleeping"): is_sleeping}


class VLLMServer:
    """A simulated vLLM server process: a :class:`VLLMSimulator` behind its ``/metrics`` port, restarted as vLLM is.

    ``route`` is how ``/metrics`` answers (:func:`~otel_bridge.tools.simulation.http.exposition`): ``text``, real
    vLLM 0.32's route (the default), or ``negotiate``, prometheus_client's own handlers' content negotiation.

    :meth:`go_down` is the process ending (SIGTERM, a crash): from then on the port refuses connections and nothing is
    counted; :meth:`come_up` is the new process serving again on the same port, its counters from zero and its start
    time new. :meth:`restart` does both with ``down_s`` in between. ``on_render`` is called with each ``/metrics``
    body served and the request it answered (:class:`~otel_bridge.tools.simulation.http.MetricsRequest`: when it
    arrived, its ``Accept`` and ``User-Agent``), once the page is rendered and before it is sent: tests count scrapes
    with it, and tell whose they were.
    """

    def __init__(
        self,
        sim: ServedEngine | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        on_render: Callable[[bytes, MetricsRequest], None] | None = None,
        route: MetricsRoute = "text",
    ) -> None:
        self.sim: ServedEngine = sim if sim is not None else VLLMSimulator()
        self.route: MetricsRoute = route
        self._on_render = on_render
        routes = _sleep_routes(self.sim) if isinstance(self.sim, SleepingEngine) else {}
        self.http = MetricsHTTPServer(host=host, port=port, routes=routes, answer=self._answer)
        """The port alone: stopping it while the process keeps counting is a network partition, not a restart."""
        self._lock = threading.Lock()
        self._up = False

    def _answer(self, request: MetricsRequest) -> tuple[bytes, str]:
        body, content_type = self.sim.answer(request.accept, self.route)
        if self._on_render is not None:
            self._on_render(body, request)
        return body, content_type

    @property
    def url(self) -> str:
        """``http://HOST:PORT/metrics``."""
        return self.http.url

    @property
    def hostport(self) -> str:
        """``HOST:PORT``, Prometheus' ``instance`` label for this server."""
        return self.url.split("//", 1)[1].split("/", 1)[0]

    @property
    def up(self) -> bool:
        """Whether the process runs and its port serves."""
        with self._lock:
            return self._up

    def start(self) -> VLLMServer:
        """Serve (the first process lifetime); returns ``self``."""
        with self._lock:
            self.http.start()
            self._up = True
        return self

    def go_down(self) -> float:
        """End the process: the port refuses connections from the returned time on (nothing more is counted)."""
        with self._lock:
            self._up = False
            self.http.stop()
            return time.time()

    def come_up(self) -> float:
        """A new process serves on the same port: counters from zero, a new start time. Returns that start time."""
        with self._lock:
            self.sim.restart()
            self.http.start()
            self._up = True
            return self.sim.started

    def restart(self, down_s: float = RESTART_DOWN_S) -> float:
        """:meth:`go_down`, ``down_s`` seconds refusing connections, then :meth:`come_up` (blocks for ``down_s``)."""
        if down_s < 0:
            raise ValueError(f"down_s must be >= 0, got {down_s}")
        self.go_down()
        time.sleep(down_s)
        return self.come_up()

    def stop(self) -> None:
        """Stop serving for good. Idempotent."""
        with self._lock:
            self._up = False
            self.http.stop()

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Serve a simulated vLLM ``/metrics`` until SIGTERM/SIGINT; print one ``serving URL`` line when ready."""
    parser = argparse.ArgumentParser(prog="python -m otel_bridge.tools.simulation.vllm", description=main.__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (the printed URL tells which)")
    parser.add_argument("--model", default="tiny", help="model_name label value")
    parser.add_argument("--engine", default="0", help="engine label value")
    parser.add_argument(
        "--route",
        choices=METRICS_ROUTES,
        default="text",
        help="how /metrics answers: vLLM's text route, or prometheus_client's negotiation (default %(default)s)",
    )
    parser.add_argument("--workload", action="store_true", help="run a seeded background request load")
    parser.add_argument("--seed", type=int, default=0, help="workload RNG seed")
    parser.add_argument("--rps", type=float, default=10.0, help="workload requests per second")
    parser.add_argument(
        "--restart-down-s",
        type=float,
        default=RESTART_DOWN_S,
        help="on SIGHUP, refuse connections this long, then count from zero (default %(default)s)",
    )
    args = parser.parse_args(argv)

    stop = threading.Event()
    restart = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        (restart if signum == signal.SIGHUP else stop).set()

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    sim = VLLMSimulator(model_name=args.model, engine=args.engine)
    workload = SimulatedWorkload(sim, rng_seed=args.seed, requests_per_s=args.rps) if args.workload else None
    with VLLMServer(sim, host=args.host, port=args.port, route=args.route) as server:
        if workload is not None:
            workload.start()
        try:
            sys.stdout.write(f"serving {server.url}\n")
            sys.stdout.flush()
            while not stop.wait(0.1):
                if restart.is_set():
                    restart.clear()
                    if workload is not None:
                        workload.stop()
                    server.go_down()
                    if not stop.wait(args.restart_down_s):
                        server.come_up()
                        if workload is not None:
                            workload.start()
        finally:
            if workload is not None:
                workload.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
