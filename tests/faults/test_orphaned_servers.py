"""A test process killed outright (SIGKILL: no finalizer runs) leaves no server behind.

The suite's servers run in sessions of their own (tests/helpers/prometheus_server.py ``ServerProcess``), so nothing
would end them with a killed pytest: a later run then met Prometheus servers of the dead one on their ports. The
reaper (tests/helpers/reaper.py) ends the groups a test process registered once that process is gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.cli.support import REPO, cli_env
from tests.helpers.prometheus_server import PrometheusServer

CHILD = f"""
import sys
from pathlib import Path
from {PrometheusServer.__module__} import {PrometheusServer.__name__}
server = {PrometheusServer.__name__}(Path(sys.argv[1]), [], scrape_interval_s=1.0).start()
print(server.process.pid, flush=True)
sys.stdin.read()  # until the test kills this process
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_killed_test_process_leaves_no_server_behind(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path / "prometheus")],
        cwd=REPO,
        env=cli_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    server_pid: int | None = None
    try:
        assert child.stdout is not None
        server_pid = int(child.stdout.readline())
        assert _alive(server_pid)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _alive(server_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(server_pid), f"Prometheus (PID {server_pid}) outlived the killed test process"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
        if server_pid is not None and _alive(server_pid):
            os.killpg(server_pid, signal.SIGKILL)
