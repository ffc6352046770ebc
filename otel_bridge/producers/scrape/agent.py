"""NodeAgent: the body of the Ray actor that reads one node's scrape targets (``scrape.readers: node_agents``).

It is a :class:`~otel_bridge.producers.scrape.ScrapeProducer` of the node's targets, in the actor's own process on
that node: the same sampler, the same rule for which reading stands for a boundary, the same restarts, unread targets
and waits; instead of metrics it answers each window with the targets' mergeable partial statistics
(:class:`~otel_bridge.producers.partials.WindowPartial`), which the trainer merges with the other nodes'
(:mod:`otel_bridge.producers.scrape.node_agents` places, tells and replaces the agents).

The actor runs its methods on several threads (``max_concurrency``): a boundary is taken while a window's partial
waits for its readings, as the scrape path's sampler takes them in one process, and one thread holds its owner's
:meth:`NodeAgent.watch` call for the agent's lifetime.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from otel_bridge.health import SCRAPE_ERRORS, Health
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.partials import WindowPartial
from otel_bridge.producers.scrape.producer import ScrapeProducer
from otel_bridge.window import StepWindow

__all__ = ["NodeAgent"]

_log = logging.getLogger(__name__)


class NodeAgent:
    """Reads ``targets`` (URLs on this agent's node -> since when each is a target of the run) for the configured
    ``queries`` (their types known); ``node`` names it in log lines and in its partials; ``options`` are the scrape
    producer's (transport, intervals, caps)."""

    def __init__(
        self,
        node: str,
        targets: Mapping[str, float],
        queries: Sequence[MetricQuery],
        options: dict[str, Any],
    ) -> None:
        self._node = node
        self._health = Health()
        self._producer = ScrapeProducer(
            list(targets), queries, discovered=True, since=targets, health=self._health, **options
        )
        self._lock = threading.Lock()
        self._errors_sent: dict[str, float] = {}  # instance -> failed scrapes told to the trainer
        self._closed = threading.Event()
        self._given: dict[str, tuple[float, float]] = {}
        self._take(targets)

    def start(self) -> list[str]:
        """Scrape the targets once and start sampling (the trainer waits for it); answers the targets (``host:port``)
        whose first scrape failed."""
        self._producer.start()
        _log.info("node agent %s reading %d target(s)", self._node, len(self._producer.targets))
        return self._producer.unanswered()

    def watch(self) -> None:
        """Return only when the agent is closed: its owner holds this call for the agent's lifetime, and the call
        fails as soon as Ray finds the agent dead (its process, or its node), so the owner replaces it then."""
        self._closed.wait()

    def on_boundary(self, t: float) -> None:
        """A boundary at unix time ``t``: every target is read at or after it."""
        self._producer.on_boundary(t)

    def set_targets(self, targets: Mapping[str, float]) -> None:
        """Read these targets (URL -> since when each is a target of the run) from the next round on: a target new to
        this agent is unread at the boundaries since then until its first reading here."""
        self._take(targets)
        self._producer.set_targets(list(targets), targets)

    def _take(self, targets: Mapping[str, float]) -> None:
        """Note when this agent was given each of ``targets`` (by its own clock) beside when it became a target of the
        run, keeping both for those it had already."""
        now = time.time()
        with self._lock:
            self._given = {
                (instance := urlsplit(url).netloc): self._given.get(instance, (since, now))
                for url, since in targets.items()
            }

    def partial(self, window: StepWindow, timeout_millis: float) -> WindowPartial:
        """The node's partial of ``window``, within ``timeout_millis`` (a target not read by then is unread).

        A target is also unread in a window that began while it was a target of the run but before this agent had it
        (it replaces an agent that died, or the target moved node): that window's start was read by no agent of the
        run, and this agent's first reading, standing for it, holds only what was counted from then on."""
        partial = self._producer.partial(window, timeout_millis, reader=f"the node agent of {self._node}")
        start = window.start
        with self._lock:
            missed = {
                instance: window.end - since
                for instance, (since, given) in self._given.items()
                if start is not None and since <= start < given
            }
        return replace(partial, unread={**missed, **partial.unread}, scrape_errors=self._new_errors())

    def _new_errors(self) -> dict[str, float]:
        """The failed scrapes of each target since the previous partial (only the targets with any)."""
        errors = {
            labels[0][1]: value for name, labels, value in self._health.snapshot() if name == SCRAPE_ERRORS and labels
        }
        with self._lock:
            new = {i: n - self._errors_sent.get(i, 0.0) for i, n in errors.items() if n > self._errors_sent.get(i, 0.0)}
            self._errors_sent = {i: n for i, n in errors.items()}
        return new

    def close(self) -> None:
        """Stop sampling (the actor ends with the run; this only makes it quicker)."""
        self._closed.set()
        self._producer.close()
