"""ScrapeProcess: the scrape path with its work in a child process (``scrape.isolation: process``, the default).

Scraping is the one part of the bridge whose CPU grows with the cluster: every target's page is read and parsed at
each boundary and every ``sample_interval_s``. Here a :class:`~otel_bridge.producers.scrape.ScrapeProducer` runs in
the child :mod:`otel_bridge.producers.scrape.child`, through the machinery both wings share
(:class:`~otel_bridge.producers.isolation.ProducerProcess`: the child's lifetime, logs, health and what a child that
dies means), and the trainer's process only sends boundary times and receives each window's statistics.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from opentelemetry.sdk.metrics.export import ScopeMetrics

from otel_bridge.errors import ScrapeError
from otel_bridge.health import Health
from otel_bridge.producers.isolation import ANSWER_MARGIN_S, ChildKind, IsolatedProducer
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.window import StepWindow

_CHILD = ChildKind("otel_bridge.producers.scrape.child", "the scrape process", "the scrape path", ScrapeError)


class Scraper(Protocol):
    """What the bridge uses of a scrape producer, in this process or in a child."""

    @property
    def queries(self) -> list[MetricQuery]:
        """The resolved queries (types filled in after :meth:`start`)."""
        ...

    def start(self) -> None:
        """Scrape once to resolve metric types, then sample."""
        ...

    def on_boundary(self, t: float) -> None:
        """A step boundary at unix time ``t`` (never blocks)."""
        ...

    def produce(self, timeout_millis: float = 10_000, *, window: StepWindow) -> Sequence[ScopeMetrics]:
        """Statistics for ``window`` (:meth:`~otel_bridge.producers.base.MetricProducer.produce`)."""
        ...

    def set_targets(self, targets: Sequence[str]) -> None:
        """Scrape these targets from the next round on."""
        ...

    def unanswered(self) -> list[str]:
        """The targets whose latest scrape failed."""
        ...

    def close(self) -> None:
        """Stop and release everything."""
        ...


class ScrapeProcess(IsolatedProducer):
    """A :class:`~otel_bridge.producers.scrape.ScrapeProducer` in a child process (see the module docstring).

    Takes the producer's arguments; ``health`` is this process' :class:`Health`, kept current from the child's.
    """

    def __init__(
        self,
        targets: Sequence[str],
        queries: Sequence[MetricQuery],
        *,
        health: Health | None = None,
        produce_timeout_s: float = 30.0,
        start_timeout_s: float = 60.0,
        **options: Any,
    ) -> None:
        super().__init__(
            _CHILD,
            queries,
            {"targets": list(targets), **options},
            health=health,
            produce_timeout_s=produce_timeout_s,
            start_timeout_s=start_timeout_s,
        )

    def start(self) -> None:
        """The child scrapes once to resolve metric types, then starts sampling (its start-up errors raise here)."""
        self._start([])

    def set_targets(self, targets: Sequence[str]) -> None:
        """Scrape these targets from the child's next round on."""
        self._child.post("set_targets", list(targets))

    def unanswered(self) -> list[str]:
        """The targets whose latest scrape failed."""
        return list(self._child.call("unanswered", None, ANSWER_MARGIN_S))
