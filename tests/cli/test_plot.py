"""``otel-bridge plot`` on the records of a real ``otel-bridge demo`` run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from PIL import Image

from tests.cli.support import run_cli


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 6-step demo run (simulated vLLM servers, JSONL + TensorBoard)."""
    out = tmp_path_factory.mktemp("demo")
    done = run_cli(["demo", "--steps", "6", "--step-seconds", "0.3", "--out", str(out), "--run-name", "d"], cwd=out)
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
    with Image.open(png) as image:
        image.load()
        assert image.format == "PNG"
        assert image.size == (800, 500)
        groups = json.loads(image.text["otel_bridge:groups"])
        panels = int(image.text["otel_bridge:panels"])
    assert groups == [
        "actor",
        "rollout/vllm/generation_tokens_total",
        "rollout/vllm/time_to_first_token_seconds",
    ]
    assert panels == 3
    assert "3 panels" in done.stdout


def test_plot_a_jsonl_file_with_default_keys(demo_run: Path, tmp_path: Path) -> None:
    png = tmp_path / "all.png"
    done = run_cli(["plot", str(demo_run / "metrics.jsonl"), "-o", str(png)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with Image.open(png) as image:
        assert image.size == (1200, 800)
        groups = json.loads(image.text["otel_bridge:groups"])
    assert not any(g.startswith("otel_bridge") for g in groups)  # health keys only on request
    assert "rollout/vllm/kv_cache_usage_perc" in groups
    assert int(image.text["otel_bridge:panels"]) == len(groups)


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
    assert "pip install 'otel-bridge[plot]'" in done.stderr
    assert not (tmp_path / "x.png").exists()
