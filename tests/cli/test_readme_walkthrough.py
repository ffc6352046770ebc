"""The README's getting-started text is true: its walk-through runs as written, and its record example is real.

The walk-through block (after ``<!-- walkthrough:commands -->``) is run command by command from a fresh directory
holding this clone's ``.venv`` and the README's ``train.py``, with one substitution: the ports 8000, 8001 and 9090
become free loopback ports. ``source .venv/bin/activate`` applies to every later command; a command ending in ``&``
runs in the background and ``kill %N`` stops background job N (by PID), as in a shell. Every other command must exit
0 (``doctor`` included: every check passes).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from otel_bridge import Bridge
from tests.cli.support import REPO, cli_env
from tests.helpers.http_servers import free_port
from tests.helpers.prometheus_server import prometheus_binary

README = REPO / "README.md"
ACTIVATE = "source .venv/bin/activate"


def readme_block(marker: str) -> str:
    """The fenced code block right after ``<!-- walkthrough:MARKER -->`` in the README."""
    text = README.read_text(encoding="utf-8")
    found = re.search(rf"<!-- walkthrough:{re.escape(marker)} -->\n```\w*\n(.*?)\n```", text, re.S)
    assert found, f"no block marked walkthrough:{marker} in {README}"
    return found[1]


def stop(process: subprocess.Popen[bytes]) -> int:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)
    return process.returncode


def test_the_readme_walkthrough_runs_as_written(tmp_path: Path) -> None:
    if not (REPO / ".venv" / "bin" / "otel-bridge").exists():
        pytest.skip("the walk-through starts after `make demo`, which installs .venv/bin/otel-bridge")
    prometheus_binary()  # fails with the fix when the Prometheus server is not installed
    commands = readme_block("commands")
    for port in ("8000", "8001", "9090"):
        commands = re.sub(rf"\b{port}\b", str(free_port()), commands)
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    (tmp_path / "train.py").write_text(readme_block("train.py") + "\n", encoding="utf-8")
    env = cli_env()
    background: list[subprocess.Popen[bytes]] = []
    outputs: dict[str, subprocess.CompletedProcess[str]] = {}
    activated = False
    try:
        for line in commands.splitlines():
            command = line.split(" #")[0].strip()
            if not command or command.startswith("#"):
                continue
            if command == ACTIVATE:
                activated = True
                continue
            prefix = f"{ACTIVATE} && " if activated else ""
            if command.startswith("kill %"):
                for job in re.findall(r"%(\d+)", command):
                    stop(background[int(job) - 1])
                continue
            if command.endswith("&"):
                log = (tmp_path / f"job{len(background) + 1}.log").open("wb")
                background.append(
                    subprocess.Popen(
                        ["bash", "-c", f"{prefix}exec {command[:-1].strip()}"],
                        cwd=tmp_path,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
                log.close()
                continue
            done = subprocess.run(
                ["bash", "-c", prefix + command],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, f"`{command}` exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
            outputs[command.split()[0] + " " + command.split()[1]] = done
        assert background, "the walk-through starts servers in the background"
        assert all(p.poll() is not None for p in background), "`kill %1 %2 %3` stops every background job"
    finally:
        for process in background:
            stop(process)

    doctor = outputs["otel-bridge doctor"].stdout
    assert re.search(r"^PASS +metric vllm:generation_tokens_total ", doctor, re.M), doctor
    assert "DeliveryReport(" in outputs["python train.py"].stdout
    (jsonl,) = (tmp_path / "runs").glob("*/metrics.jsonl")
    records = [json.loads(line) for line in jsonl.read_text(encoding="utf-8").splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4]
    for record in records:
        assert "otel_bridge/boundary_lag_s" in record  # read through Prometheus: the PromQL path
        assert record["otel_bridge/missing_metrics"] == 0.0
        assert record["rollout/vllm/generation_tokens_total/delta"] > 0
        assert record["trainer/tokens"] == 3072.0 * (record["step"] + 1)  # a counter is a running total
    assert json.loads(outputs["tail -n"].stdout)["step"] == 4


def test_the_readme_record_example_holds(tmp_path: Path) -> None:
    """Issue 16 point 4: the README's JSONL line shows trainer/tokens as the counter really reports it."""
    text = README.read_text(encoding="utf-8")
    example = re.search(
        r"One JSONL line of that run.*?when every step trains on ([\d,]+) tokens:\n\n```json\n(.*?)```", text, re.S
    )
    assert example, "the README's JSONL example moved"
    per_step = float(example[1].replace(",", ""))
    step = int(re.search(r'"step": (\d+)', example[2])[1])  # type: ignore[index]
    shown = float(re.search(r'"trainer/tokens": ([\d.]+)', example[2])[1])  # type: ignore[index]
    with Bridge.from_config({"trackers": [], "run": {"dir": str(tmp_path)}}) as bridge:
        tokens = bridge.meter("trainer").create_counter("trainer.tokens")
        latency = bridge.meter("trainer").create_histogram("trainer.update_seconds")
        for n in range(step + 1):
            with bridge.step(n):
                tokens.add(per_step)
                latency.record(0.5)
        record = bridge.collect(step)
    assert record["trainer/tokens"] == shown
    assert record["trainer/update_seconds/count"] == 1.0  # histograms are per step
