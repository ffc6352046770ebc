"""The scrape child ends with its trainer in every case and no forked copy of the trainer reaches it (issue 27
findings 1-3).

Before: a child stopped by SIGSTOP (a debugger, a cgroup freezer, an OOM pause) was still there, in state T, after the
trainer exited; a trainer SIGKILLed while a data-loader worker it had forked was alive left the child scraping as long
as the worker lived (the worker held the inherited pipe); a forked worker's ``bridge.log()`` caused scrape rounds in
the parent's child. Real trainer processes, real forks and signals; every process a test starts is killed by its pid
in ``finally``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Replica
from tests.faults.test_scrape_process import alive

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

TRAINER = textwrap.dedent(
    """
    import os, sys, time
    from otel_bridge import Bridge
    from tests.faults.test_scrape_process import scrape_children
    config = {{"run": {{"name": "lifetime", "dir": {run_dir!r}}}, "metrics": [{{"preset": "vllm"}}],
              "scrape": {{"targets": [{url!r}], "sample_interval_s": 0}}, "delivery": {{"close_timeout_s": 4}}}}
    bridge = Bridge.from_config(config)
    bridge.log({{"actor/loss": 1.0}}, step=0)
    bridge.collect(0)
    print(scrape_children(os.getpid())[0], flush=True)
    for command in sys.stdin:
        command = command.strip()
        if command == "fork-sleeper":  # a data-loader worker that outlives the trainer
            pid = os.fork()
            if pid == 0:
                time.sleep(120)
                os._exit(0)
            print(pid, flush=True)
        elif command == "fork-logger":  # a data-loader worker that logs through its copy of the bridge
            pid = os.fork()
            if pid == 0:
                for step in range(1000, 1200):
                    bridge.log({{"worker/x": 1.0}}, step=step)
                os._exit(0)
            os.waitpid(pid, 0)
            print("forked", flush=True)
        elif command == "step":
            bridge.log({{"actor/loss": 1.0}}, step=1)
            print(sum(k.startswith("rollout/") for k in bridge.collect(1)), flush=True)
        elif command == "exit":
            bridge.close()
            print("closed", flush=True)
            break
    """
)


@contextlib.contextmanager
def trainer(tmp_path: Path, replica: Replica) -> Iterator[subprocess.Popen[str]]:
    """A trainer process with a scrape child; killed (with whatever it reported) in the end."""
    script = TRAINER.format(run_dir=str(tmp_path), url=replica.url)
    process = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def ask(process: subprocess.Popen[str], command: str) -> str:
    assert process.stdin is not None
    assert process.stdout is not None
    process.stdin.write(command + "\n")
    process.stdin.flush()
    return process.stdout.readline().strip()


def first_line(process: subprocess.Popen[str]) -> int:
    assert process.stdout is not None
    return int(process.stdout.readline())


def ends_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def kill_if_alive(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("ending", ["close-and-exit", "sigkill"])
def test_a_stopped_scrape_child_ends_with_its_trainer(tmp_path: Path, replicas: list[Replica], ending: str) -> None:
    with trainer(tmp_path, replicas[0]) as process:
        child = first_line(process)
        try:
            os.kill(child, signal.SIGSTOP)  # a debugger, a cgroup freezer, an OOM pause
            if ending == "sigkill":
                process.kill()
                process.wait(10)
            else:  # close() gives up on the child at delivery.close_timeout_s (4 s), then the trainer exits
                assert ask(process, "exit") == "closed"
                assert process.wait(60) == 0
            assert ends_within(child, 20)
        finally:
            kill_if_alive(child)


def test_a_forked_worker_does_not_keep_the_child_of_a_killed_trainer(tmp_path: Path, replicas: list[Replica]) -> None:
    with trainer(tmp_path, replicas[0]) as process:
        child = first_line(process)
        worker = int(ask(process, "fork-sleeper"))
        try:
            process.kill()  # SIGKILL: no close(), no atexit
            process.wait(10)
            assert ends_within(child, 20)
            assert alive(worker)  # the worker, which holds whatever the trainer had open, lives on
        finally:
            kill_if_alive(child)
            kill_if_alive(worker)


def test_a_forked_workers_log_never_reaches_the_scrape_child(tmp_path: Path, replicas: list[Replica]) -> None:
    replica = replicas[0]
    with trainer(tmp_path, replica) as process:
        child = first_line(process)
        try:
            before = replica.scrapes
            assert ask(process, "fork-logger") == "forked"  # 200 log() calls, 200 boundaries in the worker's copy
            assert int(ask(process, "step")) > 10  # the parent's bridge still scrapes: one boundary, one round
            assert replica.scrapes == before + 1
            assert ask(process, "exit") == "closed"
            assert process.wait(60) == 0
            assert ends_within(child, 20)
        finally:
            kill_if_alive(child)
