"""The walk-through of docs/getting-started.md is true: it runs as written.

The walk-through block (after ``<!-- walkthrough:commands -->``) is run command by command in a git repository that
stands for a clone after ``make demo`` (this clone's ``.gitignore`` and ``.venv``, and a run of the real demo in
``runs/``), with one substitution: the ports 8000, 8001 and 9090 become free loopback ports. As in a shell,
``source .venv/bin/activate`` and ``cd DIR`` apply to every later command, a command ending in ``&`` runs in the
background and ``kill %N`` stops background job N (by PID); the page's ``train.py`` is saved where ``python train.py``
runs. Every other command must exit 0 (``doctor`` included: every check passes), and afterwards (issue 36) the
clone's ``git status`` shows nothing new, ``doctor`` has judged the walk-through's run, not the demo's, and ``tail``
has printed the walk-through's record only.
"""

from __future__ import annotations

import json
import re
import shutil
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
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / ".venv").symlink_to(REPO / ".venv")
    shutil.copy(REPO / ".gitignore", clone / ".gitignore")
    env = cli_env()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    for step in (["init", "-q"], ["add", ".gitignore"], ["commit", "-q", "-m", "clone"]):
        subprocess.run([*git, *step], cwd=clone, check=True, capture_output=True)
    # the symlink stands for the clone's .venv directory, which .gitignore's `.venv/` covers; a symlink it does not
    (clone / ".git" / "info" / "exclude").write_text(".venv\n", encoding="utf-8")
    demo = subprocess.run(  # what `make demo` leaves: a run in runs/ with short steps
        [str(REPO / ".venv" / "bin" / "otel-bridge"), "demo", "--steps", "4", "--step-seconds", "0.4"],
        cwd=clone, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stdout + demo.stderr
    (demo_run,) = (clone / "runs").glob("demo-*")
    background: list[subprocess.Popen[bytes]] = []
    outputs: dict[str, subprocess.CompletedProcess[str]] = {}
    activated = False
    cwd = clone
    try:
        for line in commands.splitlines():
            command = line.split(" #")[0].strip()
            if not command or command.startswith("#"):
                continue
            if command == ACTIVATE:
                activated = True
                continue
            prefix = f"source {clone / '.venv' / 'bin' / 'activate'} && " if activated else ""
            if command.startswith("kill %"):
                for job in re.findall(r"%(\d+)", command):
                    stop_process(background[int(job) - 1])
                continue
            if command.startswith("python train.py"):
                (cwd / "train.py").write_text(walkthrough_block("train.py") + "\n", encoding="utf-8")
            if command.endswith("&"):
                log = (tmp_path / f"job{len(background) + 1}.log").open("wb")
                background.append(
                    subprocess.Popen(
                        ["bash", "-c", f"{prefix}exec {command[:-1].strip()}"],
                        cwd=cwd,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
                log.close()
                continue
            done = subprocess.run(
                ["bash", "-c", prefix + command],
                cwd=cwd,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, f"`{command}` exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
            outputs[command.split()[0] + " " + command.split()[1]] = done
            for directory in re.findall(r"(?:^|&&|;)\s*cd\s+(\S+)", command):
                cwd = cwd / directory
        assert background, "the walk-through starts servers in the background"
        assert all(p.poll() is not None for p in background), "`kill %1 %2 %3` stops every background job"
    finally:
        for process in background:
            stop_process(process)

    doctor = outputs["otel-bridge doctor"].stdout
    assert re.search(r"^PASS +metric vllm:generation_tokens_total ", doctor, re.M), doctor
    assert re.search(r"^PASS +step boundaries ", doctor, re.M), doctor
    assert str(demo_run.name) not in doctor, "doctor judges the walk-through's config, not the demo's run"
    assert "DeliveryReport(" in outputs["python train.py"].stdout
    (jsonl,) = (cwd / "runs").glob("*/metrics.jsonl")
    records = [json.loads(line) for line in jsonl.read_text(encoding="utf-8").splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4]
    for record in records:
        assert "otel_bridge/boundary_lag_s" in record  # read through Prometheus: the PromQL path
        assert record["otel_bridge/missing_metrics"] == 0.0
        assert record["rollout/vllm/generation_tokens_total/delta"] > 0
        assert record["trainer/tokens"] == 3072.0 * (record["step"] + 1)  # a counter is a running total
    assert json.loads(outputs["tail -n"].stdout)["step"] == 4  # one line: the walk-through's run only
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"], cwd=clone, capture_output=True, text=True, check=True
    )
    assert status.stdout == "", f"the walk-through left files git sees in the clone:\n{status.stdout}"
