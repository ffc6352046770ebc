"""The ``otel-bridge`` command line.

``otel-bridge demo | init | doctor | discover | query | tail | plot | prometheus-config | prometheus-rules``, each
with ``--help``.
Global flags: ``--verbose`` (debug logs, tracebacks) and ``--quiet`` (errors only). Errors print one actionable line
on stderr and exit with status 2 (1 when a command ran and found problems, e.g. ``doctor``; 130 on Ctrl-C outside
``tail``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn, TextIO

from otel_bridge import __version__
from otel_bridge.cli.demo import TABLE_KEYS, format_table
from otel_bridge.cli.demo import add_parser as add_demo
from otel_bridge.cli.discover import add_parser as add_discover
from otel_bridge.cli.doctor import add_parser as add_doctor
from otel_bridge.cli.init import add_parser as add_init
from otel_bridge.cli.output import error_line
from otel_bridge.cli.plot import add_parser as add_plot
from otel_bridge.cli.prometheus_config import add_parser as add_prometheus_config
from otel_bridge.cli.prometheus_rules import add_parser as add_prometheus_rules
from otel_bridge.cli.query import add_parser as add_query
from otel_bridge.cli.tail import add_parser as add_tail
from otel_bridge.errors import OtelBridgeError

__all__ = ["TABLE_KEYS", "build_parser", "format_table", "main"]

VERBOSE_HELP = "log details and show tracebacks"
QUIET_HELP = "only print errors (and the result of the command)"
Command = Callable[[argparse.Namespace, TextIO], int]


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are the one line every error is (``otel-bridge: <what to change>``), with the
    command's ``--help`` to read, not the whole usage first; its sub-command parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, error_line(f"{message}; see {self.prog} --help") + "\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command."""
    parser = _Parser(
        prog="otel-bridge",
        description="RL-training infrastructure and trainer metrics into experiment trackers, one record per step.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    parser.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)
    parser.add_argument("-V", "--version", action="version", version=f"otel-bridge {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (
        add_demo,
        add_init,
        add_doctor,
        add_discover,
        add_query,
        add_tail,
        add_plot,
        add_prometheus_config,
        add_prometheus_rules,
    ):
        add(commands)
    for command in commands.choices.values():  # the global flags also work after the command
        command.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP)
        command.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help=QUIET_HELP)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``otel-bridge`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    level = logging.DEBUG if args.verbose else (logging.ERROR if args.quiet else logging.WARNING)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:
        # urllib3 logs every retry at WARNING (with the whole URL-encoded query); the CLI's own line says what failed.
        logging.getLogger("urllib3").setLevel(logging.ERROR)
    run: Command = args.run
    try:
        return run(args, sys.stdout)
    except OtelBridgeError as exc:
        if args.verbose:
            raise
        sys.stderr.write(error_line(str(exc)) + "\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("otel-bridge: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0
