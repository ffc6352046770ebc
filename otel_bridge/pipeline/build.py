"""Building the pipeline from configuration: the producers that read the infrastructure (each owning whatever keeps
its targets current) and the tracker backends. :class:`~otel_bridge.bridge.Bridge` calls these once, at start-up;
everything that can fail here fails before a tracker run is created.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from otel_bridge.config import AUTO, BridgeConfig, Readers
from otel_bridge.discovery import RolloutServers, ray_service_discovery_targets, rollout_targets
from otel_bridge.discovery.ray_cluster import alive_node_count, this_connection
from otel_bridge.errors import ConfigError
from otel_bridge.exporters.backends.base import Backend
from otel_bridge.exporters.backends.registry import create_backend
from otel_bridge.health import Health
from otel_bridge.http.credentials import tls_arguments
from otel_bridge.http.transport import TransportOptions
from otel_bridge.producers.base import MetricProducer
from otel_bridge.producers.metric_set import MetricQuery, resolve_metrics
from otel_bridge.producers.promql import PromQLProcess, PromQLProducer, connect
from otel_bridge.producers.scrape import NodeAgents, ScrapeProcess, ScrapeProducer, Scraper, WatchedScraper

_log = logging.getLogger(__name__)


def build_producers(
    config: BridgeConfig, health: Health, rollout_servers: RolloutServers | None = None
) -> list[MetricProducer]:
    """The producers ``config`` asks for: a :class:`PromQLProducer` (``source: promql``), a scrape producer
    (``source: scrape``), or none when no metrics or no source are configured. Nothing is contacted yet: their
    ``start()`` does that (and the bridge's ``startup`` decides what a source that cannot be reached means)."""
    queries = resolve_metrics(config.metrics, config.roles, config.max_groups)
    source = config.resolved_source()
    if not queries or source is None:
        return []
    if source == "promql":
        return [_promql_producer(config, health, queries)]
    return [_scrape_producer(config, health, queries, rollout_servers)]


def _promql_producer(
    config: BridgeConfig, health: Health, queries: list[MetricQuery]
) -> PromQLProducer | PromQLProcess:
    """The PromQL path: in a child process unless ``prometheus.isolation`` is ``thread``. The URL (``auto`` resolved),
    credentials and TLS files are checked here either way, so a bad section fails at start-up in this process."""
    prom = config.prometheus
    assert prom.url is not None
    client = connect(prom)
    tls = scrape_tls(config) if prom.boundary != "samples" else None  # checked now: a bad scrape.tls fails at start
    readers = scrape_readers(config) if tls is not None else "trainer"
    options: dict[str, Any] = {
        "scrape_interval_s": prom.scrape_interval_s,
        "boundary": prom.boundary,
        "boundary_max_targets": prom.boundary_max_targets,
        "boundary_readers": readers,
        "recording_rules": prom.recording_rules,
        "refresh_interval_s": config.scrape.refresh_interval_s,
        "warn_interval_s": config.delivery.warn_interval_s,
        "max_clock_offset_s": prom.max_clock_offset_s,
    }
    if prom.isolation == "process":
        url, transport = client.url, client.transport  # the child goes out as checked here
        client.close()
        scrapes = None if tls is None else _boundary_scrape_options(config, tls)
        return PromQLProcess(
            prom,
            url,
            transport,
            queries,
            health=health,
            boundary_scrapes=scrapes,
            boundary_agents=this_connection() if readers == "node_agents" else None,  # the child joins the cluster
            produce_timeout_s=config.delivery.produce_timeout_s,
            **options,
        )

    def boundary_scraper(urls: Sequence[str], counting: Sequence[MetricQuery]) -> Scraper:
        if readers == "node_agents":
            return NodeAgents(urls, counting, health=health, **_boundary_scrape_options(config, tls))
        return scrape_producer(config, health, urls, counting, discovered=False, tls=tls)

    return PromQLProducer(client, queries, boundary_scraper=boundary_scraper, health=health, **options)


TLSArguments = tuple[bool | str, tuple[str, str] | str | None]
"""requests' ``verify`` and ``cert``."""


def scrape_tls(config: BridgeConfig) -> TLSArguments:
    """The ``scrape.tls`` section as requests' ``verify`` and ``cert`` (:class:`ConfigError` for missing files)."""
    return tls_arguments(config.scrape.tls, "scrape", "the scrape targets")


def scrape_transport(config: BridgeConfig, tls: TLSArguments | None = None) -> TransportOptions:
    """How the scrape targets are read: the ``scrape`` section's deadline, body cap, TLS (``tls``: :func:`scrape_tls`
    already computed) and credentials, read now from their environment variable or file."""
    scrape = config.scrape
    verify, cert = tls if tls is not None else scrape_tls(config)
    return TransportOptions(
        timeout_s=scrape.timeout_s,
        max_response_bytes=scrape.max_response_bytes,
        verify=verify,
        cert=cert,
        bearer_token=scrape.auth.bearer_token(),
        basic_auth=scrape.auth.basic_auth(),
    )


def scrape_producer(
    config: BridgeConfig,
    health: Health,
    targets: Sequence[str],
    queries: Sequence[MetricQuery],
    *,
    discovered: bool,
    tls: TLSArguments | None = None,
) -> Scraper:
    """A :class:`ScrapeProducer` reading ``targets`` with the ``scrape`` section's transport (:func:`scrape_transport`)
    and caps, in a child process unless ``scrape.isolation`` is ``thread``."""
    return (ScrapeProcess if config.scrape.isolation == "process" else ScrapeProducer)(
        targets, queries, health=health, discovered=discovered, **_boundary_scrape_options(config, tls)
    )


def _boundary_scrape_options(config: BridgeConfig, tls: TLSArguments | None) -> dict[str, Any]:
    """A scrape producer's options from the ``scrape`` and ``delivery`` sections (picklable: a PromQL child builds its
    boundary scrapes with them)."""
    scrape = config.scrape
    return {
        "transport": scrape_transport(config, tls),
        "sample_interval_s": scrape.sample_interval_s,
        "max_series": scrape.max_series,
        "produce_timeout_s": config.delivery.produce_timeout_s,
        "warn_interval_s": config.delivery.warn_interval_s,
    }


def scrape_readers(config: BridgeConfig) -> Readers:
    """Who reads the scrape targets, or the PromQL path's boundary readings of the targets Prometheus lists
    (``scrape.readers``): ``auto`` is the node agents when the targets are discovered (``scrape.targets: auto``, or
    Prometheus' on the PromQL path) and this process is connected to a Ray cluster of several alive nodes, else the
    trainer. ``node_agents`` without Ray initialised here is a :class:`ConfigError`."""
    readers = config.scrape.readers
    discovered = config.scrape.targets == AUTO or config.resolved_source() == "promql"
    if readers == "trainer" or (readers == "auto" and not discovered):
        return "trainer"  # and ray is not imported for it
    nodes = alive_node_count()
    if readers == "node_agents":
        if nodes is None:
            raise ConfigError(
                "scrape.readers: node_agents reads the targets with Ray actors, and Ray is not initialised in this "
                "process: call ray.init() (ray.init(address='auto') joins a running cluster) before the bridge "
                "starts, or set scrape.readers: trainer"
            )
        return "node_agents"
    return "node_agents" if nodes is not None and nodes > 1 else "trainer"


def _scrape_producer(
    config: BridgeConfig,
    health: Health,
    queries: list[MetricQuery],
    rollout_servers: RolloutServers | None,
) -> MetricProducer:
    scrape = config.scrape
    static = config.scrape_targets
    registered = rollout_targets(rollout_servers) if rollout_servers is not None else []
    discovered = scrape.targets == AUTO
    producer: Scraper
    if scrape_readers(config) == "node_agents":
        producer = NodeAgents(
            [*static, *registered],
            queries,
            health=health,
            discovered=discovered,
            **_boundary_scrape_options(config, None),
        )
    else:
        producer = scrape_producer(config, health, [*static, *registered], queries, discovered=discovered)
    if not discovered:
        return producer

    def resolve() -> list[str]:
        found = ray_service_discovery_targets(scrape.ray_service_discovery_file, temp_dir=scrape.ray_temp_dir)
        again = rollout_targets(rollout_servers) if rollout_servers is not None else []
        return sorted({*found, *again, *static})

    return WatchedScraper(
        producer,
        resolve,
        interval_s=scrape.refresh_interval_s,
        name="scrape targets",
        warn_interval_s=config.delivery.warn_interval_s,
    )


def create_backends(config: BridgeConfig, run_dir: Path) -> list[Backend]:
    """The configured trackers, writing under ``run_dir``.

    When one cannot be created, those already created are closed and a run directory this call created is removed,
    so that a failed start leaves no empty run behind.
    """
    run_dir_existed = run_dir.exists()
    created: list[Backend] = []
    try:
        for tracker in config.trackers:
            created.append(create_backend(tracker.type, tracker.options(), run_dir))
    except BaseException:
        for backend in created:
            backend.close()
        if not run_dir_existed and run_dir.is_dir():
            shutil.rmtree(run_dir, ignore_errors=True)
            _log.info("otel-bridge: removed %s, created by this failed start", run_dir)
        raise
    return created


def process_rank(config: BridgeConfig) -> int:
    """This process' rank: ``otel.rank``, else ``$RANK``, else 0."""
    if config.otel.rank is not None:
        return config.otel.rank
    raw = os.environ.get("RANK", "0")
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"$RANK must be an integer, got {raw!r}; or set otel.rank") from None
