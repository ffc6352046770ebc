"""The command line's shape: help everywhere, the entry points, errors, colours, and the shared output helpers."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest
import yaml

from otel_bridge.cli.output import error_line, format_rows, progress_bar, use_colour
from tests.cli.support import REPO, run_cli, write_config

COMMANDS = ("demo", "init", "doctor", "discover", "query", "tail", "plot", "prometheus-config", "prometheus-rules")


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(tmp_path: Path, command: str) -> None:
    done = run_cli([command, "--help"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: otel-bridge {command}")
    assert "--verbose" in done.stdout  # the global flags also work after the command


def test_console_script_lists_every_command(tmp_path: Path) -> None:
    script = REPO / ".venv" / "bin" / "otel-bridge"
    if not script.exists():
        pytest.skip(f"{script} is not installed (pip install -e .)")
    done = subprocess.run([str(script), "--help"], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    for command in COMMANDS:
        assert command in done.stdout


def test_prometheus_config_and_discover(tmp_path: Path) -> None:
    out = tmp_path / "prometheus.yml"
    done = run_cli(["prometheus-config", str(out), "--rollout", "127.0.0.1:8000", "--interval", "5"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"wrote {out}\n"
    assert yaml.safe_load(out.read_text(encoding="utf-8"))["scrape_configs"]

    config = write_config(
        tmp_path / "c.yaml", {"prometheus": {"url": "http://127.0.0.1:9999"}, "scrape": {"targets": ["127.0.0.1:8000"]}}
    )
    done = run_cli(["discover", "--config", str(config)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "prometheus: http://127.0.0.1:9999 (from config)",
        "scrape targets (config): http://127.0.0.1:8000/metrics",
    ]


def test_prometheus_rules_for_a_config_and_its_errors(tmp_path: Path) -> None:
    metrics = [{"name": "vllm:generation_tokens_total", "type": "counter", "by": ["model_name"]}]
    config = write_config(tmp_path / "c.yaml", {"metrics": metrics})
    out = tmp_path / "rules" / "otel-bridge.rules.yml"
    done = run_cli(["prometheus-rules", str(out), "--config", str(config), "--interval", "5"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (group,) = yaml.safe_load(out.read_text(encoding="utf-8"))["groups"]
    assert (group["name"], group["interval"]) == ("otel-bridge", "5s")
    # Every name the family may be stored under (served, escaped, Ray's), one server's two names counted once.
    forms = ("vllm:generation_tokens_total", "vllm_generation_tokens_total", "ray_vllm_generation_tokens_total")
    selected = " or ".join(
        f'label_replace((last_over_time({name}[5m])), "otel_bridge_form", "{form}", "", "")'
        for form, name in enumerate(forms)
    )
    (rule,) = group["rules"]  # one rule: its parts are one snapshot of the store, a part a line
    assert rule["record"] == "otel_bridge:parts_5m"
    lines = rule["expr"].splitlines()
    assert len(lines) == 1 + 4  # the sum, then the per-target parts
    part = '"otel_bridge_part", "vllm:generation_tokens_total:last5m_sum_by_model_name", "", "")'
    assert lines[0] == f"(label_replace((sum by (model_name) (max without (otel_bridge_form) ({selected}))), {part})"
    assert all(line.startswith("or (label_replace(") for line in lines[1:])
    untyped = write_config(tmp_path / "u.yaml", {"metrics": [{"name": "vllm:prompt_tokens_total"}]})
    done = run_cli(["prometheus-rules", str(out), "--config", str(untyped)], cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "metrics[0] vllm:prompt_tokens_total" in done.stderr
    assert "set type: counter, gauge or histogram" in done.stderr


def test_a_bad_argument_is_one_line(tmp_path: Path) -> None:
    done = run_cli(["demo", "--steps", "0"], cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == "otel-bridge: --steps must be at least 1, got 0\n"


def test_quiet_doctor_prints_nothing_when_all_passes(tmp_path: Path) -> None:
    done = run_cli(["doctor", "--quiet"], cwd=tmp_path)  # defaults: jsonl tracker, no infrastructure source
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == ""


def test_colour_rules() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert use_colour(Terminal(), environ={}) is True
    assert use_colour(Terminal(), environ={"NO_COLOR": "1"}) is False
    assert use_colour(io.StringIO(), environ={}) is False


def test_output_helpers() -> None:
    table = format_rows(["name", "value"], [["a", "1"], ["long name", "22"]], right=(1,))
    assert table.splitlines() == ["name       value", "---------  -----", "a              1", "long name     22"]
    assert progress_bar(3, 6, width=6) == "[###...] 3/6"
    assert error_line("first\ntried, in order:\n  - x") == "otel-bridge: first (tried, in order:; - x)"
