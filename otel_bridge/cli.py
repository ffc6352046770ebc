"""The ``otel-bridge`` command line.

``otel-bridge demo [--steps N] [--out DIR] [--prometheus-url URL]``: run the demo training loop against simulated vLLM
servers and write TensorBoard + JSONL under ``<out>/<run name>/``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from otel_bridge.errors import OtelBridgeError
from otel_bridge.exporters.record import StepRecord

_log = logging.getLogger("otel_bridge.cli")

TABLE_KEYS = (
    "actor/loss",
    "rollout/vllm/generation_tokens_total/delta",
    "rollout/vllm/generation_tokens_total/rate",
    "rollout/vllm/request_success_total/delta",
    "rollout/vllm/num_requests_running/max",
    "rollout/vllm/kv_cache_usage_perc/max",
    "rollout/vllm/prefix_cache_hit_rate",
    "rollout/vllm/time_to_first_token_seconds/p99",
    "rollout/vllm/e2e_request_latency_seconds/mean",
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="otel-bridge", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("-v", "--verbose", action="store_true", help="log details and show tracebacks")
    parser.add_argument("-q", "--quiet", action="store_true", help="only print errors")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="run a small training loop against simulated vLLM servers",
        description="Run a small training loop against two simulated vLLM rollout servers and write the per-step "
        "records (trainer + infrastructure) to TensorBoard and JSONL under OUT/<run name>/.",
    )
    demo.add_argument("--steps", type=int, default=20, help="training steps (default 20)")
    demo.add_argument("--out", type=Path, default=Path("runs"), help="parent directory of the run (default ./runs)")
    demo.add_argument("--run-name", default=None, help="run folder name (default demo-<timestamp>)")
    demo.add_argument(
        "--prometheus-url",
        default=None,
        help="read infrastructure metrics through this Prometheus (PromQL path); it must scrape the simulated "
        "servers at 127.0.0.1:SIM_PORT and SIM_PORT+1",
    )
    demo.add_argument(
        "--sim-port", type=int, default=0, help="first port of the simulated servers (default: free ports)"
    )
    demo.add_argument("--step-seconds", type=float, default=1.0, help="duration of one simulated step (default 1.0)")
    demo.add_argument(
        "--scrape-interval",
        type=float,
        default=1.0,
        help="the Prometheus scrape interval in seconds (PromQL path)",
    )
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
    discover = commands.add_parser(
        "discover",
        help="show where Prometheus and the scrape targets are, without querying metrics",
        description="Run the resolver chain (config, OTEL_BRIDGE_PROMETHEUS_URL, RAY_PROMETHEUS_HOST, Ray head) and "
        "print what it finds and how.",
    )
    discover.add_argument("--config", type=Path, help="otel-bridge config file")
    discover.add_argument("--ray-address", help="connect to this Ray cluster first (ray.init(address=...))")
    return parser


def format_table(records: Sequence[StepRecord], keys: Sequence[str] = TABLE_KEYS) -> str:
    """A plain-text table: one row per key, one column per step."""
    if not records:
        return "(no records)"
    width = max(len(k) for k in keys)
    header = "step".ljust(width) + "".join(f"{r.step:>12}" for r in records)
    lines = [header, "-" * len(header)]
    for key in keys:
        cells = "".join(f"{r.values[key]:>12.4g}" if key in r.values else f"{'-':>12}" for r in records)
        lines.append(key.ljust(width) + cells)
    return "\n".join(lines)


def _demo(args: argparse.Namespace, out: TextIO) -> int:
    from otel_bridge.demo import run_demo

    if args.steps < 1:
        raise SystemExit("otel-bridge demo: --steps must be at least 1")

    interactive = out.isatty()

    def progress(step: int) -> None:
        if args.quiet:
            return
        if interactive:
            out.write(f"\rstep {step + 1}/{args.steps}")
            out.flush()
        elif (step + 1) % 5 == 0 or step + 1 == args.steps:
            out.write(f"step {step + 1}/{args.steps}\n")

    result = run_demo(
        steps=args.steps,
        out=args.out,
        run_name=args.run_name,
        prometheus_url=args.prometheus_url,
        step_seconds=args.step_seconds,
        sim_port=args.sim_port,
        scrape_interval_s=args.scrape_interval,
        on_step=progress,
    )
    if not args.quiet:
        out.write("\n\n" + format_table(result.records) + "\n\n")
        out.write(f"records: {result.jsonl}\ntensorboard: tensorboard --logdir {result.run_dir / 'tensorboard'}\n")
    return 0


def _prometheus_config(args: argparse.Namespace, out: TextIO) -> int:
    from otel_bridge.discovery import ray_service_discovery_path
    from otel_bridge.prometheus.config_gen import write_prometheus_config

    sd_file = args.ray_sd_file or (ray_service_discovery_path(args.ray_temp_dir) if args.ray_temp_dir else None)
    write_prometheus_config(
        args.out,
        ray_sd_file=sd_file,
        rollout_targets=args.rollout,
        trainer_target=args.trainer,
        scrape_interval_s=args.interval,
    )
    if not args.quiet:
        out.write(f"wrote {args.out}\n")
    return 0


def _discover(args: argparse.Namespace, out: TextIO) -> int:
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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``otel-bridge`` console script."""
    args = _parser().parse_args(argv)
    level = logging.DEBUG if args.verbose else (logging.ERROR if args.quiet else logging.WARNING)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "demo":
            return _demo(args, sys.stdout)
        if args.command == "prometheus-config":
            return _prometheus_config(args, sys.stdout)
        if args.command == "discover":
            return _discover(args, sys.stdout)
    except OtelBridgeError as exc:
        if args.verbose:
            raise
        sys.stderr.write(f"otel-bridge: {exc}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("otel-bridge: interrupted\n")
        return 130
    return 1


if __name__ == "__main__":
    sys.exit(main())
