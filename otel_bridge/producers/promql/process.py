"""PromQLProcess: the PromQL path with its work in a child process (``prometheus.isolation: process``, the default).

A step's reading through the store grows with what the store answers, up to the ``prometheus`` caps
(``max_series``, ``max_samples``, ``max_response_bytes``), which a user with a large cluster raises: one million
series decoded (JSON) and reduced in the trainer's process held the training thread 4.3-4.5 s at a step boundary,
under the same interpreter lock. Here a :class:`~otel_bridge.producers.promql.PromQLProducer` runs in the child
:mod:`otel_bridge.producers.promql.child` through the machinery both wings share
(:class:`~otel_bridge.producers.isolation.ProducerProcess`: the child's lifetime, logs, health and what a child that
dies means), and the trainer's process only sends boundary times and receives each window's statistics, whatever
the size of the answers (docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from otel_bridge.config import BoundaryMode, PrometheusConfig
from otel_bridge.discovery.ray_cluster import RayConnection
from otel_bridge.errors import PrometheusError
from otel_bridge.health import Health
from otel_bridge.http.transport import TransportOptions
from otel_bridge.producers.isolation import ChildKind, IsolatedProducer
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.promql._internal.rules import RuleSet
from otel_bridge.producers.promql._internal.store import Store

_CHILD = ChildKind("otel_bridge.producers.promql.child", "the PromQL process", "the PromQL path", PrometheusError)


class PromQLProcess(IsolatedProducer):
    """A :class:`~otel_bridge.producers.promql.PromQLProducer` in a child process (see the module docstring).

    ``prometheus``: the section (its caps and plan options); ``url``: the store's URL, resolved here (``url: auto``);
    ``transport``: how its requests go out, as checked here (TLS, credentials read from their environment variable or
    file, warned about once): the child builds its client with it; ``boundary_scrapes``: the options of the
    :class:`~otel_bridge.producers.scrape.ScrapeProducer` the child's boundary scrapes use (picklable: a transport's
    options, intervals and caps), ``None`` with ``boundary: samples``; ``boundary_agents``: the Ray cluster the child
    joins, as a driver of its own, to take them with node agents it owns (``scrape.readers`` resolved to
    ``node_agents``), ``None``: the child reads them itself; ``produce_timeout_s``: the longest a request to the child
    (its start-up, one window) may take before it is given up; the other options are the producer's.
    """

    def __init__(
        self,
        prometheus: PrometheusConfig,
        url: str,
        transport: TransportOptions,
        queries: Sequence[MetricQuery],
        *,
        health: Health | None = None,
        boundary_scrapes: dict[str, Any] | None = None,
        boundary_agents: RayConnection | None = None,
        produce_timeout_s: float = 30.0,
        start_timeout_s: float = 60.0,
        **options: Any,
    ) -> None:
        self._boundary: BoundaryMode = options.get("boundary", "samples")
        self._rules: RuleSet | None = None
        self._store: Store | None = None
        arguments = {
            "prometheus": prometheus,
            "url": url,
            "transport": transport,
            "boundary_scrapes": boundary_scrapes,
            "boundary_agents": boundary_agents,
            **options,
        }
        super().__init__(
            _CHILD,
            queries,
            arguments,
            health=health,
            produce_timeout_s=produce_timeout_s,
            start_timeout_s=start_timeout_s,
        )

    @property
    def boundary(self) -> BoundaryMode:
        """How windows are bounded: ``scrape`` or ``samples`` once started (as configured before)."""
        return self._boundary

    @property
    def rules(self) -> RuleSet | None:
        """The bridge's recording rules Prometheus runs, when they serve any query (known once started)."""
        return self._rules

    @property
    def store(self) -> Store | None:
        """What ``prometheus.url`` is and what its queries may use (known once started)."""
        return self._store

    def start(self) -> None:
        """The child negotiates with the store and chooses the window source
        (:meth:`~otel_bridge.producers.promql.PromQLProducer.start`: its errors raise here, of the same types)."""
        started = self._start(["boundary", "rules", "store"])
        self._boundary, self._rules, self._store = started["boundary"], started["rules"], started["store"]
