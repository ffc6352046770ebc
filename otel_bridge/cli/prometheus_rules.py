"""``otel-bridge prometheus-rules``: write the recording rules that make a step's reading independent of replicas."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from otel_bridge.cli.config_file import CONFIG_HELP, load_chosen_config
from otel_bridge.config import MetricConfig
from otel_bridge.errors import ConfigError


def add_parser(commands: Any) -> None:
    """Register ``prometheus-rules`` on the sub-command parsers ``commands``."""
    rules = commands.add_parser(
        "prometheus-rules",
        help="write otel-bridge's recording rules for Prometheus (rule_files)",
        description="Write (atomically) a Prometheus rule file with the recording rules the bridge reads a step's "
        "counters and histograms through (prometheus.recording_rules), for the metrics of the config. Load it "
        "with rule_files: in prometheus.yml and evaluate it as often as the targets are scraped; the bridge "
        "checks at start-up that Prometheus runs it unchanged.",
    )
    rules.add_argument("out", type=Path, help="where to write the rule file")
    rules.add_argument("--config", type=Path, help=f"{CONFIG_HELP}; without any: the vllm preset")
    rules.add_argument(
        "--interval", type=float, help="evaluation interval in seconds (default: prometheus.scrape_interval_s)"
    )
    rules.set_defaults(run=run)


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Write the rule file for the config's metrics."""
    from otel_bridge.cli.inputs import check_interval
    from otel_bridge.producers import resolve_metrics
    from otel_bridge.producers.promql import counting, rules_document
    from otel_bridge.tools import write_rule_file

    config = load_chosen_config(args)
    queries = resolve_metrics(config.metrics or [MetricConfig(preset="vllm")])
    untyped = [q for q in queries if q.needs_kind]
    if untyped:
        raise ConfigError(
            f"metrics[{untyped[0].source_index}] {untyped[0].name}: the rules depend on the metric's type; set "
            "type: counter, gauge or histogram for it in the config"
        )
    if not any(counting(q) for q in queries):
        raise ConfigError("the config's metrics have no counter, histogram or ratio: there is nothing to pre-sum")
    if args.interval is not None:
        interval = check_interval(args.interval, "--interval")
    else:
        interval = check_interval(config.prometheus.scrape_interval_s, "prometheus.scrape_interval_s")
    write_rule_file(args.out, rules_document(queries, interval))
    if not args.quiet:
        out.write(f"wrote {args.out}: load it with rule_files: in prometheus.yml\n")
    return 0
