"""``otel-bridge plot`` on the records of a real ``otel-bridge demo`` run: the command as a user types it, and the
layout it draws (:func:`otel_bridge.cli.plot.plot` returns the :class:`Layout` and where each part was drawn)."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest
from PIL import Image
from PIL.PngImagePlugin import PngImageFile

from otel_bridge.cli.plot import Box, Drawing, Layout, Panel, plot
from tests.cli.support import run_cli


def read_png(png: Path) -> tuple[tuple[int, int], dict[str, str], Image.Image]:
    """The PNG's size, its text chunks and its pixels (RGB)."""
    with Image.open(png) as image:
        image.load()
        assert isinstance(image, PngImageFile)
        return image.size, dict(image.text), image.convert("RGB")


def overlap(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def values_of(run: Path, key: str) -> list[float]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [float(r[key]) for r in records if key in r]


def units_of(layout: Layout) -> dict[str, str | None]:
    """Each key's unit, as its axis states it."""
    return {key: axis.unit for panel in layout.panels for axis in panel.axes for key in axis.keys}


def sides(panel: Panel) -> list[tuple[str, str | None]]:
    return [(axis.side, axis.unit) for axis in panel.axes]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 6-step demo run (simulated vLLM servers, JSONL + TensorBoard)."""
    out = tmp_path_factory.mktemp("demo")
    done = run_cli(["demo", "--steps", "6", "--step-seconds", "0.6", "--out", str(out), "--run-name", "d"], cwd=out)
    assert done.returncode == 0, done.stderr
    assert "steps [" in done.stdout
    assert "6/6" in done.stdout
    assert "rollout/vllm/generation_tokens_total/delta" in done.stdout
    return out / "d"


@pytest.fixture(scope="module")
def default_plot(demo_run: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Layout, Drawing]:
    """The demo run's JSONL file plotted in-process with the default keys and size (its 22 panels cost ~3 s a plot)."""
    return plot(demo_run / "metrics.jsonl", tmp_path_factory.mktemp("default-plot") / "in-process.png")


def test_plot_one_panel_per_key_group_at_the_requested_size(demo_run: Path, tmp_path: Path) -> None:
    png = tmp_path / "out.png"
    keys = ["rollout/vllm/generation_tokens_total/*", "rollout/vllm/time_to_first_token_seconds/p99", "actor/loss"]
    done = run_cli(
        ["plot", str(demo_run), "--keys", *keys, "-o", str(png), "--width", "800", "--height", "500"], cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    size, text, _ = read_png(png)
    assert size == (800, 500)
    assert "3 panels" in done.stdout
    assert not [chunk for chunk in text if chunk.startswith("otel_bridge")]  # the PNG is the picture, nothing else
    layout, drawing = plot(demo_run, tmp_path / "in-process.png", keys=keys, width=800, height=500)
    assert (drawing.width, drawing.height) == (800, 500)
    assert layout.groups == [
        "actor",
        "rollout/vllm/generation_tokens_total",
        "rollout/vllm/time_to_first_token_seconds",
    ]
    assert len(layout.panels) == 3
    # a panel of one key is titled after the key, without a legend; the others after their group
    assert [p.title for p in layout.panels] == [
        "actor/loss",
        "rollout/vllm/generation_tokens_total",
        "rollout/vllm/time_to_first_token_seconds/p99",
    ]
    assert [p.legend == () for p in layout.panels] == [True, False, True]
    # y-axis units from the keys: delta and rate are different units, so each has its own axis
    assert sides(layout.panels[1]) == [("left", "tokens per step"), ("right", "tokens/s")]
    assert sides(layout.panels[2]) == [("left", "s")]
    assert sides(layout.panels[0]) == [("left", None)]  # actor/loss states no unit


def test_plot_a_jsonl_file_with_default_keys(
    demo_run: Path, default_plot: tuple[Layout, Drawing], tmp_path: Path
) -> None:
    png = tmp_path / "all.png"
    done = run_cli(["plot", str(demo_run / "metrics.jsonl"), "-o", str(png)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    layout, drawing = default_plot
    panels = len(layout.panels)
    assert read_png(png)[0] == (1200, 60 + math.ceil(panels / 3) * 280)  # the height grows with the panels (issue 26)
    assert f"{panels} panels" in done.stdout
    groups = layout.groups
    assert not any(g.startswith("otel_bridge") for g in groups)  # health keys only on request
    assert not any(g.startswith("phase/") or g == "phases" for g in groups)  # phases with --phases (issue 26)
    assert "rollout/vllm/kv_cache_usage_perc" in groups
    assert len(drawing.panels) == panels
    assert list(dict.fromkeys(p.group for p in layout.panels)) == groups  # every group has a panel, in order
    units = units_of(layout)
    vllm = "rollout/vllm/"
    assert units[vllm + "kv_cache_usage_perc/max"] == "fraction"
    assert units[vllm + "prefix_cache_hit_rate"] == "fraction"
    assert units[vllm + "e2e_request_latency_seconds/p99"] == "s"
    assert units[vllm + "time_to_first_token_seconds/count"] == "observations per step"
    assert units[vllm + "prompt_tokens_total/rate"] == "tokens/s"
    assert units[vllm + "request_success_total/delta"] == "per step"
    for panel, drawn in zip(layout.panels, drawing.panels, strict=True):
        # at most two y-axes, one unit each: a left one, then a right one
        assert [a.side for a in panel.axes] in (["left"], ["left", "right"]), panel.title
        data = drawn.axes[0].data
        assert data[3] - data[1] >= 120, (panel.title, data)  # room for the data, not just legends
        assert panel.title != "rollout/vllm", panel.axes
        assert len({a.unit for a in panel.axes}) == len(panel.axes), panel.title


def test_a_histogram_count_has_its_own_axis_and_does_not_flatten_the_latencies(demo_run: Path, tmp_path: Path) -> None:
    layout, drawing = plot(demo_run, tmp_path / "ttft.png", keys=["rollout/vllm/time_to_first_token_seconds/*"])
    (panel,) = layout.panels
    (drawn,) = drawing.panels
    assert panel.title == "rollout/vllm/time_to_first_token_seconds"
    left, right = panel.axes
    ttft = "rollout/vllm/time_to_first_token_seconds/"
    assert (left.side, left.unit, left.keys) == ("left", "s", [ttft + "mean", ttft + "p50", ttft + "p99"])
    assert (right.side, right.unit, right.keys) == ("right", "observations per step", [ttft + "count"])
    latencies = [v for stat in ("mean", "p50", "p99") for v in values_of(demo_run, ttft + stat)]
    counts = values_of(demo_run, ttft + "count")
    # the latency axis spans the latencies (matplotlib's 5% margins), far below the counts it used to share
    span = max(latencies) - min(latencies)
    left_ylim, right_ylim = (axis.ylim for axis in drawn.axes)
    assert left_ylim[0] >= min(latencies) - 0.1 * span
    assert left_ylim[1] <= max(latencies) + 0.1 * span
    # (a step in which no request got its first token has a count of 0, on the right axis like the others)
    assert left_ylim[1] < min(count for count in counts if count > 0)
    assert right_ylim[0] <= min(counts) <= max(counts) <= right_ylim[1]
    assert list(drawn.legend) == ["mean", "p50", "p99", "count (right)"]


# The demo's trainer, vLLM and phase panels (18, the vLLM servers' sleep state left out): all of them must fit at
# 1000x700. The sleep state's two panels (min, max) make 20 and the demo's GPU panels (utilization, idle GPU-seconds,
# joules per host) 23, which need a taller image than 700 pixels at three panels a row.
VLLM_AND_TRAINER = [
    "actor/*",
    "critic/*",
    "trainer/*",
    "rollout/vllm/[!e]*",
    "rollout/vllm/e2e*",
    "phase/*/rollout/vllm/[!e]*",
    "phase/*/rollout/vllm/e2e*",
    "phase/*seconds",
]


def assert_legends_clear(drawing: Drawing, pixels: Image.Image) -> None:
    """Every legend inside the image, outside every data area, really drawn there."""
    width, height = drawing.width, drawing.height
    data_areas = [axis.data for panel in drawing.panels for axis in panel.axes]
    legends = [(panel.title, panel.legend_box) for panel in drawing.panels if panel.legend_box is not None]
    assert legends
    for title, box in legends:
        assert 0 <= box[0] < box[2] <= width, (title, box)
        assert 0 <= box[1] < box[3] <= height, (title, box)
        assert not any(overlap(box, area) for area in data_areas), (title, box)
        # really drawn there: the legend's region holds dark pixels (its text)
        region = pixels.crop((int(box[0]), int(box[1]), int(box[2]), int(box[3]))).convert("L")
        assert sum(region.histogram()[:128]) > 0, title


def test_legends_are_outside_every_data_area_and_inside_the_image(demo_run: Path, tmp_path: Path) -> None:
    for width, height in ((1400, 900), (1000, 700)):
        png = tmp_path / f"all-{width}.png"
        _, drawing = plot(demo_run, png, keys=VLLM_AND_TRAINER, width=width, height=height)
        assert not drawing.crowded
        size, _, pixels = read_png(png)
        assert size == (width, height)
        assert_legends_clear(drawing, pixels)


def test_the_title_is_the_run_name(demo_run: Path, tmp_path: Path) -> None:
    # the title comes from the path and --title alone: one key's panel shows it (the whole run's 22 cost ~3 s a plot)
    png, keys = tmp_path / "t.png", ["actor/loss"]
    title = plot(demo_run, png, keys=keys)[0].title
    assert title == "d"
    assert str(demo_run) not in title
    # a JSONL file named otherwise: its name without the extension; --title wins over both
    other = tmp_path / "nightly-42.jsonl"
    shutil.copyfile(demo_run / "metrics.jsonl", other)
    assert plot(other, png, keys=keys)[0].title == "nightly-42"
    done = run_cli(["plot", str(other), "--keys", *keys, "-o", str(png), "--title", "ablation A"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert plot(other, png, keys=keys, title="ablation A")[0].title == "ablation A"


def trainer_histogram(tmp_path: Path, stats: dict[str, float], *, grows: bool) -> Path:
    """A run whose trainer recorded an OTel histogram (min/max/mean in s, count in observations, sum in s summed over
    the step) for 4 steps: ``stats`` at every step, each times the step + 1 when ``grows``."""
    run = tmp_path / "runs" / "h"
    run.mkdir(parents=True)
    lines = [
        json.dumps(
            {"step": step, **{f"trainer/update_seconds/{k}": v * (step + 1 if grows else 1) for k, v in stats.items()}}
        )
        for step in range(4)
    ]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return run


def test_a_group_with_more_than_two_units_continues_in_another_panel(tmp_path: Path) -> None:
    # two observations a step, more at each: the sum is not the mean, and its unit is a third one
    stats = {"count": 2.0, "max": 0.3, "mean": 0.2, "min": 0.1, "sum": 0.4}
    run = trainer_histogram(tmp_path, stats, grows=True)
    done = run_cli(["plot", str(run), "-o", str(tmp_path / "h.png")], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    layout, _ = plot(run, tmp_path / "h.png")
    first, second = layout.panels
    assert first.title == "trainer/update_seconds"
    assert sides(first) == [("left", "s"), ("right", "observations per step")]
    assert second.title == "trainer/update_seconds/sum"
    assert [(a.unit, a.keys) for a in second.axes] == [("s summed per step", ["trainer/update_seconds/sum"])]
    assert layout.groups == ["trainer/update_seconds"]


def test_a_histogram_of_one_observation_a_step_is_one_line_in_one_panel(demo_run: Path, tmp_path: Path) -> None:
    """Issue 36 item 11: the demo's ``trainer/update_seconds`` (one update a step) drew min, max and mean on top of each
    other, with a separate ``/sum`` panel of the same numbers: keys of one quantity whose values are the same at every
    step are one line, labelled with all of them, and the count beside it on its own axis."""
    layout, drawing = plot(demo_run, tmp_path / "update.png", keys=["trainer/update_seconds/*"])
    assert values_of(demo_run, "trainer/update_seconds/count") == [1.0] * 6
    (panel,) = layout.panels
    update = "trainer/update_seconds/"
    assert panel.title == "trainer/update_seconds"
    left, right = panel.axes
    assert [(line.keys, line.label) for line in left.lines] == [
        (tuple(update + stat for stat in ("max", "mean", "min", "sum")), "max = mean = min = sum")
    ]
    assert (left.unit, right.unit, right.keys) == ("s", "observations per step", [update + "count"])
    assert panel.legend == ("max = mean = min = sum", "count (right)")
    count_axis = drawing.panels[0].axes[1]
    assert count_axis.ylim[0] < 0 < 1 < count_axis.ylim[1]  # the count that is always 1 shows from 0, not ±0.04


def test_titles_stay_inside_the_image_and_clear_of_each_other(
    demo_run: Path, default_plot: tuple[Layout, Drawing], tmp_path: Path
) -> None:
    """Issue 36 item 11: the default plot's ``rollout/DCGM_FI_DEV_GPU_UTIL/gpus/idle_seconds`` title was cut at the
    image's edge (``.../gpus/idle_second``): a long title gives up its leading parts (``…/``) until it fits."""
    for width in (1200, 800):
        layout, drawing = (
            default_plot if width == 1200 else plot(demo_run, tmp_path / f"titles-{width}.png", width=width)
        )
        boxes = [panel.title_box for panel in drawing.panels]
        for panel, drawn in zip(layout.panels, drawing.panels, strict=True):
            box = drawn.title_box
            assert 0 <= box[0] < box[2] <= width, (drawn.title, box)
            assert not [other for other in boxes if other != box and overlap(box, other)], drawn.title
            assert drawn.title == panel.title or drawn.title.startswith("…/"), (panel.title, drawn.title)
        assert [p.title for p in drawing.panels if p.title.endswith("gpus/idle_seconds")], drawing.panels


def test_label_values_are_shown_under_their_label_name(demo_run: Path, tmp_path: Path) -> None:
    """Issue 36 item 11: the GPU legends read ``Hostname.rollout-node``; the label the lines share titles the legend,
    and each line shows its value."""
    layout, drawing = plot(demo_run, tmp_path / "gpu.png", view="gpu")
    panels = {panel.group: panel for panel in layout.panels}
    idle = panels["rollout/DCGM_FI_DEV_GPU_UTIL/gpus/idle_seconds"]
    assert idle.legend_title == "Hostname"
    assert sorted(idle.legend) == [
        "rollout-node",
        "rollout-node [gen]",
        "rollout-node [update]",
        "trainer-node",
        "trainer-node [gen]",
        "trainer-node [update]",
    ]
    assert not [label for panel in drawing.panels for label in panel.legend if "Hostname" in label]


def test_the_health_view_draws_each_zero_once_on_an_axis_from_zero(demo_run: Path, tmp_path: Path) -> None:
    """Issue 36 item 11: ``--view health`` drew all-zero lines on a ±0.04 axis, one hiding the other: the keys that
    stayed 0 are one line naming them all, on an axis from 0 to 1."""
    layout, drawing = plot(demo_run, tmp_path / "health.png", view="health")
    panels = {panel.group: (panel, drawn) for panel, drawn in zip(layout.panels, drawing.panels, strict=True)}
    backends, drawn = panels["otel_bridge/backend_errors"]
    assert values_of(demo_run, "otel_bridge/backend_errors/backend.jsonl") == [0.0] * 6
    ((line,),) = [axis.lines for axis in backends.axes]
    assert line.keys == ("otel_bridge/backend_errors/backend.jsonl", "otel_bridge/backend_errors/backend.tensorboard")
    assert (backends.legend_title, backends.legend) == ("backend", ("jsonl = tensorboard",))
    ylim = drawn.axes[0].ylim
    assert ylim[0] < 0 < 1 <= ylim[1] < 1.1, ylim
    for panel, _ in panels.values():  # no two lines of a panel are the same numbers
        points = [(line.steps, line.values) for line in panel.lines]
        assert len(points) == len(set(points)), panel.title


def test_plot_into_a_directory_that_does_not_exist_is_a_one_line_error(demo_run: Path, tmp_path: Path) -> None:
    """Issue 36 item 7: ``plot -o missing/dir/x.png`` created the directory silently."""
    done = run_cli(["plot", str(demo_run), "-o", "missing/dir/x.png"], cwd=tmp_path)
    assert done.returncode == 2, done.stdout
    assert done.stderr.strip().splitlines() == [
        "otel-bridge: -o missing/dir/x.png: the directory missing/dir does not exist; create it first"
    ]
    assert not (tmp_path / "missing").exists()


def test_phases_are_drawn_beside_their_step_and_their_durations_together(tmp_path: Path) -> None:
    """Steps with a ``gen`` and an ``update`` phase (as the demo's): a phase's statistic joins the step's panel of the
    same key, labelled with the phase; the phases' durations share one panel in seconds. Every series differs from the
    others at some step (series equal at every step share one line: the demo's update phase sometimes counts nothing,
    and its gen phase then draws as the step's own line)."""
    key = "rollout/vllm/generation_tokens_total/delta"
    run = tmp_path / "runs" / "p"
    run.mkdir(parents=True)
    lines = [
        json.dumps(
            {
                "step": step,
                key: 100.0 + step,
                f"phase/gen/{key}": 70.0 + 2 * step,
                f"phase/update/{key}": 30.0 - step,
                "phase/gen/seconds": 1.5 + step / 10,
                "phase/update/seconds": 0.5,
            }
        )
        for step in range(4)
    ]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    layout, _ = plot(run, tmp_path / "phases.png", keys=[key, f"phase/*/{key}", "phase/*/seconds"])
    panels = {panel.group: panel for panel in layout.panels}
    assert sorted(panels) == ["phases", "rollout/vllm/generation_tokens_total"]
    tokens = panels["rollout/vllm/generation_tokens_total"]
    assert [a.keys for a in tokens.axes] == [[f"phase/gen/{key}", f"phase/update/{key}", key]]
    assert sorted(tokens.legend) == ["delta", "delta [gen]", "delta [update]"]
    durations = panels["phases"]
    assert [(a.unit, a.keys) for a in durations.axes] == [("s", ["phase/gen/seconds", "phase/update/seconds"])]
    assert sorted(durations.legend) == ["gen", "update"]


def test_too_many_panels_for_the_size_say_so_in_one_line(demo_run: Path, tmp_path: Path) -> None:
    png, keys = (
        tmp_path / "tiny.png",
        ["actor/*", "trainer/*", "rollout/vllm/[gkn]*", "rollout/vllm/time_to_first*/p99"],
    )
    done = run_cli(
        ["plot", str(demo_run), "--keys", *keys, "-o", str(png), "--width", "300", "--height", "200"], cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert read_png(png)[0] == (300, 200)
    assert "panels do not fit in 300x200 pixels" in done.stderr
    assert "UserWarning" not in done.stderr


def test_plot_errors_name_the_fix(demo_run: Path, tmp_path: Path) -> None:
    done = run_cli(["plot", str(tmp_path / "missing"), "-o", str(tmp_path / "x.png")], cwd=tmp_path)
    assert done.returncode == 2
    assert "neither a run directory" in done.stderr
    assert "Traceback" not in done.stderr
    done = run_cli(["plot", str(demo_run), "--keys", "nope/*", "-o", str(tmp_path / "x.png")], cwd=tmp_path)
    assert done.returncode == 2
    assert "no key matches ['nope/*']" in done.stderr


def test_plot_without_matplotlib_names_the_extra(demo_run: Path, tmp_path: Path) -> None:
    # a matplotlib package that cannot be imported, ahead of the real one on the path
    shadow = tmp_path / "shadow" / "matplotlib"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('matplotlib is not installed here')\n", encoding="utf-8")
    done = run_cli(
        ["plot", str(demo_run), "-o", str(tmp_path / "x.png")],
        cwd=tmp_path,
        env={"PYTHONPATH": f"{shadow.parent}{os.pathsep}{Path(__file__).resolve().parents[2]}"},
    )
    assert done.returncode == 2
    assert f"pip install '{Path(__file__).resolve().parents[2]}[plot]'" in done.stderr  # issue 36: from the clone
    assert not (tmp_path / "x.png").exists()


def test_a_legend_too_wide_for_its_panel_gets_fewer_columns_and_stays_in_the_image(tmp_path: Path) -> None:
    """Long phase names under the rightmost panel: centred under its narrow panel, the 3-column legend stuck out of
    the image's right side (constrained layout does not move panels sideways for a legend)."""
    run = tmp_path / "runs" / "wide"
    run.mkdir(parents=True)
    group = "rollout/vllm/e2e_request_latency_seconds"
    phases = ("generate_sequences_with_reward", "update_actor_and_critic_models")
    lines = []
    for step in range(6):
        record: dict[str, float] = {"step": step, "actor/loss": 1 / (step + 1), "actor/kl": 0.1 * step}
        record["critic/vf_loss"] = 2 / (step + 1)
        for stat, value in (("mean", 0.5), ("p50", 0.4), ("p99", 2.0), ("count", 123456.0)):
            record[f"{group}/{stat}"] = value * (step + 1)
            record.update({f"phase/{phase}/{group}/{stat}": value * (step + 2 + i) for i, phase in enumerate(phases)})
        lines.append(json.dumps(record))
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for width, height in ((1000, 700), (800, 500)):
        png = tmp_path / f"wide-{width}.png"
        layout, drawing = plot(run, png, phases=True, width=width, height=height)
        assert [panel.title for panel in layout.panels][-1] == group
        data_areas = [axis.data for panel in drawing.panels for axis in panel.axes]
        boxes = [panel.legend_box for panel in drawing.panels if panel.legend_box is not None]
        assert len(boxes) == 2
        labels = drawing.panels[-1].legend
        assert len(labels) == 12
        assert sum("count" in label for label in labels) == 3
        for box in boxes:
            assert 0 <= box[0] < box[2] <= width, box
            assert 0 <= box[1] < box[3] <= height, box
            assert not any(overlap(box, area) for area in data_areas), box
        assert not overlap(boxes[0], boxes[1])


def test_the_gpu_view_shows_where_each_steps_gpu_time_went(demo_run: Path, tmp_path: Path) -> None:
    """``--view gpu``: utilization, idle GPU-seconds and energy per step, each phase's idle GPU-seconds beside its
    step's (without ``--phases``), the phases' lengths, in their units; nothing of vLLM's or the trainer's."""
    png = tmp_path / "gpu.png"
    done = run_cli(["plot", str(demo_run), "--view", "gpu", "-o", str(png)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    layout, _ = plot(demo_run, png, view="gpu")
    panels = {panel.group: panel for panel in layout.panels}
    keys = [key for panel in panels.values() for key in panel.keys]
    assert keys, panels
    assert not [k for k in keys if "vllm" in k or k.startswith(("actor/", "otel_bridge/"))], keys
    units = units_of(layout)
    idle = "rollout/DCGM_FI_DEV_GPU_UTIL/gpus/idle_seconds/Hostname.trainer-node"
    for key in (idle, f"phase/gen/{idle}", f"phase/update/{idle}"):
        assert units.get(key) == "idle GPU-s", (key, sorted(units))
    assert units["rollout/DCGM_FI_DEV_GPU_UTIL/mean/Hostname.trainer-node"] == "%"
    energy = [k for k in keys if "/joules/delta" in k and not k.startswith("phase/")]
    assert energy, keys
    assert {units[k] for k in energy} == {"J per step"}
    assert {"phase/gen/seconds", "phase/update/seconds"} <= set(panels["phases"].axes[0].keys)
