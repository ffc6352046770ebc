"""The PromQL path's child process (``python -m otel_bridge.producers.promql.child``): a
:class:`~otel_bridge.producers.promql.PromQLProducer` served to its :class:`~otel_bridge.producers.promql.PromQLProcess`
by :func:`otel_bridge.producers.isolation.serve`. Its boundary scrapes, when the window source uses them, are a
:class:`~otel_bridge.producers.scrape.ScrapeProducer` here (this process is already off the trainer's), or, when node
agents take them (``scrape.readers``), :class:`~otel_bridge.producers.scrape.NodeAgents` owned by this process, which
joins the trainer's Ray cluster as a driver of its own for them: they end with it, and it ends with the trainer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from otel_bridge.config import PrometheusConfig
from otel_bridge.discovery.ray_cluster import RayConnection
from otel_bridge.health import Health
from otel_bridge.http.transport import TransportOptions
from otel_bridge.producers.isolation import serve
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.promql._internal.connect import client_with
from otel_bridge.producers.promql.producer import PromQLProducer
from otel_bridge.producers.scrape import NodeAgents, ScrapeProducer, Scraper


def build(
    *,
    health: Health,
    prometheus: PrometheusConfig,
    url: str,
    transport: TransportOptions,
    queries: Sequence[MetricQuery],
    boundary_scrapes: dict[str, Any] | None,
    boundary_agents: RayConnection | None = None,
    **options: Any,
) -> PromQLProducer:
    """The producer for ``url`` (already resolved by the parent) with a client going out as the parent's did
    (``transport``: its TLS and credentials checked, and warned about, there) and the section's caps; its boundary
    scrapes built with ``boundary_scrapes`` (the :class:`ScrapeProducer`'s options), when given: taken by node agents
    on the cluster of ``boundary_agents`` when given, else by this process."""

    def boundary_scraper(urls: Sequence[str], counting: Sequence[MetricQuery]) -> Scraper:
        assert boundary_scrapes is not None
        if boundary_agents is not None:
            return NodeAgents(urls, counting, health=health, cluster=boundary_agents, **boundary_scrapes)
        return ScrapeProducer(urls, counting, health=health, discovered=False, **boundary_scrapes)

    scraper = boundary_scraper if boundary_scrapes is not None else None
    options.pop("produce_timeout_s")  # the parent's bound on this process' answers; each read keeps to its own budget
    client = client_with(prometheus, url, transport)
    return PromQLProducer(client, queries, boundary_scraper=scraper, health=health, **options)


if __name__ == "__main__":
    serve(build, "the PromQL process")
