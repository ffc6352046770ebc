"""The README's quick start runs as written, and the JSONL line it shows is what that run records.

The two blocks after ``<!-- quickstart:servers -->`` and ``<!-- quickstart:train.py -->`` are run as a user runs them,
from a fresh directory, with one substitution: the ports 8000 and 8001 become free loopback ports. Each server line
ends in ``&`` (a background job) and starts with ``python``, this interpreter. The record example below the blocks
must show keys the run really records, for the step it names, and ``trainer/tokens`` as the counter reports it.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from tests.cli.support import REPO, cli_env, stop_process
from tests.helpers.http_servers import free_port

README = REPO / "README.md"


def quickstart_block(marker: str) -> str:
    """The fenced code block right after ``<!-- quickstart:MARKER -->`` in the README."""
    text = README.read_text(encoding="utf-8")
    found = re.search(rf"<!-- quickstart:{re.escape(marker)} -->\n```\w*\n(.*?)\n```", text, re.S)
    assert found, f"no block marked quickstart:{marker} in {README}"
    return found[1]


def record_example() -> tuple[float, dict[str, float]]:
    """The README's JSONL line after the quick start (its ``...`` dropped), and the tokens each step trains on."""
    text = README.read_text(encoding="utf-8")
    found = re.search(
        r"One line of `runs/<run>/metrics.jsonl` from that run, when every step trains on ([\d,]+) tokens:\n\n"
        r"```json\n(.*?)\n```",
        text,
        re.S,
    )
    assert found, "the README's JSONL example after the quick start moved"
    line = re.sub(r",\s*\.\.\.\s*}$", "}", found[2].strip())
    return float(found[1].replace(",", "")), json.loads(line)


def start_server(command: str, cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    """Start one ``python ... &`` line of the servers block; return once it prints that it serves."""
    assert command.endswith("&"), f"a server line runs in the background: {command!r}"
    argv = shlex.split(command[:-1])
    assert argv[0] == "python", command
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, *argv[1:]], cwd=cwd, env=cli_env(), stdout=out, stderr=out)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        if "serving http://" in log.read_text(encoding="utf-8", errors="replace"):
            return process
        time.sleep(0.1)
    stop_process(process)
    raise AssertionError(f"`{command}` did not start serving:\n{log.read_text(encoding='utf-8', errors='replace')}")


def test_the_readme_quick_start_runs_as_written(tmp_path: Path) -> None:
    servers = quickstart_block("servers")
    train = quickstart_block("train.py")
    for port in ("8000", "8001"):
        free = str(free_port())
        servers = re.sub(rf"\b{port}\b", free, servers)
        train = re.sub(rf"\b{port}\b", free, train)
    (tmp_path / "train.py").write_text(train + "\n", encoding="utf-8")
    background: list[subprocess.Popen[bytes]] = []
    try:
        for line in servers.splitlines():
            command = line.split(" #")[0].strip()
            if command:
                background.append(start_server(command, tmp_path, tmp_path / f"server{len(background) + 1}.log"))
        assert len(background) == 2, "the quick start starts two servers"
        done = subprocess.run(
            [sys.executable, "train.py"],
            cwd=tmp_path,
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        for process in background:
            stop_process(process)
    assert done.returncode == 0, f"train.py exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    assert "DeliveryReport(" in done.stdout

    (run_dir,) = (tmp_path / "runs").iterdir()
    assert (run_dir / "tensorboard").is_dir()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4]
    for record in records:
        assert record["otel_bridge/missing_metrics"] == 0.0
        # Each step of 1 s holds some of the servers' ~10 requests a second, unless its boundaries share one reading:
        # the first reading sent after the start came after the end, so its lag (boundary_lag_s) is at least the
        # window (a loaded machine, seen under the full suite), and the record says so.
        lag, window = record["otel_bridge/boundary_lag_s"], record["time"] - record["window_start"]
        delta = record["rollout/vllm/generation_tokens_total/delta"]
        assert delta > 0 or lag >= window, f"step {record['step']}: delta {delta} in {window:.2f} s, lag {lag} s"

    per_step, example = record_example()
    (shown,) = [r for r in records if r["step"] == example["step"]]
    assert set(example) <= set(shown), f"keys the README shows but the run does not record: {set(example) - set(shown)}"
    assert shown["trainer/tokens"] == example["trainer/tokens"] == per_step * (example["step"] + 1)
    assert shown["actor/loss"] == example["actor/loss"]
