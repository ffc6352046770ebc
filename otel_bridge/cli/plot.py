"""``otel-bridge plot``: one PNG of a run's records, a panel per key group, x = training step.

Keys are grouped by their prefix before the last ``/`` (``rollout/vllm/generation_tokens_total/delta`` and ``.../rate``
share a panel). Inside a panel each unit gets its own y-axis (left, then right), labelled with the unit the key states
(:func:`unit_of`): a histogram's ``count`` never shares an axis with its latencies. A group with more than two units
continues in another panel. Keys of one quantity whose values are the same at every step are one line (``max = mean =
min``), not lines hiding each other; an axis whose values never change spans from zero to them. A panel of one key is
titled after it and has no legend; other legends sit below their panel, outside the data, their labels the key's
part after the group, with the labels the lines share (``Hostname``) as the legend's title and their values as labels.
The figure is titled with the run's name.

:func:`plan` makes the :class:`Layout` (panels, axes, lines, titles, units, legends) and :func:`render_png` draws it and
says what went where (:class:`Drawing`): titles cut to their column and legends fitted to the image after a first
draw. The PNG holds the picture only.

Which keys: ``--keys`` globs, else a view (``--view``, a name in :data:`VIEWS`: ``steps`` by default, the step-level
keys; a view is added with :func:`add_view`), with the phases' keys on ``--phases``. Hostile record files are bounded
(lines, keys, panels, lines a panel, values) and what is left out is said on stderr, escaped.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from otel_bridge.cli.inputs import printable
from otel_bridge.errors import ConfigError, install_hint
from otel_bridge.exporters import OUTSIDE_PHASES_KEY, STEP_SECONDS_KEY

_log = logging.getLogger(__name__)
RECORD_FIELDS = frozenset({"step", "time", "window_start", "_notes"})
PLOT_EXTRA_HINT = install_hint("plot")
MIN_PIXELS, MAX_PIXELS = 100, 8000
"""The smallest and largest ``--width`` / ``--height``."""
ROW_PIXELS = 280
"""Default height of a row of panels (the image grows with the panels)."""
MAX_PANELS = 36
"""The most panels one image holds; further key groups are left out, named on stderr."""
MAX_LINES = 12
"""The most lines one panel draws; further keys of its group are left out, counted on stderr."""
MAX_KEYS = 20_000
"""The most distinct keys read from a file; further keys are left out, counted on stderr."""
MAX_LINE_BYTES = 4 * 1024 * 1024
"""A longer record line is skipped (a record of 100,000 keys is about 5 MB: it is skipped, named on stderr)."""
MAX_ABS_VALUE = 1e300
"""Larger values (and steps outside 0..2**53) are left out: matplotlib cannot scale an axis around them."""
MAX_STEP = 2**53


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
    plot.add_argument(
        "--view",
        choices=sorted(VIEWS),
        default=DEFAULT_VIEW,
        help=f"which keys to plot when --keys is not given (default {DEFAULT_VIEW}): "
        + "; ".join(f"{name}: {view.help}" for name, view in sorted(VIEWS.items())),
    )
    plot.add_argument(
        "--phases", action="store_true", help="also draw the phases' statistics beside their step's (phase/*)"
    )
    plot.add_argument("-o", "--output", type=Path, required=True, help="the PNG to write")
    plot.add_argument(
        "--width", type=int, default=1200, help=f"image width in pixels, {MIN_PIXELS}-{MAX_PIXELS} (default 1200)"
    )
    plot.add_argument(
        "--height",
        type=int,
        default=None,
        help=f"image height in pixels, {MIN_PIXELS}-{MAX_PIXELS} (default: {ROW_PIXELS} per row of panels)",
    )
    plot.add_argument("--title", help="the figure's title (default: the run's name)")
    plot.set_defaults(run=run)


@dataclass(frozen=True, slots=True)
class View:
    """A named choice of keys (``--view``): ``wants(key)`` says whether the view plots ``key`` (for a phase's key,
    the key without its ``phase/<name>/`` prefix); ``phases``: the view draws the phases' statistics too, as
    ``--phases`` does."""

    help: str
    wants: Callable[[str], bool]
    phases: bool = False


def _step_level(key: str) -> bool:
    return not key.startswith(("otel_bridge/", "phase/"))


GPU_METRICS = (
    "DCGM_FI_",  # NVIDIA dcgm-exporter (preset dcgm)
    "gpu_gfx_activity",  # AMD device-metrics-exporter (preset amd)
    "gpu_used_vram",
    "gpu_power_usage",
    "gpu_energy_consumed",
    "ray_node_gpus_utilization",  # Ray's node metrics (preset ray)
    "ray_node_gram_used",
    "tokens_per_joule",
)
"""Metric names (or their start) whose keys the ``gpu`` view plots."""


def _gpu_time(key: str) -> bool:
    """A GPU key (utilization, idle GPU-seconds, memory, energy, tokens per joule), or a phase's (the step's) length:
    where each step's GPU time went, phase by phase."""
    return key == "seconds" or key in (STEP_SECONDS_KEY, OUTSIDE_PHASES_KEY) or any(m in key for m in GPU_METRICS)


VIEWS: dict[str, View] = {
    "steps": View("every step-level key (not phase/*, not otel_bridge/*)", _step_level),
    "health": View("the bridge's own health keys (otel_bridge/*)", lambda key: key.startswith("otel_bridge/")),
    "gpu": View(
        "where the GPU time went: utilization, idle GPU-seconds, memory and energy per step, each phase's beside its "
        "step's, and the phases' lengths",
        _gpu_time,
        phases=True,
    ),
}
"""The views of ``--view``. A view is added here with :func:`add_view`."""
DEFAULT_VIEW = "steps"


def add_view(name: str, help_text: str, wants: Callable[[str], bool], *, phases: bool = False) -> None:
    """Register a ``--view NAME`` that plots the keys ``wants`` accepts (the phases' too when ``phases``, or with
    ``--phases``)."""
    VIEWS[name] = View(help_text, wants, phases)


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
    """The step records of a JSONL file. A line that is not a step record is skipped with one warning naming it:
    not UTF-8, not JSON (or nested too deep to read), longer than 4 MiB, or without an integer ``step`` in
    0..2**53."""
    records = []
    skipped: dict[str, list[int]] = {}
    with path.open("rb") as lines:
        for lineno, raw in enumerate(lines, 1):
            why = None
            if len(raw) > MAX_LINE_BYTES:
                why = "longer than 4 MiB"
            elif raw.strip():
                try:
                    record = json.loads(raw.decode("utf-8"))
                except UnicodeDecodeError:
                    why = "not UTF-8"
                except (json.JSONDecodeError, RecursionError, ValueError):
                    why = "not JSON"
                else:
                    step = record.get("step") if isinstance(record, dict) else None
                    if isinstance(step, int) and not isinstance(step, bool) and 0 <= step <= MAX_STEP:
                        records.append(record)
                    else:
                        why = "not a step record (no integer 'step' in 0..2**53)"
            if why is not None:
                skipped.setdefault(why, []).append(lineno)
    for why, linenos in skipped.items():
        shown = ", ".join(map(str, linenos[:5])) + (", ..." if len(linenos) > 5 else "")
        _log.warning("%s: %d line(s) %s skipped (line %s)", printable(str(path)), len(linenos), why, shown)
    if not records:
        raise ConfigError(f"{printable(str(path))} holds no step records; run the training (or otel-bridge demo) first")
    return records


def _number(value: object) -> float | None:
    """``value`` as a plottable number: an int or float within ±1e300 (not a bool, not NaN)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int beyond float's range (10**400)
        return None
    return number if math.isfinite(number) and abs(number) <= MAX_ABS_VALUE else None


def select_series(
    records: Sequence[dict[str, Any]],
    patterns: Sequence[str] | None,
    *,
    view: str = DEFAULT_VIEW,
    phases: bool = False,
) -> list[Series]:
    """The numeric keys matching ``patterns`` (globs), else those of ``view`` (with the phases' keys when
    ``phases``), sorted. At most :data:`MAX_KEYS` distinct keys are read; the others are counted on stderr."""
    seen: set[str] = set()
    over = 0
    for record in records:
        for k, v in record.items():
            if k in RECORD_FIELDS or k in seen or not isinstance(v, int | float) or isinstance(v, bool):
                continue
            if len(seen) < MAX_KEYS:
                seen.add(k)
            else:
                over += 1
    if over:
        _log.warning("the records have more than %d keys; %d key occurrence(s) left out", MAX_KEYS, over)
    keys = sorted(seen)
    phases = phases or (not patterns and VIEWS[view].phases)
    if patterns:
        chosen = [k for k in keys if any(fnmatch.fnmatchcase(k, p) for p in patterns)]
    else:
        wants = VIEWS[view].wants
        chosen = [k for k in keys if wants(phase_of(k)[1] if phases else k) and (phases or not k.startswith("phase/"))]
    if not chosen:
        sample = ", ".join(printable(k) for k in keys[:8]) + (", ..." if len(keys) > 8 else "")
        wanted = list(patterns) if patterns else f"view {view}"
        raise ConfigError(f"no key matches {wanted}; the records have: {sample or 'no numeric keys'}")
    out = []
    for key in chosen:
        points = [(r["step"], n) for r in records if (n := _number(r.get(key))) is not None]
        if points:
            out.append(Series(key, tuple(p[0] for p in points), tuple(p[1] for p in points)))
    if not out:
        raise ConfigError("no plottable values: every value of the chosen keys is beyond ±1e300 or not a number")
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


_STAT = re.compile(r"^(delta|rate|last|min|max|mean|count|sum|idle_seconds|p\d{1,2}(\.\d+)?)$")


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
    if metric == "joules" or metric.endswith("_joules"):
        return "J"
    if metric.endswith(("GPU_UTIL", "_utilization", "gfx_activity")):
        return "%"
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
    if stat == "idle_seconds":  # the rollout servers' (.../servers/idle_seconds) or the GPUs' (.../gpus/...)
        return "idle server-s" if metric == "servers" else "idle GPU-s"
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
class Line:
    """One line of a panel: the keys it stands for (several when their values are the same at every step: one line
    drawn, not several hiding each other), its legend label, and its points."""

    keys: tuple[str, ...]
    label: str
    steps: tuple[int, ...]
    values: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Axis:
    """One y-axis of a panel: its side (``left``, ``right``), its unit and the lines drawn against it."""

    side: str
    unit: str | None
    lines: tuple[Line, ...]

    @property
    def keys(self) -> list[str]:
        return [key for line in self.lines for key in line.keys]


@dataclass(frozen=True, slots=True)
class Panel:
    """One panel: its key group, its title, at most two y-axes (left, right), and its legend's title (the label names
    its lines share, whose values the labels show)."""

    group: str
    title: str
    axes: tuple[Axis, ...]
    legend_title: str | None = None

    @property
    def keys(self) -> list[str]:
        return [key for axis in self.axes for key in axis.keys]

    @property
    def lines(self) -> list[Line]:
        return [line for axis in self.axes for line in axis.lines]

    @property
    def legend(self) -> tuple[str, ...]:
        """The legend's labels, one a line; none for a panel of one key (its title names it)."""
        return tuple(line.label for line in self.lines) if len(self.keys) > 1 else ()


@dataclass(frozen=True, slots=True)
class Layout:
    """What one image shows: its title, its size in pixels, and its panels (three a row)."""

    title: str
    width: int
    height: int
    panels: tuple[Panel, ...]

    @property
    def groups(self) -> list[str]:
        """The key groups drawn, in panel order."""
        return list(dict.fromkeys(panel.group for panel in self.panels))


Box = tuple[float, float, float, float]
"""A region of the image in pixels: left, top, right, bottom (origin top-left)."""


@dataclass(frozen=True, slots=True)
class DrawnAxis:
    """Where an axis's data area was drawn, and the range its y-axis shows."""

    data: Box
    ylim: tuple[float, float]


@dataclass(frozen=True, slots=True)
class DrawnPanel:
    """A panel as drawn: its title and legend labels as they fit, and the regions they and its axes took."""

    title: str
    title_box: Box
    axes: tuple[DrawnAxis, ...]
    legend: tuple[str, ...]
    legend_box: Box | None


@dataclass(frozen=True, slots=True)
class Drawing:
    """The image as drawn: its panels in layout order, and whether the panels did not fit (overlap)."""

    width: int
    height: int
    panels: tuple[DrawnPanel, ...]
    crowded: bool


def _unit_rank(unit: str | None) -> int:
    """Axes order: the values themselves first, then how many (``count``), then totals (``sum``)."""
    if unit == "observations per step":
        return 1
    return 2 if unit is not None and "sum" in unit else 0


_SUMMED = " summed per step"


def _quantity(unit: str | None) -> str | None:
    """What a unit measures: a histogram's ``s summed per step`` measures seconds, as its ``s`` does."""
    return unit[: -len(_SUMMED)] if unit is not None and unit.endswith(_SUMMED) else unit


def _same_lines(members: Sequence[Series], histogram: bool) -> list[tuple[str | None, list[Series]]]:
    """``members`` gathered into lines: the series of one quantity whose values are the same at every step make one
    line (a trainer histogram with one observation a step has min = max = mean = sum; health counts that stayed 0),
    under the unit of the first of them."""
    lines: dict[tuple[str | None, tuple[int, ...], tuple[float, ...]], tuple[str | None, list[Series]]] = {}
    for member in members:
        unit = unit_of(member.key, histogram=histogram)
        same = lines.setdefault((_quantity(unit), member.steps, member.values), (unit, []))
        same[1].append(member)
    return list(lines.values())


_LABEL = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\.(.+)$")


def _labels_of(rest: str, key: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """``rest`` (a key's part after its panel's group) split into its name part and its label segments
    (``Hostname.rollout-node`` -> ``("Hostname", "rollout-node")``): the ``label.value`` segments that follow a
    statistic (an infrastructure key) or end a health key (``otel_bridge/backend_errors/backend.jsonl``)."""
    parts = rest.split("/") if rest else []
    labels: list[tuple[str, str]] = []
    labelled = key.startswith("otel_bridge/") or _stat_and_metric(key)[0] is not None
    while labelled and parts and not _STAT.match(parts[-1]) and (match := _LABEL.match(parts[-1])):
        labels.insert(0, (match.group(1), match.group(2)))
        parts.pop()
    return "/".join(parts), tuple(labels)


def _key_labels(key: str, group: str) -> tuple[str, tuple[tuple[str, str], ...], str | None]:
    """A key's legend parts in a panel of ``group``: its name part, its labels and its phase."""
    phase, rest = phase_of(key)
    if phase is not None and group == PHASES_GROUP:
        return (phase if rest == "seconds" else key), (), None
    name = rest[len(group) + 1 :] if rest.startswith(group + "/") else rest
    base, labels = _labels_of(name, rest)
    return base, labels, phase


def _legend(keys_by_line: Sequence[Sequence[str]], group: str, sides: Sequence[str]) -> tuple[list[str], str | None]:
    """Each line's label and the legend's title. Lines whose keys all carry the same label names show the values
    under a title naming the labels (``Hostname``: ``rollout-node``, ``trainer-node``); otherwise ``name=value``. A
    phase's line ends ``[phase]``; a line on the right axis ends ``(right)``; a line of several keys joins theirs
    with `` = ``."""
    parts = [[_key_labels(key, group) for key in keys] for keys in keys_by_line]
    names = {tuple(n for n, _ in labels) for line in parts for _, labels, _ in line}
    common = next(iter(names)) if len(names) == 1 and () not in names else None

    def text(base: str, labels: tuple[tuple[str, str], ...], phase: str | None) -> str:
        shown = ", ".join(v if common else f"{n}={v}" for n, v in labels)
        words = " ".join(w for w in (base, shown) if w)
        return f"{words} [{phase}]" if phase else words

    labels = [" = ".join(text(*p) for p in line) for line in parts]
    labels = [f"{label} (right)" if side == "right" else label for label, side in zip(labels, sides, strict=True)]
    return labels, (", ".join(common) if common else None)


def layout_panels(groups: dict[str, list[Series]]) -> list[Panel]:
    """One axis per unit, two axes per panel (a group with more units continues in the next panel), one line for the
    series of a quantity that are the same at every step; at most :data:`MAX_LINES` keys a panel (the step's keys
    first, then the phases'), the others counted on stderr."""
    panels = []
    left_out = 0
    for name, members in groups.items():
        if len(members) > MAX_LINES:
            ordered = sorted(members, key=lambda m: phase_of(m.key)[0] is not None)
            left_out += len(members) - MAX_LINES
            members = [m for m in members if m in ordered[:MAX_LINES]]
        by_unit: dict[str | None, list[list[Series]]] = {}
        for unit, same in _same_lines(members, _is_histogram(members)):
            by_unit.setdefault(unit, []).append(same)
        units = sorted(by_unit.items(), key=lambda u: _unit_rank(u[0]))
        for first in range(0, len(units), 2):
            chunk = units[first : first + 2]
            sides = [side for side, (_, lines) in zip(("left", "right"), chunk, strict=False) for _ in lines]
            lines = [same for _, unit_lines in chunk for same in unit_lines]
            labels, legend_title = _legend([[m.key for m in same] for same in lines], name, sides)
            made = iter(
                Line(tuple(m.key for m in same), label, same[0].steps, same[0].values)
                for same, label in zip(lines, labels, strict=True)
            )
            axes = tuple(
                Axis(side, unit, tuple(next(made) for _ in unit_lines))
                for side, (unit, unit_lines) in zip(("left", "right"), chunk, strict=False)
            )
            keys = [key for axis in axes for key in axis.keys]
            bases = {phase_of(key)[1] for key in keys}
            if len(keys) == 1:
                title = keys[0]
            elif len(bases) == 1 and name != PHASES_GROUP:  # one key and its phases: named after the key
                title = next(iter(bases))
            else:
                title = name
            if first and len(keys) > 1:
                title += f" ({axes[0].unit})"
            panels.append(Panel(name, title, axes, legend_title if len(keys) > 1 else None))
    if left_out:
        _log.warning("%d key(s) left out: at most %d lines a panel; choose them with --keys", left_out, MAX_LINES)
    return panels


def cap_panels(panels: list[Panel]) -> list[Panel]:
    """At most :data:`MAX_PANELS` panels; the key groups left out are counted on stderr."""
    if len(panels) <= MAX_PANELS:
        return panels
    kept = panels[:MAX_PANELS]
    kept_groups = {p.group for p in kept}
    dropped = [group for group in dict.fromkeys(p.group for p in panels[MAX_PANELS:]) if group not in kept_groups]
    groups = len(dropped)
    _log.warning(
        "%d panels are too many for one image: the first %d are drawn, %d key group(s) left out (e.g. %s); "
        "choose them with --keys",
        len(panels),
        MAX_PANELS,
        groups,
        printable(dropped[0]) if dropped else "-",
    )
    return kept


def plan(
    records: Sequence[dict[str, Any]],
    *,
    keys: Sequence[str] | None = None,
    view: str = DEFAULT_VIEW,
    phases: bool = False,
    width: int = 1200,
    height: int | None = None,
    title: str,
) -> Layout:
    """The layout of one image of ``records``: the keys chosen (:func:`select_series`), in panels
    (:func:`layout_panels`, :func:`cap_panels`), ``height`` by default growing with the panels."""
    panels = cap_panels(layout_panels(group_series(select_series(records, keys, view=view, phases=phases))))
    return Layout(title, width, height if height is not None else default_height(len(panels)), tuple(panels))


_Drawn = tuple[Panel, list[Any], Any, Any]  # a panel as drawn: its panel, matplotlib axes, title text and legend


def render_png(layout: Layout, output: Path) -> Drawing:
    """Draw ``layout`` and write it to ``output`` as a PNG of exactly its width x height pixels; what was drawn where.

    Titles and legends are fitted to the image after a first draw: a title to its column (its leading path parts
    give way to ``…/``), a legend to the image and clear of the others (fewer columns, then shorter labels)."""
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
    width, height, panels = layout.width, layout.height, layout.panels
    count = len(panels)
    cols = min(3, count)
    rows = math.ceil(count / cols)
    figure = Figure(figsize=(width / dpi, height / dpi), dpi=dpi, layout="constrained")
    canvas: Any = FigureCanvasAgg(figure)  # its draw() and buffer_rgba() are untyped
    grid = figure.subplots(rows, cols, squeeze=False)
    drawn: list[_Drawn] = []
    for index, panel in enumerate(panels):
        ax = grid[index // cols][index % cols]
        drawn.append((panel, *_draw_panel(ax, panel, lowest=index + cols >= count)))
    for index in range(count, rows * cols):
        grid[index // cols][index % cols].set_visible(False)
    figure.suptitle(layout.title, fontsize=10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        drawn, laid_out = _fit_texts(figure, drawn, width, cols)
        if laid_out:  # the panels stand where the last layout put them: draw the pixels only
            figure.set_layout_engine("none")
        canvas.draw()
    crowded = any("collapsed" in str(w.message) for w in caught)
    if crowded:
        _log.warning(
            "%d panels do not fit in %dx%d pixels and overlap; choose fewer --keys or a larger --width/--height",
            count,
            width,
            height,
        )
    # the pixels of the draw the boxes were measured on (savefig would lay out and draw everything again)
    try:
        imsave(output, numpy.asarray(canvas.buffer_rgba()), format="png", dpi=dpi)
    except OSError as exc:
        raise ConfigError(f"cannot write {printable(str(output))}: {exc.strerror or exc}; choose another -o") from None
    return Drawing(width, height, tuple(_drawn_panel(d, height) for d in drawn), crowded)


def _draw_panel(ax: Any, panel: Panel, *, lowest: bool) -> tuple[list[Any], Any, Any]:
    """Draw one panel on ``ax`` (a twin axis on the right for a second unit); its axes, title and legend."""
    title = ax.set_title(panel.title, fontsize=9)
    axes = [ax] if len(panel.axes) == 1 else [ax, ax.twinx()]
    handles = []
    colours = iter(_colours(len(panel.lines)))
    for axis, target in zip(panel.axes, axes, strict=True):
        for line in axis.lines:
            marker = "." if len(line.steps) < 50 else None
            handles += target.plot(line.steps, line.values, marker=marker, label=line.label, color=next(colours))
        if axis.unit:
            target.set_ylabel(axis.unit, fontsize=8)
        target.tick_params(labelsize=7)
        _scale(target, [v for line in axis.lines for v in line.values])
    if lowest:
        ax.set_xlabel("training step", fontsize=8)
    ax.grid(True, alpha=0.3)
    ax.xaxis.get_major_locator().set_params(integer=True)
    legend = None
    if panel.legend:
        legend = _place_legend(ax, handles, panel.legend, min(3, len(handles)), panel.legend_title, lowest=lowest)
    return axes, title, legend


def _scale(target: Any, values: Sequence[float]) -> None:
    """An axis whose values never change spans from zero to them (a count that stayed 0 shows 0 to 1, not ±0.04);
    an axis of whole numbers has whole-number ticks."""
    from matplotlib.ticker import MaxNLocator

    if values and min(values) == max(values):
        low, high = min(0.0, values[0]), max(0.0, values[0])
        if low == high:
            high = 1.0
        pad = 0.05 * (high - low)  # matplotlib's own margins
        target.set_ylim(low - pad, high + pad)
    if values and all(float(v).is_integer() for v in values):
        target.yaxis.set_major_locator(MaxNLocator(integer=True))


def _colours(count: int) -> list[Any]:
    """``count`` colours, none repeated up to 20: tab20's strong shades first, then its light ones."""
    from matplotlib import colormaps

    palette = list(getattr(colormaps["tab20"], "colors"))  # noqa: B009 - a ListedColormap's colours (untyped)
    ordered = palette[0::2] + palette[1::2]
    return [ordered[i % len(ordered)] for i in range(count)]


def _place_legend(
    ax: Any, handles: Sequence[Any], labels: Sequence[str], ncols: int, title: str | None, *, lowest: bool
) -> Any:
    """The legend below the panel, under its tick labels (and x label): outside the data; constrained layout makes
    room for it."""
    return ax.legend(
        handles=list(handles),
        labels=list(labels),
        title=title,
        title_fontsize=6,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        borderaxespad=4.2 if lowest else 2.4,
        ncols=ncols,
        fontsize=6,
        frameon=False,
    )


_FIT_ROUNDS = 6


def _fit_texts(figure: Any, drawn: list[_Drawn], width: int, cols: int) -> tuple[list[_Drawn], bool]:
    """Redraw the titles that leave the image or reach past the middle of the gap to the next panel
    (:func:`_narrower`) and the legends that leave the image or cross another legend (fewer columns first, then
    shorter labels); the panels as redrawn, and whether the figure's last layout is of their final texts.

    A title or legend is centred on its panel's axes, which a y-label and a right axis narrow: a long one sticks out
    of the image's side or into its neighbour's; constrained layout does not move panels sideways for it.

    Texts are measured on the figure as laid out, without drawing it: a layout is most of a draw's cost, and the
    pixels are drawn once, at the end."""
    layout = figure.get_layout_engine()
    for _ in range(_FIT_ROUNDS):
        layout.execute(figure)
        changed = False
        areas = [axes[0].get_window_extent() for _, axes, _, _ in drawn]
        for index, (panel, _, title, _) in enumerate(drawn):
            first, last = index % cols == 0, index % cols == cols - 1 or index == len(drawn) - 1
            left = 0.0 if first else (areas[index - 1].x1 + areas[index].x0) / 2
            right = float(width) if last else (areas[index].x1 + areas[index + 1].x0) / 2
            while not left <= (box := title.get_window_extent()).x0 <= box.x1 <= right:
                if (narrower := _narrower(panel.title, title.get_text())) is None:
                    break
                title.set_text(narrower)
                changed = True
        boxes = {i: legend.get_window_extent() for i, (_, _, _, legend) in enumerate(drawn) if legend is not None}
        bad = [
            i
            for i, box in boxes.items()
            if box.x0 < 0 or box.x1 > width or any(j != i and box.overlaps(o) for j, o in boxes.items())
        ]
        for i in bad:
            panel, axes, title, legend = drawn[i]
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
            drawn[i] = (panel, axes, title, _place_legend(axes[0], handles, labels, ncols, panel.legend_title,
                                                          lowest=lowest))  # fmt: skip
        if not changed and not bad:
            return drawn, True
    return drawn, False


def _shorten(label: str, *, chars: int) -> str:
    """``label`` in at most ``chars`` characters, its middle replaced by an ellipsis."""
    if len(label) <= chars:
        return label
    keep = chars - 1
    return label[: (keep + 1) // 2] + "…" + label[len(label) - keep // 2 :]


def _narrower(full: str, shown: str) -> str | None:
    """The next shorter form of the title ``full`` now ``shown``: one leading path part fewer (``…/`` for those left
    out), then, down to its last part, characters from that part's middle; ``None`` when 8 characters are left."""
    parts = shown.removeprefix("…/").split("/")
    if len(parts) > 1:
        return _fit(full, parts=len(parts) - 1)
    return _shorten(shown, chars=len(shown) - 2) if len(shown) > 8 else None


def _fit(name: str, *, parts: int) -> str:
    """``name`` shown by its last ``parts`` path parts (at least one), ``…/`` standing for those left out."""
    every = name.split("/")
    return name if parts >= len(every) else "…/" + "/".join(every[-max(1, parts) :])


def _drawn_panel(drawn: _Drawn, height: int) -> DrawnPanel:
    """A panel as drawn, its regions in image pixels (origin top-left)."""
    _, axes, title, legend = drawn

    def box(extent: Any) -> Box:
        return (float(extent.x0), float(height - extent.y1), float(extent.x1), float(height - extent.y0))

    return DrawnPanel(
        title=title.get_text(),
        title_box=box(title.get_window_extent()),
        axes=tuple(DrawnAxis(box(ax.get_window_extent()), _ylim(ax)) for ax in axes),
        legend=tuple(t.get_text() for t in legend.get_texts()) if legend is not None else (),
        legend_box=box(legend.get_window_extent()) if legend is not None else None,
    )


def _ylim(ax: Any) -> tuple[float, float]:
    low, high = ax.get_ylim()
    return float(low), float(high)


def check_output(output: Path) -> None:
    """Refuse an output path whose directory does not exist (or that is a directory), before any work: a plot never
    creates directories."""
    parent = output.parent
    if output.is_dir():
        raise ConfigError(f"-o {printable(str(output))} is a directory; give the PNG's file name")
    if not parent.is_dir():
        raise ConfigError(
            f"-o {printable(str(output))}: the directory {printable(str(parent))} does not exist; create it first"
        )


def plot(
    source: Path,
    output: Path,
    *,
    keys: Sequence[str] | None = None,
    view: str = DEFAULT_VIEW,
    phases: bool = False,
    width: int = 1200,
    height: int | None = None,
    title: str | None = None,
) -> tuple[Layout, Drawing]:
    """Plot the records of ``source`` (a run directory or a JSONL file) to the PNG ``output``: the layout drawn (see
    :func:`plan`) and what was drawn where."""
    sizes = [width] + ([height] if height is not None else [])
    if not all(MIN_PIXELS <= size <= MAX_PIXELS for size in sizes):
        shown = f"{width}x{height if height is not None else 'auto'}"
        raise ConfigError(f"--width and --height must be {MIN_PIXELS} to {MAX_PIXELS} pixels, got {shown}")
    check_output(output)
    path = jsonl_path(source)
    records = read_records(path)
    layout = plan(
        records, keys=keys, view=view, phases=phases, width=width, height=height, title=title or run_name(path)
    )
    return layout, render_png(layout, output)


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Read the records, lay the keys out and write the PNG."""
    layout, _ = plot(
        args.source,
        args.output,
        keys=args.keys,
        view=args.view,
        phases=args.phases,
        width=args.width,
        height=args.height,
        title=args.title,
    )
    if not args.quiet:
        titles = printable(", ".join(p.title for p in layout.panels))
        if len(titles) > 300:
            titles = titles[:297] + "..."
        size = f"{layout.width}x{layout.height}"
        out.write(f"wrote {printable(str(args.output))} ({size}, {len(layout.panels)} panels: {titles})\n")
    return 0


def default_height(panels: int) -> int:
    """The image height for ``panels`` panels: :data:`ROW_PIXELS` a row of three, plus the title."""
    rows = math.ceil(panels / min(3, max(panels, 1)))
    return min(MAX_PIXELS, 60 + rows * ROW_PIXELS)
