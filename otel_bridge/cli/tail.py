"""``otel-bridge tail``: a live, refreshing view of the configured metrics' window statistics.

No training loop is needed: the command drives a :class:`~otel_bridge.bridge.Bridge` (no trackers) with synthetic
steps of ``--interval`` seconds each, and after each step shows that window's record. Ctrl-C stops it cleanly (exit
status 0, the cursor restored); ``--count N`` stops after N refreshes.
"""

from __future__ import annotations

import argparse
import itertools
import signal
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from otel_bridge.cli.config_file import CONFIG_HELP, load_chosen_config
from otel_bridge.cli.inputs import printable
from otel_bridge.cli.output import CLEAR_SCREEN, HIDE_CURSOR, SHOW_CURSOR, colour, format_rows, format_value, use_colour
from otel_bridge.cli.query import parse_duration
from otel_bridge.config import RunConfig
from otel_bridge.errors import ConfigError

HEALTH_PREFIX = "otel_bridge/"


def add_parser(commands: Any) -> None:
    """Register ``tail`` on the sub-command parsers ``commands``."""
    tail = commands.add_parser(
        "tail",
        help="live view of the configured metrics' window statistics",
        description="Refresh a table of the configured metrics' window statistics every INTERVAL (each refresh "
        "shows the window that just ended), without a training loop. Ctrl-C stops it.",
    )
    tail.add_argument("--config", type=Path, help=CONFIG_HELP)
    tail.add_argument("--interval", default="2s", help="window length and refresh interval (default 2s)")
    tail.add_argument("--count", type=int, default=None, help="stop after this many refreshes (default: never)")
    tail.set_defaults(run=run)


def render(step: int, interval_s: float, values: dict[str, float], *, coloured: bool) -> str:
    """One frame: a header and a table of the window's infrastructure keys, then the health keys."""
    stamp = datetime.now().strftime("%H:%M:%S")
    header = colour(
        f"otel-bridge tail  window {step + 1}  ({format_value(interval_s)}s, ended {stamp})", "bold", coloured
    )
    infra = sorted(k for k in values if not k.startswith(HEALTH_PREFIX))
    health = sorted(k for k in values if k.startswith(HEALTH_PREFIX))
    parts = [header, ""]
    if infra:
        parts.append(
            format_rows(["key", "value"], [[printable(k), format_value(values[k])] for k in infra], right=(1,))
        )
    else:
        parts.append("(no infrastructure values in this window: run otel-bridge doctor)")
    if health:
        problems = [k for k in health if values[k] > 0 and k != "otel_bridge/step"]
        line = ", ".join(f"{printable(k.removeprefix(HEALTH_PREFIX))}={format_value(values[k])}" for k in health)
        parts += ["", colour("health: " + line, "yellow" if problems else "dim", coloured)]
    parts += ["", colour("Ctrl-C to stop", "dim", coloured)]
    return "\n".join(parts) + "\n"


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Refresh until Ctrl-C or ``--count`` refreshes; exit status 0 either way."""
    from otel_bridge.bridge import Bridge

    interval_s = parse_duration(args.interval, "--interval")
    if args.count is not None and args.count < 1:
        raise ConfigError(f"--count must be at least 1, got {args.count}")
    config = load_chosen_config(args)
    if config.resolved_source() is None or not config.metrics:
        raise ConfigError(
            "tail needs an infrastructure source and metrics: set prometheus.url or scrape.targets and metrics in "
            "the config (otel-bridge init writes one; see --config)"
        )
    interactive = out.isatty()
    coloured = use_colour(out)
    if threading.current_thread() is threading.main_thread():
        # "Ctrl-C to stop" is this command's contract: a Python started with SIGINT ignored (a job put in the
        # background of a script) installs no KeyboardInterrupt handler, and Ctrl-C would do nothing
        signal.signal(signal.SIGINT, signal.default_int_handler)
    with tempfile.TemporaryDirectory(prefix="otel-bridge-tail-") as tmp:
        config = config.model_copy(update={"trackers": [], "run": RunConfig(name="tail", dir=Path(tmp))})
        bridge = Bridge.from_config(config)
        if interactive:
            out.write(HIDE_CURSOR)
            out.flush()
        try:
            steps = range(args.count) if args.count is not None else itertools.count()
            for step in steps:
                with bridge.step(step):
                    time.sleep(interval_s)
                values = bridge.collect(step, timeout_s=max(30.0, 10 * interval_s))
                frame = render(step, interval_s, values, coloured=coloured)
                out.write((CLEAR_SCREEN + frame) if interactive else (frame + "\n"))
                out.flush()
        except KeyboardInterrupt:
            out.write("\nstopped\n")
        finally:
            if interactive:
                out.write(SHOW_CURSOR)
                out.flush()
            bridge.close(timeout_s=5.0)
    return 0
