"""``otel-bridge plot`` on the records of a real ``otel-bridge demo`` run."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from PIL.PngImagePlugin import PngImageFile

from tests.cli.support import run_cli

Box = list[float]


def read_png(png: Path) -> tuple[tuple[int, int], dict[str, str], Image.Image]:
    """The PNG's size, its text chunks and its pixels (RGB)."""
    with Image.open(png) as image:
        image.load()
        assert isinstance(image, PngImageFile)
        return image.size, dict(image.text), image.convert("RGB")


def layout_of(png: Path) -> list[dict[str, Any]]:
    panels: list[dict[str, Any]] = json.loads(read_png(png)[1]["otel_bridge:layout"])
    return panels


def overlap(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def values_of(run: Path, key: str) -> list[float]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [float(r[key]) for r in records if key in r]


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


def test_plot_one_panel_per_key_group_at_the_requested_size(demo_run: Path, tmp_path: Path) -> None:
    png = tmp_path / "out.png"
    keys = ["rollout/vllm/generation_tokens_total/*", "rollout/vllm/time_to_first_token_seconds/p99", "actor/loss"]
    done = run_cli(
        ["plot", str(demo_run), "--keys", *keys, "-o", str(png), "--width", "800", "--height", "500"], cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    size, text, _ = read_png(png)
    assert size == (800, 500)
    groups = json.loads(text["otel_bridge:groups"])
    panels = int(text["otel_bridge:panels"])
    assert groups == [
        "actor",
        "rollout/vllm/generation_tokens_total",
        "rollout/vllm/time_to_first_token_seconds",
    ]
    assert panels == 3
    assert "3 panels" in done.stdout
    layout = layout_of(png)
    # a panel of one key is titled after the key, without a legend; the others after their group
    assert [p["title"] for p in layout] == [
        "actor/loss",
        "rollout/vllm/generation_tokens_total",
        "rollout/vllm/time_to_first_token_seconds/p99",
    ]
    assert [p["legend"] is None for p in layout] == [True, False, True]
    # y-axis units from the keys: delta and rate are different units, so each has its own axis
    assert [(a["side"], a["unit"]) for a in layout[1]["axes"]] == [("left", "tokens per step"), ("right", "tokens/s")]
    assert [(a["side"], a["unit"]) for a in layout[2]["axes"]] == [("left", "s")]
    assert [(a["side"], a["unit"]) for a in layout[0]["axes"]] == [("left", None)]  # actor/loss states no unit


def test_plot_a_jsonl_file_with_default_keys(demo_run: Path, tmp_path: Path) -> None:
    png = tmp_path / "all.png"
    done = run_cli(["plot", str(demo_run / "metrics.jsonl"), "-o", str(png)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    size, text, _ = read_png(png)
    panels = int(text["otel_bridge:panels"])
    assert size == (1200, 60 + math.ceil(panels / 3) * 280)  # the height grows with the panels (issue 26)
    groups = json.loads(text["otel_bridge:groups"])
    assert not any(g.startswith("otel_bridge") for g in groups)  # health keys only on request
    assert not any(g.startswith("phase/") or g == "phases" for g in groups)  # phases with --phases (issue 26)
    assert "rollout/vllm/kv_cache_usage_perc" in groups
    layout = layout_of(png)
    assert int(text["otel_bridge:panels"]) == len(layout)
    assert list(dict.fromkeys(p["group"] for p in layout)) == groups  # every group has a panel, in order
    units = {key: axis["unit"] for panel in layout for axis in panel["axes"] for key in axis["keys"]}
    vllm = "rollout/vllm/"
    assert units[vllm + "kv_cache_usage_perc/max"] == "fraction"
    assert units[vllm + "prefix_cache_hit_rate"] == "fraction"
    assert units[vllm + "e2e_request_latency_seconds/p99"] == "s"
    assert units[vllm + "time_to_first_token_seconds/count"] == "observations per step"
    assert units[vllm + "prompt_tokens_total/rate"] == "tokens/s"
    assert units[vllm + "request_success_total/delta"] == "per step"
    for panel in layout:  # at most two y-axes, one unit each: a left one, then a right one
        assert [a["side"] for a in panel["axes"]] in (["left"], ["left", "right"]), panel["title"]
        data = panel["axes"][0]["bbox"]
        assert data[3] - data[1] >= 120, (panel["title"], data)  # room for the data, not just legends
        assert panel["title"] != "rollout/vllm", panel["axes"]
        assert len({a["unit"] for a in panel["axes"]}) == len(panel["axes"]), panel["title"]


def test_a_histogram_count_has_its_own_axis_and_does_not_flatten_the_latencies(demo_run: Path, tmp_path: Path) -> None:
    png = tmp_path / "ttft.png"
    done = run_cli(
        ["plot", str(demo_run), "--keys", "rollout/vllm/time_to_first_token_seconds/*", "-o", str(png)], cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    (panel,) = layout_of(png)
    assert panel["title"] == "rollout/vllm/time_to_first_token_seconds"
    left, right = panel["axes"]
    ttft = "rollout/vllm/time_to_first_token_seconds/"
    assert (left["side"], left["unit"], left["keys"]) == ("left", "s", [ttft + "mean", ttft + "p50", ttft + "p99"])
    assert (right["side"], right["unit"], right["keys"]) == ("right", "observations per step", [ttft + "count"])
    latencies = [v for stat in ("mean", "p50", "p99") for v in values_of(demo_run, ttft + stat)]
    counts = values_of(demo_run, ttft + "count")
    # the latency axis spans the latencies (matplotlib's 5% margins), far below the counts it used to share
    span = max(latencies) - min(latencies)
    assert left["ylim"][0] >= min(latencies) - 0.1 * span
    assert left["ylim"][1] <= max(latencies) + 0.1 * span
    assert left["ylim"][1] < min(counts)
    assert right["ylim"][0] <= min(counts) <= max(counts) <= right["ylim"][1]
    assert panel["legend"]["labels"] == ["mean", "p50", "p99", "count (right)"]


# The demo's trainer, vLLM and phase panels (18): all of them must fit at 1000x700. The demo's GPU panels (utilization,
# idle GPU-seconds, joules per host) make 21, which need a taller image than 700 pixels at three panels a row.
VLLM_AND_TRAINER = ["actor/*", "critic/*", "trainer/*", "rollout/vllm/*", "phase/*/rollout/vllm/*", "phase/*seconds"]


def test_legends_are_outside_every_data_area_and_inside_the_image(demo_run: Path, tmp_path: Path) -> None:
    for width, height in ((1400, 900), (1000, 700)):
        png = tmp_path / f"all-{width}.png"
        size_args = ["--width", str(width), "--height", str(height)]
        done = run_cli(["plot", str(demo_run), "-o", str(png), *size_args, "--keys", *VLLM_AND_TRAINER], cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "do not fit" not in done.stderr
        size, _, pixels = read_png(png)
        assert size == (width, height)
        layout = layout_of(png)
        data_areas = [axis["bbox"] for panel in layout for axis in panel["axes"]]
        legends = [(panel["title"], panel["legend"]) for panel in layout if panel["legend"] is not None]
        assert legends
        for title, legend in legends:
            box = legend["bbox"]
            assert 0 <= box[0] < box[2] <= width, (title, box)
            assert 0 <= box[1] < box[3] <= height, (title, box)
            assert not any(overlap(box, area) for area in data_areas), (title, box)
            # really drawn there: the legend's region holds dark pixels (its text)
            region = pixels.crop((int(box[0]), int(box[1]), int(box[2]), int(box[3]))).convert("L")
            assert sum(region.histogram()[:128]) > 0, title


def test_the_title_is_the_run_name(demo_run: Path, tmp_path: Path) -> None:
    png = tmp_path / "t.png"
    assert run_cli(["plot", str(demo_run), "-o", str(png)], cwd=tmp_path).returncode == 0
    title = read_png(png)[1]["otel_bridge:title"]
    assert title == "d"
    assert str(demo_run) not in title
    # a JSONL file named otherwise: its name without the extension; --title wins over both
    other = tmp_path / "nightly-42.jsonl"
    shutil.copyfile(demo_run / "metrics.jsonl", other)
    assert run_cli(["plot", str(other), "-o", str(png)], cwd=tmp_path).returncode == 0
    assert read_png(png)[1]["otel_bridge:title"] == "nightly-42"
    assert run_cli(["plot", str(other), "-o", str(png), "--title", "ablation A"], cwd=tmp_path).returncode == 0
    assert read_png(png)[1]["otel_bridge:title"] == "ablation A"


def test_a_group_with_more_than_two_units_continues_in_another_panel(tmp_path: Path) -> None:
    # an OTel histogram of the trainer: min/max/mean in s, count in observations, sum in s summed over the step
    run = tmp_path / "runs" / "h"
    run.mkdir(parents=True)
    stats = {"count": 2.0, "max": 0.3, "mean": 0.2, "min": 0.1, "sum": 0.4}
    lines = [
        json.dumps({"step": step, **{f"trainer/update_seconds/{k}": v * (step + 1) for k, v in stats.items()}})
        for step in range(4)
    ]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    png = tmp_path / "h.png"
    done = run_cli(["plot", str(run), "-o", str(png)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    first, second = layout_of(png)
    assert first["title"] == "trainer/update_seconds"
    assert [(a["side"], a["unit"]) for a in first["axes"]] == [("left", "s"), ("right", "observations per step")]
    assert second["title"] == "trainer/update_seconds/sum"
    assert [(a["unit"], a["keys"]) for a in second["axes"]] == [("s summed per step", ["trainer/update_seconds/sum"])]
    assert json.loads(read_png(png)[1]["otel_bridge:groups"]) == ["trainer/update_seconds"]


def test_phases_are_drawn_beside_their_step_and_their_durations_together(demo_run: Path, tmp_path: Path) -> None:
    """The demo's steps have a ``gen`` and an ``update`` phase: a phase's statistic joins the step's panel of the same
    key, labelled with the phase; the phases' durations share one panel in seconds."""
    png = tmp_path / "phases.png"
    key = "rollout/vllm/generation_tokens_total/delta"
    done = run_cli(["plot", str(demo_run), "--keys", key, f"phase/*/{key}", "phase/*/seconds", "-o", str(png)],
                   cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    panels = {panel["group"]: panel for panel in layout_of(png)}
    assert sorted(panels) == ["phases", "rollout/vllm/generation_tokens_total"]
    tokens = panels["rollout/vllm/generation_tokens_total"]
    assert [a["keys"] for a in tokens["axes"]] == [[f"phase/gen/{key}", f"phase/update/{key}", key]]
    assert sorted(tokens["legend"]["labels"]) == ["delta", "delta [gen]", "delta [update]"]
    durations = panels["phases"]
    assert [(a["unit"], a["keys"]) for a in durations["axes"]] == [("s", ["phase/gen/seconds", "phase/update/seconds"])]
    assert sorted(durations["legend"]["labels"]) == ["gen", "update"]


def test_too_many_panels_for_the_size_say_so_in_one_line(demo_run: Path, tmp_path: Path) -> None:
    png = tmp_path / "tiny.png"
    done = run_cli(["plot", str(demo_run), "-o", str(png), "--width", "300", "--height", "200"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert read_png(png)[0] == (300, 200)
    assert "do not fit in 300x200 pixels" in done.stderr
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
            record.update({f"phase/{phase}/{group}/{stat}": value * (step + 2) for phase in phases})
        lines.append(json.dumps(record))
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for width, height in ((1000, 700), (800, 500)):
        png = tmp_path / f"wide-{width}.png"
        args = ["plot", str(run), "--phases", "-o", str(png), "--width", str(width), "--height", str(height)]
        done = run_cli(args, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        layout = layout_of(png)
        assert [panel["title"] for panel in layout][-1] == group
        data_areas = [axis["bbox"] for panel in layout for axis in panel["axes"]]
        boxes = [panel["legend"]["bbox"] for panel in layout if panel["legend"] is not None]
        assert len(boxes) == 2
        labels = layout[-1]["legend"]["labels"]
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
    panels = {panel["group"]: panel for panel in layout_of(png)}
    keys = [key for panel in panels.values() for axes in panel["axes"] for key in axes["keys"]]
    assert keys, panels
    assert not [k for k in keys if "vllm" in k or k.startswith(("actor/", "otel_bridge/"))], keys
    units = {key: axes["unit"] for panel in panels.values() for axes in panel["axes"] for key in axes["keys"]}
    idle = "rollout/DCGM_FI_DEV_GPU_UTIL/gpus/idle_seconds/Hostname.trainer-node"
    for key in (idle, f"phase/gen/{idle}", f"phase/update/{idle}"):
        assert units.get(key) == "idle GPU-s", (key, sorted(units))
    assert units["rollout/DCGM_FI_DEV_GPU_UTIL/mean/Hostname.trainer-node"] == "%"
    energy = [k for k in keys if "/joules/delta" in k and not k.startswith("phase/")]
    assert energy, keys
    assert {units[k] for k in energy} == {"J per step"}
    assert {"phase/gen/seconds", "phase/update/seconds"} <= set(panels["phases"]["axes"][0]["keys"])
