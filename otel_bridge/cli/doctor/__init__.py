"""``otel-bridge doctor``: every check between the config and the trackers, with the fix for each failure.

Checks, in order (each is ``pass``, ``fail``, ``warn`` or ``skip``):

1. ``config``: the config file loads and validates.
2. ``ray``: Ray is reachable and its head node found (only with ``prometheus.url: auto`` or ``scrape.targets: auto``).
3. ``prometheus``: Prometheus answers, and its version (PromQL path).
4. ``prometheus targets``: every scrape target of Prometheus is ``up`` (after its first scrape of each, when it has
   just started).
   ``step boundaries``: Prometheus' scrape interval against the step lengths of the newest run of this config in
   ``run.dir`` (:func:`~otel_bridge.pipeline.run_dir.runs_of`): a warning when samples may bound steps that are
   shorter than two scrape intervals (under ``prometheus.boundary: auto``, settled by the ``step`` check).
5. ``endpoint <url>``: every rollout ``/metrics`` endpoint answers (scrape path).
6. ``step``: the producer a run builds from the same config starts (the run's start-up check) and reads one step's
   window with the run's own queries, so doctor cannot pass where a run fails to start or misses a metric.
   ``metric <key>``: every configured metric returns series now, from which instances, and the keys the step
   recorded it under.
7. ``deprecated <name>``: configured vLLM names that vLLM 0.32 removed, with the replacement.
8. ``run dir``: ``run.dir`` can be created and written to.
9. ``tracker <type>``: every tracker backend imports and writes one record into a temporary run directory.

Each check is a function over the run's :class:`~otel_bridge.cli.doctor.context.DoctorContext`, in the module of what
it looks at: :mod:`~otel_bridge.cli.doctor.local` (1, 2, 8, 9), :mod:`~otel_bridge.cli.doctor.prometheus` (3, 4),
:mod:`~otel_bridge.cli.doctor.metrics` (5, 6, 7); :func:`run_checks` runs them in order.

The exit status is 0 only when no check failed. ``--json`` prints ``{"ok", "config", "checks": [{"name", "status",
"detail", "fix"}]}`` (see docs/cli.md). Secrets read from the config's auth settings never appear in the output.
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

from otel_bridge.cli.config_file import CONFIG_HELP, choose_config
from otel_bridge.cli.doctor.context import STATUSES, Check, DoctorContext, Status
from otel_bridge.cli.doctor.local import check_config, check_ray, check_run_dir, check_trackers
from otel_bridge.cli.doctor.metrics import check_deprecated, check_endpoints, check_metrics
from otel_bridge.cli.doctor.prometheus import (
    check_boundaries,
    check_prometheus,
    check_prometheus_targets,
    check_query_plan,
)
from otel_bridge.cli.inputs import check_url
from otel_bridge.cli.output import STATUS_COLOURS, colour, format_rows, one_line, use_colour
from otel_bridge.prometheus import ExpositionFamily

__all__ = [
    "STATUSES",
    "Check",
    "DoctorContext",
    "Status",
    "add_parser",
    "as_json",
    "render_table",
    "run",
    "run_checks",
]


def add_parser(commands: Any) -> None:
    """Register ``doctor`` on the sub-command parsers ``commands``."""
    doctor = commands.add_parser(
        "doctor",
        help="check config, Ray, Prometheus, metrics, endpoints and trackers, with the fix for each failure",
        description="Run every check from the config to the trackers and print a pass/fail table with the fix for "
        "each failure. Exit status 0 only when nothing failed.",
    )
    doctor.add_argument("--config", type=Path, help=CONFIG_HELP)
    doctor.add_argument("--json", action="store_true", help="print the result as JSON (shape in docs/cli.md)")
    doctor.add_argument("--ray-address", default="auto", help="Ray cluster to join when Ray is needed (default auto)")
    doctor.add_argument("--prometheus-url", help="check this Prometheus (overrides prometheus.url of the config)")
    doctor.set_defaults(run=run)


def run_checks(context: DoctorContext) -> list[Check]:
    """Run every check in order on ``context`` and return the outcomes."""
    config = check_config(context)
    if config is None:
        for name in ("ray", "prometheus", "metrics", "trackers"):
            context.add(name, "skip", "the config is invalid")
        return context.checks
    check_ray(context, config)
    client = check_prometheus(context, config)
    families: dict[str, dict[str, ExpositionFamily]] = {}
    if client is not None:
        if context.store is not None:
            check_query_plan(context, config, client, context.store)
        check_prometheus_targets(context, client)
        check_boundaries(context, config, client)
    elif config.resolved_source() == "scrape":
        families = check_endpoints(context, config)
    try:
        check_metrics(context, config, client, families)
    finally:
        if client is not None:
            client.close()
    check_deprecated(context, config)
    check_run_dir(context, config.run.dir)
    check_trackers(context, config.trackers)
    return context.checks


def render_table(checks: Sequence[Check], stream: TextIO, width: int | None = None) -> str:
    """The human-readable report: a table of checks (details cut to the terminal), then each problem and its fix."""
    coloured = use_colour(stream)
    name_width = max(len(c.name) for c in checks)
    if width is None and not _is_terminal(stream):
        room = None  # a file or a pipe gets every detail whole
    else:
        room = max(30, (width or shutil.get_terminal_size((120, 24)).columns) - name_width - 10)
    rows = [
        [colour(c.status.upper(), STATUS_COLOURS[c.status], coloured), c.name, _cut(c.detail, room)] for c in checks
    ]
    text = format_rows(["status", "check", "detail"], rows)
    problems = [c for c in checks if c.status in ("fail", "warn") and c.fix]
    if problems:
        text += "\n\nto fix:"
        for check in problems:
            name = colour(check.name, STATUS_COLOURS[check.status], coloured)
            text += f"\n  {name}: {one_line(check.detail)}\n    fix: {one_line(check.fix or '')}"
    failed = sum(c.status == "fail" for c in checks)
    warned = sum(c.status == "warn" for c in checks)
    if failed:
        summary, tone = f"{failed} check(s) failed", "red"
    elif warned:
        summary, tone = f"no check failed; {warned} warning(s) above", "yellow"
    else:
        summary, tone = "all checks passed", "green"
    return text + "\n\n" + colour(summary, tone, coloured) + "\n"


def _is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(callable(isatty) and isatty())


def _cut(text: str, limit: int | None) -> str:
    text = one_line(text)
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


def as_json(context: DoctorContext) -> dict[str, Any]:
    """The ``--json`` document: ``{"ok", "config", "checks": [{"name", "status", "detail", "fix"}]}``."""
    return {
        "ok": context.ok,
        "config": str(context.config_path) if context.config_path else None,
        "checks": [asdict(c) for c in context.checks],
    }


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Run the checks and print the table (or JSON); exit status 0 when nothing failed, else 1."""
    choice = choose_config(args.config)
    if args.prometheus_url is not None:
        check_url(args.prometheus_url, "--prometheus-url")
    context = DoctorContext(
        choice.path, ray_address=args.ray_address, prometheus_url=args.prometheus_url, config_reason=choice.reason
    )
    run_checks(context)
    if args.json:
        out.write(json.dumps(as_json(context), indent=2) + "\n")
    elif not args.quiet or not context.ok:
        out.write(render_table(context.checks, out))
    return 0 if context.ok else 1
