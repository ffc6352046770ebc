"""A simulated SGLang 0.5.23 rollout server: the ``sglang:`` families of ``tests/fixtures/sglang`` (names, types, HELP
texts, label names, histogram buckets; table in ``data/sglang_0_5_23_metrics.json``) driven by a known script.

SGLang always runs prometheus_client in multiprocess mode and serves ``/metrics`` with prometheus_client's own
``make_asgi_app`` over a ``MultiProcessCollector`` registry (``add_prometheus_middleware``), so its page has no
``_created`` series and no ``process_*`` families, its gauges are all ``mostrecent`` (no ``pid`` label), and it
negotiates: OpenMetrics to a scraper that asks for it (``sglang_`` names on a Prometheus 2.x: kubernetes-sigs/
inference-perf#600). One process' values are what the collector would read, so the simulator keeps them in one private
registry and serves them without ``_created``. Serve it with :class:`~otel_bridge.tools.simulation.vllm.VLLMServer`
(``route="negotiate"``, SGLang's route).
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Sequence
from typing import Any, Final

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from otel_bridge.tools.simulation.families import FamilySpec, create_metric, cumulative_totals, family_specs
from otel_bridge.tools.simulation.http import MetricsRoute, exposition

_TABLE_RESOURCE: Final = "data/sglang_0_5_23_metrics.json"
_SCHEDULER_RANKS: Final = {"moe_ep_rank": "0", "pp_rank": "0", "tp_rank": "0"}


@functools.cache
def sglang_family_specs() -> tuple[FamilySpec, ...]:
    """Every ``sglang:`` family of the SGLang 0.5.23 fixture, in exposition order (read from the package data)."""
    return family_specs(_TABLE_RESOURCE)


class _WithoutCreated:
    """A registry's families as prometheus_client's ``MultiProcessCollector`` serves them: no ``_created`` samples."""

    def __init__(self, registry: Collector) -> None:
        self._registry = registry

    def collect(self) -> list[Metric]:
        families: list[Metric] = []
        for family in self._registry.collect():
            family.samples = [s for s in family.samples if not s.name.endswith("_created")]
            families.append(family)
        return families


class _Lifetime:
    """One SGLang launch: every family created, the scheduler gauges and the abort counter at zero, as at start-up."""

    def __init__(self, model_name: str, engine_type: str) -> None:
        self.started = time.time()
        self._registry = CollectorRegistry()
        self.served = CollectorRegistry()
        self.served.register(_WithoutCreated(self._registry))
        self._base = {"engine_type": engine_type, "model_name": model_name}
        self._metrics = {spec.name: create_metric(spec, self._registry, {}) for spec in sglang_family_specs()}
        for spec in sglang_family_specs():
            if spec.kind == "gauge":
                self.child(spec.name)
        self.child("sglang:num_aborted_requests_total")

    def child(self, name: str, **labels: str) -> Any:
        metric = self._metrics[name]
        names = metric._labelnames
        values = {**self._base, **_SCHEDULER_RANKS, **labels}
        return metric.labels(**{label: values[label] for label in names})


class SGLangSimulator:
    """SGLang's ``/metrics`` for one server (one scheduler: ``tp_rank``/``pp_rank``/``moe_ep_rank`` 0), updated by
    explicit, thread-safe calls; :meth:`restart` is a new launch (everything from zero)."""

    def __init__(self, model_name: str = "tiny", engine_type: str = "unified") -> None:
        self.model_name = model_name
        self.engine_type = engine_type
        self._lock = threading.Lock()
        self._lifetime = _Lifetime(model_name, engine_type)

    def complete_request(
        self,
        prompt_tokens: int,
        generation_tokens: int,
        ttft_s: float,
        e2e_s: float,
        itl_s: Sequence[float] | float,
        streaming: bool = False,
    ) -> None:
        """Record one finished request as SGLang's tokenizer manager does (``is_streaming`` from ``streaming``);
        ``itl_s`` is one inter-token latency per generated token after the first, or one float for each."""
        gaps = max(generation_tokens - 1, 0)
        itls = [float(itl_s)] * gaps if isinstance(itl_s, int | float) else [float(v) for v in itl_s]
        if len(itls) != gaps or prompt_tokens < 0 or generation_tokens < 0 or min((ttft_s, e2e_s, *itls)) < 0:
            raise ValueError("a request needs token counts >= 0, latencies >= 0 and one itl_s per gap")
        streaming_label = {"is_streaming": "true" if streaming else "false"}
        with self._lock:
            life = self._lifetime
            life.child("sglang:prompt_tokens_total", **streaming_label).inc(prompt_tokens)
            life.child("sglang:generation_tokens_total", **streaming_label).inc(generation_tokens)
            life.child("sglang:num_requests_total", **streaming_label).inc()
            life.child("sglang:time_to_first_token_seconds", **streaming_label).observe(ttft_s)
            life.child("sglang:e2e_request_latency_seconds", **streaming_label).observe(e2e_s)
            if gaps:
                tpot = math.fsum(itls) / gaps
                life.child("sglang:request_time_per_output_token_seconds", **streaming_label).observe(tpot)
            itl = life.child("sglang:inter_token_latency_seconds")
            for value in itls:
                itl.observe(value)

    def set_running(self, n: int) -> None:
        """``sglang:num_running_reqs``."""
        self._set("sglang:num_running_reqs", n)

    def set_waiting(self, n: int) -> None:
        """``sglang:num_queue_reqs``."""
        self._set("sglang:num_queue_reqs", n)

    def set_token_usage(self, frac: float, used_tokens: int) -> None:
        """``sglang:token_usage`` (a fraction) and ``sglang:num_used_tokens``."""
        if not 0.0 <= frac <= 1.0:
            raise ValueError(f"token usage is a fraction in [0, 1], got {frac}")
        self._set("sglang:token_usage", frac)
        self._set("sglang:num_used_tokens", used_tokens)

    def _set(self, name: str, value: float) -> None:
        with self._lock:
            self._lifetime.child(name).set(value)

    @property
    def started(self) -> float:
        """When the current launch began (no page of SGLang's says so)."""
        with self._lock:
            return self._lifetime.started

    def restart(self) -> None:
        """A new launch: counters and histograms from zero, labelled series gone until their first observation."""
        lifetime = _Lifetime(self.model_name, self.engine_type)
        with self._lock:
            self._lifetime = lifetime

    def answer(self, accept: str, route: MetricsRoute) -> tuple[bytes, str]:
        """The ``/metrics`` answer (body, ``Content-Type``) to a scraper sending ``accept`` through ``route``."""
        with self._lock:
            return exposition(self._lifetime.served, accept, route)

    def totals(self) -> dict[str, float]:
        """Current cumulative values of every ``sglang:`` counter and histogram (``_total``/``_count``/``_sum``,
        summed over label values), keyed by sample name."""
        with self._lock:
            families = list(self._lifetime.served.collect())
        return cumulative_totals(families, "sglang:")
