"""``otel-bridge plot``: one PNG of a run's records, a panel per key group, x = training step.

Keys are grouped by their prefix before the last ``/`` (``rollout/vllm/generation_tokens_total/delta`` and ``.../rate``
share a panel). Units come from the key: ``_seconds`` -> s, ``_perc`` -> fraction, ``/rate`` -> per s. The PNG carries
text chunks ``otel_bridge:panels`` (the panel count) and ``otel_bridge:groups`` (JSON list of the groups' names).

matplotlib is an optional dependency (``pip install 'otel-bridge[plot]'``), imported only here.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from otel_bridge.errors import ConfigError

_log = logging.getLogger(__name__)
RECORD_FIELDS = frozenset({"step", "time", "window_start", "_notes"})
PLOT_EXTRA_HINT = "pip install 'otel-bridge[plot]'"


def add_parser(commands: Any) -> None:
    """Register ``plot`` on the sub-command parsers ``commands``."""
    plot = commands.add_parser(
        "plot",
        help="plot a run's records to a PNG, one panel per key group",
        description="Plot the records of a run directory (its metrics.jsonl) or a JSONL file to one PNG: one panel "
        "per key group (keys sharing the prefix before the last '/'), x = training step.",
    )
    plot.add_argument("source", type=Path, metavar="RUN_DIR_OR_JSONL", help="a run directory or a .jsonl file")
    plot.add_argument(
        "--keys",
        nargs="+",
        metavar="PATTERN",
        help="keys or glob patterns, e.g. 'rollout/vllm/*' actor/loss (default: every key but otel_bridge/*)",
    )
    plot.add_argument("-o", "--output", type=Path, required=True, help="the PNG to write")
    plot.add_argument("--width", type=int, default=1200, help="image width in pixels (default 1200)")
    plot.add_argument("--height", type=int, default=800, help="image height in pixels (default 800)")
    plot.set_defaults(run=run)


@dataclass(frozen=True, slots=True)
class Series:
    """One key's values by training step."""

    key: str
    steps: tuple[int, ...]
    values: tuple[float, ...]


def jsonl_path(source: Path) -> Path:
    """The JSONL file of ``source``: the file itself, or ``<run dir>/metrics.jsonl``."""
    path = source / "metrics.jsonl" if source.is_dir() else source
    if not path.is_file():
        raise ConfigError(f"{source} is neither a run directory with metrics.jsonl nor a JSONL file; check the path")
    return path


def read_records(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file; an undecodable line (e.g. one being written) is skipped with a warning."""
    records = []
    with path.open(encoding="utf-8") as lines:
        for lineno, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                _log.warning("%s:%d is not JSON (%s); skipping that line", path, lineno, exc.msg)
                continue
            if isinstance(record, dict) and isinstance(record.get("step"), int):
                records.append(record)
            else:
                _log.warning("%s:%d is not a step record (no integer 'step'); skipping that line", path, lineno)
    if not records:
        raise ConfigError(f"{path} holds no step records; run the training (or otel-bridge demo) first")
    return records


def select_series(records: Sequence[dict[str, Any]], patterns: Sequence[str] | None) -> list[Series]:
    """The numeric keys matching ``patterns`` (globs; default: every key but ``otel_bridge/*``), sorted."""
    keys = sorted(
        {
            k
            for r in records
            for k, v in r.items()
            if k not in RECORD_FIELDS and isinstance(v, int | float) and not isinstance(v, bool)
        }
    )
    if patterns:
        chosen = [k for k in keys if any(fnmatch.fnmatchcase(k, p) for p in patterns)]
    else:
        chosen = [k for k in keys if not k.startswith("otel_bridge/")]
    if not chosen:
        sample = ", ".join(keys[:8]) + (", ..." if len(keys) > 8 else "")
        raise ConfigError(f"no key matches {list(patterns or [])}; the records have: {sample or 'no numeric keys'}")
    out = []
    for key in chosen:
        points = [(r["step"], float(r[key])) for r in records if key in r and math.isfinite(float(r[key]))]
        out.append(Series(key, tuple(p[0] for p in points), tuple(p[1] for p in points)))
    return out


def group_of(key: str) -> str:
    """The panel a key belongs to: its prefix before the last ``/`` (the key itself when it has none)."""
    return key.rsplit("/", 1)[0] if "/" in key else key


def unit_of(key: str) -> str | None:
    """The unit the key's name states: ``/rate`` -> per s, ``_seconds`` -> s, ``_perc`` -> fraction; else none."""
    if key.endswith("/rate"):
        return "per s"
    if key.endswith("/count"):
        return None
    if "_seconds" in key:
        return "s"
    if "_perc" in key:
        return "fraction"
    return None


def group_series(series: Sequence[Series]) -> dict[str, list[Series]]:
    """Series by panel, in key order."""
    groups: dict[str, list[Series]] = {}
    for item in series:
        groups.setdefault(group_of(item.key), []).append(item)
    return groups


def render_png(groups: dict[str, list[Series]], output: Path, width: int, height: int, source: str) -> None:
    """Draw one panel per group and write the PNG (exactly ``width`` x ``height`` pixels)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ConfigError(
            f"otel-bridge plot needs matplotlib, which is not importable ({exc}): {PLOT_EXTRA_HINT}"
        ) from None
    dpi = 100
    count = len(groups)
    cols = min(3, count)
    rows = math.ceil(count / cols)
    figure = Figure(figsize=(width / dpi, height / dpi), dpi=dpi)
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, cols, squeeze=False)
    for index, (name, members) in enumerate(groups.items()):
        ax = axes[index // cols][index % cols]
        units = {unit_of(m.key) for m in members}
        shared = units.pop() if len(units) == 1 else None
        ax.set_title(_fit(name, suffix=f" ({shared})" if shared else "", chars=int(width / cols / 6.5)), fontsize=9)
        for member in members:
            label = member.key.rsplit("/", 1)[-1]
            own = unit_of(member.key)
            if own and not shared:
                label += f" ({own})"
            ax.plot(member.steps, member.values, marker="." if len(member.steps) < 50 else None, label=label)
        if index + cols >= count:  # the lowest panel of its column
            ax.set_xlabel("training step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
        if len(members) > 1 or members[0].key != name:
            ax.legend(fontsize=6, framealpha=0.5)
    for index in range(count, rows * cols):
        axes[index // cols][index % cols].set_visible(False)
    figure.suptitle(source, fontsize=10)
    figure.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    metadata = {"otel_bridge:panels": str(count), "otel_bridge:groups": json.dumps(list(groups))}
    figure.savefig(output, format="png", dpi=dpi, metadata=metadata)


def _fit(name: str, *, suffix: str, chars: int) -> str:
    """``name + suffix``, leading path components replaced by an ellipsis until it fits in ``chars``."""
    parts = name.split("/")
    while len(parts) > 1 and len("/".join(parts)) + len(suffix) > chars:
        parts = parts[1:]
    shown = "/".join(parts)
    return ("…/" if shown != name else "") + shown + suffix


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Read the records, group the keys and write the PNG."""
    if args.width < 100 or args.height < 100:
        raise ConfigError(f"--width and --height must be at least 100 pixels, got {args.width}x{args.height}")
    path = jsonl_path(args.source)
    groups = group_series(select_series(read_records(path), args.keys))
    render_png(groups, args.output, args.width, args.height, str(path))
    if not args.quiet:
        out.write(f"wrote {args.output} ({args.width}x{args.height}, {len(groups)} panels: {', '.join(groups)})\n")
    return 0
