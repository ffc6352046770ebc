"""The walk-through of docs/getting-started.md is true: it runs as written.

The walk-through block (after ``<!-- walkthrough:commands -->``) is run command by command from a fresh directory
holding this clone's ``.venv`` and the page's ``train.py``, with one substitution: the ports 8000, 8001 and 9090
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

from tests.cli.support import REPO, cli_env, stop_process
from tests.helpers.http_servers import free_port
from tests.helpers.prometheus_server import prometheus_binary

PAGE = REPO / "docs" / "getting-started.md"
ACTIVATE = "source .venv/bin/activate"


def walkthrough_block(marker: str) -> str:
    """The fenced code block right after ``<!-- walkthrough:MARKER -->`` in docs/getting-started.md."""
    text = PAGE.read_text(encoding="utf-8")
    found = re.search(rf"<!-- walkthrough:{re.escape(marker)} -->\n```\w*\n(.*?)\n```", text, re.S)
    assert found, f"no block marked walkthrough:{marker} in {PAGE}"
    return found[1]


def test_the_walkthrough_runs_as_written(tmp_path: Path) -> None:
    if not (REPO / ".venv" / "bin" / "otel-bridge").exists():
        pytest.skip("the walk-through starts after `make demo`, which installs .venv/bin/otel-bridge")
    prometheus_binary()  # fails with the fix when the Prometheus server is not installed
    commands = walkthrough_block("commands")
    for port in ("8000", "8001", "9090"):
        commands = re.sub(rf"\b{port}\b", str(free_port()), commands)
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    (tmp_path / "train.py").write_text(walkthrough_block("train.py") + "\n", encoding="utf-8")
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
                    stop_process(background[int(job) - 1])
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
            stop_process(process)

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
