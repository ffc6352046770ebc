"""``otel-bridge plot``: one PNG of a run's records, a panel per key group, x = training step.

Keys are grouped by their prefix before the last ``/`` (``rollout/vllm/generation_tokens_total/delta`` and ``.../rate``
share a panel). Inside a panel each unit gets its own y-axis (left, then right), labelled with the unit the key states
(:func:`unit_of`): a histogram's ``count`` never shares an axis with its latencies. A group with more than two units
continues in another panel. A panel of one key is titled after the key and has no legend; other legends sit below
their panel, outside the data. The figure is titled with the run's name.

The PNG carries text chunks ``otel_bridge:panels`` (the panel count), ``otel_bridge:groups`` (JSON list of the groups'
names), ``otel_bridge:title`` (the figure's title) and ``otel_bridge:layout`` (JSON list, one object per panel:
``group``, ``title``, ``axes`` (each ``side``, ``unit``, ``keys``, ``ylim``, ``bbox``) and ``legend`` (``labels``,
``bbox``, or ``null``)); a ``bbox`` is ``[left, top, right, bottom]`` in image pixels, as drawn.

matplotlib is an optional dependency (``pip install 'otel-bridge[plot]'``), imported only here.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import logging
import math
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from otel_bridge.errors import ConfigError
from otel_bridge.exporters.naming import OUTSIDE_PHASES_KEY, STEP_SECONDS_KEY

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
    plot.add_argument("--title", help="the figure's title (default: the run's name)")
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


PHASES_GROUP = "phases"


def phase_of(key: str) -> tuple[str | None, str]:
    """``("gen", "rollout/vllm/x/delta")`` for a phase's key ``phase/gen/rollout/vllm/x/delta``; ``(None, key)``."""
    parts = key.split("/", 2)
    if len(parts) == 3 and parts[0] == "phase":
        return parts[1], parts[2]
    return None, key


def group_of(key: str) -> str:
    """The panel a key belongs to: its prefix before the last ``/`` (the key itself when it has none).

    A phase's statistic joins the step's panel of the same key (``phase/gen/rollout/vllm/x/delta`` beside
    ``rollout/vllm/x/delta``); the phases' durations (``phase/<name>/seconds``) share one panel, with the step's
    own seconds and those outside every phase (``phase/step_seconds``, ``phase/outside_seconds``).
    """
    if key in (STEP_SECONDS_KEY, OUTSIDE_PHASES_KEY):
        return PHASES_GROUP
    phase, rest = phase_of(key)
    if phase is not None:
        return PHASES_GROUP if rest == "seconds" else group_of(rest)
    return key.rsplit("/", 1)[0] if "/" in key else key


def run_name(path: Path) -> str:
    """The run a JSONL file belongs to: the run directory's name for ``<run>/metrics.jsonl``, else the file's stem."""
    resolved = path.resolve()
    return resolved.parent.name if resolved.name == "metrics.jsonl" and resolved.parent.name else resolved.stem


_STAT = re.compile(r"^(delta|rate|last|min|max|mean|count|sum|p\d{1,2}(\.\d+)?)$")


def _stat_and_metric(key: str) -> tuple[str | None, str]:
    """The key's statistic segment (the rightmost one that names a statistic; label segments follow it) and the
    metric's name before it; ``(None, last segment)`` for a key without a statistic (``actor/loss``)."""
    parts = key.split("/")
    for index in range(len(parts) - 1, 0, -1):
        if _STAT.match(parts[index]):
            return parts[index], parts[index - 1]
    return None, parts[-1]


def _base_unit(metric: str) -> str | None:
    """The unit a metric's name states (Prometheus naming conventions)."""
    if "_seconds" in metric or metric.endswith("_s"):
        return "s"
    if "_bytes" in metric:
        return "bytes"
    if metric.endswith(("_perc", "_ratio", "_fraction", "hit_rate")):
        return "fraction"
    if "tokens" in metric:
        return "tokens"
    return None


def unit_of(key: str, *, histogram: bool = False) -> str | None:
    """The unit of a key's values, from its name: ``.../x_seconds/p99`` -> s, ``.../x_tokens_total/delta`` -> tokens
    per step, ``/rate`` -> tokens/s (per s), ``_perc`` -> fraction; in a ``histogram`` group, ``count`` ->
    observations per step and ``sum`` -> s summed per step. ``None`` when the name states none (``actor/loss``)."""
    phase, rest = phase_of(key)
    if phase is not None:
        return "s" if rest == "seconds" else unit_of(rest, histogram=histogram)
    stat, metric = _stat_and_metric(key)
    base = _base_unit(metric)
    if stat == "rate":
        return f"{base}/s" if base else "per s"
    if stat == "delta":
        return f"{base} per step" if base else "per step"
    if histogram and stat == "count":
        return "observations per step"
    if histogram and stat == "sum":
        return f"{base} summed per step" if base else "sum per step"
    return base


def _is_histogram(members: Sequence[Series]) -> bool:
    """Whether a group holds a histogram's statistics: a ``count`` beside a ``mean``, ``sum`` or quantile."""
    stats = {_stat_and_metric(m.key)[0] for m in members}
    return "count" in stats and any(s in ("mean", "sum") or (s or "").startswith("p") for s in stats)


def group_series(series: Sequence[Series]) -> dict[str, list[Series]]:
    """Series by panel, in key order."""
    groups: dict[str, list[Series]] = {}
    for item in series:
        groups.setdefault(group_of(item.key), []).append(item)
    return groups


@dataclass(frozen=True, slots=True)
class Axis:
    """One y-axis of a panel: its unit and the series drawn against it."""

    unit: str | None
    members: tuple[Series, ...]


@dataclass(frozen=True, slots=True)
class Panel:
    """One panel: at most two y-axes (left, right)."""

    group: str
    title: str
    axes: tuple[Axis, ...]

    @property
    def keys(self) -> list[str]:
        return [m.key for axis in self.axes for m in axis.members]


Drawn = list[tuple[Panel, list[Any], Any]]  # a panel as drawn: its panel, its matplotlib axes and legend (or None)


def _unit_rank(unit: str | None) -> int:
    """Axes order: the values themselves first, then how many (``count``), then totals (``sum``)."""
    if unit == "observations per step":
        return 1
    return 2 if unit is not None and "sum" in unit else 0


def layout_panels(groups: dict[str, list[Series]]) -> list[Panel]:
    """One axis per unit, two axes per panel (a group with more units continues in the next panel)."""
    panels = []
    for name, members in groups.items():
        histogram = _is_histogram(members)
        by_unit: dict[str | None, list[Series]] = {}
        for member in members:
            by_unit.setdefault(unit_of(member.key, histogram=histogram), []).append(member)
        axes = [Axis(unit, tuple(items)) for unit, items in sorted(by_unit.items(), key=lambda u: _unit_rank(u[0]))]
        for first in range(0, len(axes), 2):
            chunk = tuple(axes[first : first + 2])
            keys = [m.key for axis in chunk for m in axis.members]
            title = keys[0] if len(keys) == 1 else name
            if first and len(keys) > 1:
                title += f" ({chunk[0].unit})"
            panels.append(Panel(name, title, chunk))
    return panels


def render_png(panels: Sequence[Panel], output: Path, width: int, height: int, title: str) -> None:
    """Draw the panels and write the PNG (exactly ``width`` x ``height`` pixels), its layout in its text chunks."""
    try:
        import numpy
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.image import imsave
    except ImportError as exc:
        raise ConfigError(
            f"otel-bridge plot needs matplotlib, which is not importable ({exc}): {PLOT_EXTRA_HINT}"
        ) from None
    dpi = 100
    count = len(panels)
    cols = min(3, count)
    rows = math.ceil(count / cols)
    figure = Figure(figsize=(width / dpi, height / dpi), dpi=dpi, layout="constrained")
    canvas: Any = FigureCanvasAgg(figure)  # its draw() and buffer_rgba() are untyped
    grid = figure.subplots(rows, cols, squeeze=False)
    drawn: Drawn = []
    for index, panel in enumerate(panels):
        ax = grid[index // cols][index % cols]
        drawn.append((panel, *_draw_panel(ax, panel, width // cols, lowest=index + cols >= count)))
    for index in range(count, rows * cols):
        grid[index // cols][index % cols].set_visible(False)
    figure.suptitle(title, fontsize=10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        canvas.draw()
        drawn = _fit_legends(canvas, drawn, width)
    if any("collapsed" in str(w.message) for w in caught):
        _log.warning(
            "%d panels do not fit in %dx%d pixels and overlap; choose fewer --keys or a larger --width/--height",
            count,
            width,
            height,
        )
    output.parent.mkdir(parents=True, exist_ok=True)
    metadata = {
        "otel_bridge:panels": str(count),
        "otel_bridge:groups": json.dumps(list(dict.fromkeys(p.group for p in panels))),
        "otel_bridge:title": title,
        "otel_bridge:layout": json.dumps([_describe(p, axes, legend, height) for p, axes, legend in drawn]),
    }
    # the pixels of the draw the layout was recorded from (savefig would lay out and draw everything again)
    imsave(output, numpy.asarray(canvas.buffer_rgba()), format="png", dpi=dpi, metadata=metadata)


def _draw_panel(ax: Any, panel: Panel, panel_width: int, *, lowest: bool) -> tuple[list[Any], Any]:
    """Draw one panel on ``ax`` (a twin axis on the right for a second unit); returns its axes and legend."""
    ax.set_title(_fit(panel.title, chars=int(panel_width / 7.5)), fontsize=9)
    axes = [ax] if len(panel.axes) == 1 else [ax, ax.twinx()]
    handles = []
    colours = iter(f"C{i % 10}" for i in range(len(panel.keys)))
    for axis, target in zip(panel.axes, axes, strict=True):
        for member in axis.members:
            label = _label(member.key, panel)
            marker = "." if len(member.steps) < 50 else None
            handles += target.plot(member.steps, member.values, marker=marker, label=label, color=next(colours))
        if axis.unit:
            target.set_ylabel(axis.unit, fontsize=8)
        target.tick_params(labelsize=7)
    if lowest:
        ax.set_xlabel("training step", fontsize=8)
    ax.grid(True, alpha=0.3)
    ax.xaxis.get_major_locator().set_params(integer=True)
    legend = None
    if len(handles) > 1:
        if len(axes) > 1:
            for handle, key in zip(handles, panel.keys, strict=True):
                if key in {m.key for m in panel.axes[1].members}:
                    handle.set_label(f"{handle.get_label()} (right)")
        legend = _place_legend(ax, handles, [h.get_label() for h in handles], min(3, len(handles)), lowest=lowest)
    return axes, legend


def _place_legend(ax: Any, handles: Sequence[Any], labels: Sequence[str], ncols: int, *, lowest: bool) -> Any:
    """The legend below the panel, under its tick labels (and x label): outside the data; constrained layout makes
    room for it."""
    return ax.legend(
        handles=list(handles),
        labels=list(labels),
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        borderaxespad=4.2 if lowest else 2.4,
        ncols=ncols,
        fontsize=6,
        frameon=False,
    )


_FIT_ROUNDS = 6


def _fit_legends(canvas: Any, drawn: Drawn, width: int) -> Drawn:
    """Redraw the legends that leave the image or cross another legend: fewer columns first, then shorter labels.

    A legend is centred under its panel, so a wide one (long phase names, many keys) under a panel narrowed by its
    tick labels can stick out of the image's side; constrained layout does not move panels sideways for it."""
    for _ in range(_FIT_ROUNDS):
        boxes = {i: legend.get_window_extent() for i, (_, _, legend) in enumerate(drawn) if legend is not None}
        bad = [
            i
            for i, box in boxes.items()
            if box.x0 < 0 or box.x1 > width or any(j != i and box.overlaps(o) for j, o in boxes.items())
        ]
        if not bad:
            break
        for i in bad:
            panel, axes, legend = drawn[i]
            handles = legend.legend_handles
            labels = [t.get_text() for t in legend.get_texts()]
            ncols = legend._ncols  # matplotlib keeps the column count only there
            lowest = axes[0].get_xlabel() != ""
            if ncols > 1:
                ncols -= 1
            else:
                longest = max(len(label) for label in labels)
                labels = [_shorten(label, chars=max(8, longest * 3 // 4)) for label in labels]
            legend.remove()
            drawn[i] = (panel, axes, _place_legend(axes[0], handles, labels, ncols, lowest=lowest))
        canvas.draw()
    return drawn


def _shorten(label: str, *, chars: int) -> str:
    """``label`` in at most ``chars`` characters, its middle replaced by an ellipsis."""
    if len(label) <= chars:
        return label
    keep = chars - 1
    return label[: (keep + 1) // 2] + "…" + label[len(label) - keep // 2 :]


def _label(key: str, panel: Panel) -> str:
    """A line's legend label: the key's part after the panel's group, with its phase (``delta [gen]``)."""
    phase, rest = phase_of(key)
    if phase is not None:
        return phase if panel.group == PHASES_GROUP else f"{_label(rest, panel)} [{phase}]"
    return key[len(panel.group) + 1 :] if key.startswith(panel.group + "/") else key


def _describe(panel: Panel, axes: Sequence[Any], legend: Any, height: int) -> dict[str, Any]:
    """What the PNG records of one panel, with bounding boxes in image pixels (origin top-left)."""

    def box(extent: Any) -> list[float]:
        return [round(extent.x0, 1), round(height - extent.y1, 1), round(extent.x1, 1), round(height - extent.y0, 1)]

    return {
        "group": panel.group,
        "title": panel.title,
        "axes": [
            {
                "side": side,
                "unit": axis.unit,
                "keys": [m.key for m in axis.members],
                "ylim": [float(v) for v in target.get_ylim()],
                "bbox": box(target.get_window_extent()),
            }
            for side, axis, target in zip(("left", "right"), panel.axes, axes, strict=False)
        ],
        "legend": None
        if legend is None
        else {"labels": [t.get_text() for t in legend.get_texts()], "bbox": box(legend.get_window_extent())},
    }


def _fit(name: str, *, chars: int) -> str:
    """``name``, leading path components replaced by an ellipsis until it fits in ``chars``."""
    parts = name.split("/")
    while len(parts) > 1 and len("/".join(parts)) > chars:
        parts = parts[1:]
    shown = "/".join(parts)
    return ("…/" if shown != name else "") + shown


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Read the records, group the keys and write the PNG."""
    if args.width < 100 or args.height < 100:
        raise ConfigError(f"--width and --height must be at least 100 pixels, got {args.width}x{args.height}")
    path = jsonl_path(args.source)
    panels = layout_panels(group_series(select_series(read_records(path), args.keys)))
    render_png(panels, args.output, args.width, args.height, args.title or run_name(path))
    if not args.quiet:
        titles = ", ".join(p.title for p in panels)
        out.write(f"wrote {args.output} ({args.width}x{args.height}, {len(panels)} panels: {titles})\n")
    return 0
