"""``otel-bridge discover``: where Prometheus and the scrape targets are, and how they were found."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any, TextIO


def add_parser(commands: Any) -> None:
    """Register ``discover`` on the sub-command parsers ``commands``."""
    discover = commands.add_parser(
        "discover",
        help="show where Prometheus and the scrape targets are, without querying metrics",
        description="Run the resolver chain (config, OTEL_BRIDGE_PROMETHEUS_URL, RAY_PROMETHEUS_HOST, Ray head) and "
        "print what it finds and how.",
    )
    discover.add_argument("--config", type=Path, help="otel-bridge config file")
    discover.add_argument("--ray-address", help="connect to this Ray cluster first (ray.init(address=...))")
    discover.set_defaults(run=run)


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Print the Prometheus URL and the scrape targets; exit status 1 when one of them is not found."""
    from otel_bridge.config import AUTO, BridgeConfig
    from otel_bridge.discovery import ray_service_discovery_targets, resolve_prometheus_url
    from otel_bridge.errors import DiscoveryError

    config = BridgeConfig.load(args.config)
    if args.ray_address:
        from otel_bridge.discovery.ray_cluster import import_ray

        import_ray().init(address=args.ray_address, logging_level=logging.ERROR)
    status = 0
    try:
        resolution = resolve_prometheus_url(config.prometheus.url or AUTO, ray_port=config.prometheus.ray_port)
    except DiscoveryError as exc:
        out.write(f"prometheus: not found\n{exc}\n")
        status = 1
    else:
        out.write(f"prometheus: {resolution.url} (from {resolution.source})\n")
    if config.scrape.targets == AUTO:
        try:
            found = ray_service_discovery_targets(
                config.scrape.ray_service_discovery_file, temp_dir=config.scrape.ray_temp_dir
            )
        except DiscoveryError as exc:
            out.write(f"scrape targets: not found\n{exc}\n")
            status = 1
        else:
            out.write(f"scrape targets (Ray service discovery): {', '.join(found) or 'none'}\n")
    else:
        out.write(f"scrape targets (config): {', '.join(config.scrape_targets) or 'none'}\n")
    return status
