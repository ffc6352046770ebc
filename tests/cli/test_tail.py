"""``otel-bridge tail`` through a pseudo-terminal (live refresh, Ctrl-C) and through a pipe (--count)."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.cli.support import cli_env, run_cli, write_config
from tests.conftest import Replica

HIDE_CURSOR = "\x1b[?25l"
SHOW_CURSOR = "\x1b[?25h"
CLEAR = "\x1b[H\x1b[2J"


def scrape_config(tmp_path: Path, replicas: list[Replica]) -> Path:
    return write_config(
        tmp_path / "otel-bridge.yaml",
        {
            "scrape": {"targets": [r.hostport for r in replicas], "sample_interval_s": 0.2},
            "metrics": [{"preset": "vllm"}],
        },
    )


def read_until(fd: int, wanted: str, output: bytearray, count: int = 1, timeout_s: float = 60.0) -> None:
    """Read the terminal into ``output`` until ``wanted`` appeared ``count`` times (fails after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while output.count(wanted.encode()) < count:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"{wanted!r} never appeared in {output.decode(errors='replace')[-2000:]!r}"
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                chunk = b""
            assert chunk, f"the terminal closed before {wanted!r}: {output.decode(errors='replace')[-2000:]!r}"
            output.extend(chunk)


def test_tail_refreshes_in_a_terminal_and_exits_cleanly_on_ctrl_c(tmp_path: Path, replicas: list[Replica]) -> None:
    config = scrape_config(tmp_path, replicas)
    master, slave = pty.openpty()
    env = cli_env()
    env.pop("NO_COLOR")
    process = subprocess.Popen(
        [sys.executable, "-m", "otel_bridge.cli", "tail", "--config", str(config), "--interval", "0.5s"],
        cwd=tmp_path,
        env=env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        close_fds=True,
        # as a job started in the background of a script (and, in the full suite, an earlier test) leaves it: a
        # Python started with SIGINT ignored installs no KeyboardInterrupt handler; tail's Ctrl-C must still work
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    os.close(slave)
    output = bytearray()
    try:
        read_until(master, "Ctrl-C to stop", output, count=2)  # two complete frames
        process.send_signal(signal.SIGINT)
        status = process.wait(timeout=60)
        # drain what is left
        while select.select([master], [], [], 0.2)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            output.extend(chunk)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)
    text = output.decode(errors="replace")
    assert status == 0, text[-2000:]
    assert text.startswith(HIDE_CURSOR)
    assert text.count(CLEAR) >= 2  # redrawn in place
    assert "window 1 " in text
    assert "window 2 " in text
    assert text.rfind(SHOW_CURSOR) > text.rfind(CLEAR)  # the cursor is restored after the last frame
    assert "rollout/vllm/generation_tokens_total/delta" in text
    assert "\x1b[1m" in text  # colours on a terminal without NO_COLOR
    assert "Traceback" not in text


def test_tail_count_through_a_pipe_has_no_escape_codes(tmp_path: Path, replicas: list[Replica]) -> None:
    config = scrape_config(tmp_path, replicas)
    done = run_cli(["tail", "--config", str(config), "--interval", "300ms", "--count", "2"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout
    assert done.stdout.count("otel-bridge tail  window") == 2
    assert "rollout/vllm/kv_cache_usage_perc/max" in done.stdout


def test_tail_without_metrics_is_an_error(tmp_path: Path) -> None:
    done = run_cli(["tail", "--count", "1"], cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("otel-bridge: tail needs an infrastructure source")
