"""``otel-bridge discover``: where Prometheus and the scrape targets are, and how they were found."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from otel_bridge.cli.config_file import CONFIG_HELP, announce_config


def add_parser(commands: Any) -> None:
    """Register ``discover`` on the sub-command parsers ``commands``."""
    discover = commands.add_parser(
        "discover",
        help="show where Prometheus and the scrape targets are, without querying metrics",
        description="Run the resolver chain (config, OTEL_BRIDGE_PROMETHEUS_URL, RAY_PROMETHEUS_HOST, Ray head) and "
        "print what it finds and how.",
    )
    discover.add_argument("--config", type=Path, help=CONFIG_HELP)
    discover.add_argument("--ray-address", help="connect to this Ray cluster first (ray.init(address=...))")
    discover.set_defaults(run=run)


def prometheus_url_origin(config_path: Path | None, environ: Mapping[str, str] | None = None) -> str | None:
    """Which environment variable set the loaded config's ``prometheus.url``; ``None`` when the file's own value (or
    nothing) stands. ``OTEL_BRIDGE__PROMETHEUS__URL`` overrides any value; ``OTEL_BRIDGE_PROMETHEUS_URL`` fills in an
    unset or ``auto`` one (see :mod:`otel_bridge.config`)."""
    from otel_bridge.config import AUTO, ENV_PREFIX, ENV_PROMETHEUS_URL, read_yaml

    environ = os.environ if environ is None else environ
    override = f"{ENV_PREFIX}PROMETHEUS__URL"
    if environ.get(override):
        return f"env {override}"
    if not environ.get(ENV_PROMETHEUS_URL):
        return None
    file_url: Any = None
    if config_path is not None:
        section = read_yaml(config_path).get("prometheus")
        file_url = section.get("url") if isinstance(section, dict) else None
    return f"env {ENV_PROMETHEUS_URL}" if file_url in (None, AUTO) else None


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Print the Prometheus URL and the scrape targets; exit status 1 when one of them is not found."""
    from otel_bridge.config import AUTO, BridgeConfig
    from otel_bridge.discovery import ray_service_discovery_targets, resolve_prometheus_url
    from otel_bridge.errors import DiscoveryError

    config_path = announce_config(args).path
    config = BridgeConfig.load(config_path)
    if args.ray_address:
        from otel_bridge.discovery import import_ray

        import_ray().init(address=args.ray_address, logging_level=logging.ERROR)
    status = 0
    origin = prometheus_url_origin(config_path)
    if config.resolved_source() == "scrape":
        out.write("prometheus: not used (scrape path: the bridge reads scrape.targets itself)\n")
    elif origin is not None and config.prometheus.url not in (None, AUTO):
        out.write(f"prometheus: {config.prometheus.url} (from {origin})\n")
    else:
        try:
            resolution = resolve_prometheus_url(config.prometheus.url, ray_port=config.prometheus.ray_port)
        except DiscoveryError as exc:
            out.write(f"prometheus: not found\n{exc}\n")
            if not args.ray_address:
                out.write(
                    "hint: on a Ray cluster, pass --ray-address auto (on one of its nodes) or --ray-address HOST:PORT "
                    "so that discover joins it and finds the head node's Prometheus\n"
                )
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
