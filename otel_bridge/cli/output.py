"""Shared terminal output of the command line: plain-text tables, colours, progress bars and error lines.

Only the standard library is used. Colours are on only when the stream is a terminal and ``NO_COLOR`` is not set
(https://no-color.org).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import Final, TextIO

from otel_bridge.cli.inputs import printable

_ANSI: Final = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_CODES: Final = {"red": "31", "green": "32", "yellow": "33", "dim": "2", "bold": "1"}
STATUS_COLOURS: Final = {"pass": "green", "fail": "red", "warn": "yellow", "skip": "dim"}
HIDE_CURSOR: Final = "\x1b[?25l"
SHOW_CURSOR: Final = "\x1b[?25h"
CLEAR_SCREEN: Final = "\x1b[H\x1b[2J"


def use_colour(stream: TextIO, environ: Mapping[str, str] | None = None) -> bool:
    """Whether to colour output on ``stream``: a terminal, and ``NO_COLOR`` unset or empty."""
    environ = os.environ if environ is None else environ
    if environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(callable(isatty) and isatty())


def colour(text: str, name: str, enabled: bool) -> str:
    """``text`` wrapped in the ANSI colour ``name`` (red, green, yellow, dim, bold) when ``enabled``."""
    if not enabled or name not in _CODES:
        return text
    return f"\x1b[{_CODES[name]}m{text}\x1b[0m"


def visible_len(text: str) -> int:
    """Length of ``text`` on screen (ANSI escape sequences do not count)."""
    return len(_ANSI.sub("", text))


def format_value(value: float) -> str:
    """A number for a table cell: integers without decimals, others with 4 significant digits."""
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}"


def format_rows(headers: Sequence[str], rows: Sequence[Sequence[str]], *, right: Sequence[int] = ()) -> str:
    """A plain-text table with a header, a rule and one line per row; columns in ``right`` are right-aligned."""
    widths = [visible_len(h) for h in headers]
    for row in rows:
        for index, cell in enumerate(row):
            widths[index] = max(widths[index], visible_len(cell))

    def line(cells: Sequence[str]) -> str:
        out = []
        for index, cell in enumerate(cells):
            pad = " " * (widths[index] - visible_len(cell))
            out.append(pad + cell if index in right else cell + pad)
        return "  ".join(out).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(row) for row in rows)])


def progress_bar(done: int, total: int, width: int = 30) -> str:
    """``[#########.........]  9/20`` for ``done`` of ``total``."""
    total = max(total, 1)
    filled = min(width, round(width * done / total))
    return f"[{'#' * filled}{'.' * (width - filled)}] {done:>{len(str(total))}}/{total}"


def one_line(message: str) -> str:
    """``message`` on one line: its first line, then the others in brackets, joined by ``; `` (a multi-line config
    error's problems), control characters escaped; ``''`` for an empty message."""
    lines = [printable(part.strip()) for part in str(message).strip().splitlines() if part.strip()]
    if not lines:
        return ""
    head = lines[0]
    if len(lines) > 1:
        head += " (" + "; ".join(lines[1:]) + ")"
    return head


def error_line(message: str) -> str:
    """One line for stderr: ``otel-bridge: <the message on one line>`` (:func:`one_line`)."""
    head = one_line(message)
    if not head:
        return "otel-bridge: failed (no message); run with --verbose for details"
    return f"otel-bridge: {head}"
