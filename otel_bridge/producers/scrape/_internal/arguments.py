"""What every reader of scrape targets is given, checked once for all of them: the scrape producer (in this process or
its child) and the node agents. A configured target becomes a URL (:func:`target_url`), and a reader refuses at
construction what it could never read (:func:`check_reader`)."""

from __future__ import annotations

from collections.abc import Sequence

from otel_bridge.errors import ConfigError
from otel_bridge.producers.metric_set import MetricQuery

__all__ = ["check_reader", "target_url"]


def target_url(target: str) -> str:
    """``target`` as a URL: ``host:port`` means ``http://host:port/metrics``."""
    return target if "://" in target else f"http://{target}/metrics"


def check_reader(
    targets: Sequence[str], queries: Sequence[MetricQuery], *, discovered: bool, needs_types: bool = False
) -> None:
    """:class:`ConfigError` for a reader of ``targets`` that cannot read ``queries``: a PromQL expression (the PromQL
    path's alone), no target while none are ``discovered``, and with ``needs_types`` (node agents: each node's agent
    sees only its own targets, so none may resolve a type) a metric without its type."""
    untyped = [q for q in queries if q.needs_kind] if needs_types else []
    if untyped:
        raise ConfigError(
            f"scrape.readers: node_agents needs every metric's type, and metrics[{untyped[0].source_index}] "
            f"{untyped[0].name} has none: set its type (counter, gauge or histogram), or scrape.readers: trainer"
        )
    if any(q.promql is not None for q in queries):
        raise ConfigError("promql metrics need the PromQL path: set prometheus.url")
    if not targets and not discovered:
        raise ConfigError("scrape.targets is empty: list the /metrics URLs (or host:port) of the rollout servers")
