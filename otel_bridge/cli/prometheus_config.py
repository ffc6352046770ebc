"""``otel-bridge prometheus-config``: write a prometheus.yml for the Ray pipeline."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from otel_bridge.errors import ConfigError


def add_parser(commands: Any) -> None:
    """Register ``prometheus-config`` on the sub-command parsers ``commands``."""
    prom = commands.add_parser(
        "prometheus-config",
        help="write a Prometheus config for the Ray pipeline",
        description="Write (atomically) a prometheus.yml scraping Ray's service-discovery file, the rollout servers "
        "and the trainer's own /metrics endpoint.",
    )
    prom.add_argument("out", type=Path, help="where to write prometheus.yml")
    prom.add_argument("--rollout", action="append", default=[], metavar="HOST:PORT", help="a rollout server (repeat)")
    prom.add_argument("--trainer", metavar="HOST:PORT", help="the trainer's /metrics endpoint (otel.prometheus)")
    where = prom.add_mutually_exclusive_group()
    where.add_argument("--ray-sd-file", type=Path, help="Ray's prom_metrics_service_discovery.json")
    where.add_argument("--ray-temp-dir", type=Path, help="Ray's --temp-dir (the file is found under it)")
    prom.add_argument("--interval", type=float, default=15.0, help="scrape interval in seconds (default 15)")
    prom.set_defaults(run=run)


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Write the config file."""
    from otel_bridge.cli.inputs import check_interval
    from otel_bridge.discovery import normalize_targets, ray_service_discovery_path, validate_target
    from otel_bridge.tools import prometheus_config, write_prometheus_config

    # the options are checked under their own names first (the writer's errors name its arguments)
    normalize_targets(args.rollout, "--rollout")
    if args.trainer is not None:
        validate_target(args.trainer, "--trainer")
    interval = check_interval(args.interval, "--interval")
    sd_file = args.ray_sd_file or (ray_service_discovery_path(args.ray_temp_dir) if args.ray_temp_dir else None)
    if not args.rollout and args.trainer is None and sd_file is None:
        raise ConfigError(
            "the Prometheus config would scrape nothing: give --rollout HOST:PORT (repeat), --trainer HOST:PORT, "
            "--ray-sd-file FILE or --ray-temp-dir DIR"
        )
    write_prometheus_config(
        args.out,
        prometheus_config(
            ray_sd_file=sd_file,
            rollout_targets=args.rollout,
            trainer_target=args.trainer,
            scrape_interval_s=interval,
        ),
    )
    if not args.quiet:
        out.write(f"wrote {args.out}\n")
    return 0
