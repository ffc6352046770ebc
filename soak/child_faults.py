"""Soak part 5: the scrape child process stopped, and orphaned through a forked worker (issue 27 findings 1-2).

Two real trainer processes scrape a simulated vLLM replica through the scrape child (``scrape.isolation: process``):

- **stopped**: a third of the way in, the child is sent SIGSTOP (a debugger, a cgroup freezer, an OOM pause) and
  stays stopped; the trainer goes on, closes and exits. Every step must be in the JSONL once with its trainer value
  (delivered == expected), and the child must be gone once the trainer has exited.
- **orphaned**: the trainer forks a data-loader-like worker that sleeps, trains half its steps and is SIGKILLed; the
  child must end although the worker (holding copies of everything the trainer had open) lives on. Every step the
  trainer said it finished before the kill and whose record was written must be there once; a SIGKILL may lose records
  not yet written, so here delivered is reported against the steps the JSONL holds, and no duplicate is allowed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from soak.accounting import TRAINER_KEY, jsonl_copies, tally
from soak.servers import Replica, generate

ROOT = Path(__file__).resolve().parent.parent
CHILD_ENDS_WITHIN_S = 20.0

TRAINER = textwrap.dedent(
    """
    import os, sys, time
    from otel_bridge import Bridge
    from tests.helpers.processes import children
    run_dir, name, target, steps, fork = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1"
    config = {{"run": {{"name": name, "dir": run_dir}}, "metrics": [{{"preset": "vllm"}}],
              "scrape": {{"targets": [target], "sample_interval_s": 0.5}}, "delivery": {{"close_timeout_s": 10}}}}
    bridge = Bridge.from_config(config)
    print("child", children(parent=os.getpid())[0], flush=True)
    if fork:
        worker = os.fork()
        if worker == 0:
            time.sleep(600)
            os._exit(0)
        print("worker", worker, flush=True)
    for step in range(steps):
        bridge.log({{"{key}": float(step)}}, step=step)
        time.sleep({sleep_s})
        print("finished", step, flush=True)
    bridge.close()
    print("closed", flush=True)
    """
)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _ends_within(pid: int, seconds: float) -> tuple[bool, float]:
    started = time.monotonic()
    while _alive(pid) and time.monotonic() - started < seconds:
        time.sleep(0.05)
    return not _alive(pid), round(time.monotonic() - started, 2)


def _kill(pid: int | None) -> None:
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _round(run_dir: Path, name: str, replica: Replica, steps: int, sleep_s: float, orphan: bool) -> dict[str, Any]:
    script = TRAINER.format(key=TRAINER_KEY, sleep_s=sleep_s)
    target = f"http://{replica.hostport}/metrics"
    child: int | None = None
    worker: int | None = None
    finished: list[int] = []
    with (run_dir / f"{name}.stderr").open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-c", script, str(run_dir), name, target, str(steps), "1" if orphan else "0"],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            cwd=ROOT,
        )
        try:
            assert process.stdout is not None
            for line in process.stdout:
                word, _, value = line.strip().partition(" ")
                if word == "child":
                    child = int(value)
                elif word == "worker":
                    worker = int(value)
                elif word == "finished":
                    finished.append(int(value))
                    generate(replica.sim, int(value))
                    if not orphan and len(finished) == steps // 3 and child is not None:
                        os.kill(child, signal.SIGSTOP)
                    if orphan and len(finished) == steps // 2:
                        process.kill()
                        break
            process.wait(120)
            ended, after_s = _ends_within(child, CHILD_ENDS_WITHIN_S) if child is not None else (False, 0.0)
            worker_alive = worker is not None and _alive(worker)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            _kill(child)
            _kill(worker)
    jsonl = jsonl_copies(run_dir / name / "metrics.jsonl", steps)
    if orphan:
        written = [s for s in range(steps) if jsonl.copies[s]]
        delivery = tally(jsonl.copies, written)
        checks = {
            "child_ended_with_the_killed_trainer": ended,
            "worker_outlived_the_trainer": worker_alive,
            "no_duplicates": delivery["duplicates"] == 0,
            "records_are_the_finished_steps": set(written) <= set(finished) | {max(finished, default=-1) + 1},
        }
    else:
        delivery = tally(jsonl.copies, range(steps))
        checks = {
            "exit_status_0": process.returncode == 0,
            "child_ended_with_the_trainer": ended,
            "delivered_equals_expected_no_duplicates": delivery["delivered"] == delivery["expected"]
            and delivery["duplicates"] == 0,
        }
    checks["trainer_values_right"] = jsonl.wrong == 0
    return {
        "segment": name,
        "delivery": {"jsonl": delivery},
        "figures": {
            "steps": steps,
            "finished_before_the_end": len(finished),
            "child_ended_after_s": after_s,
            "returncode": process.returncode,
        },
        "checks": checks,
        **({} if all(checks.values()) else {"stderr_tail": (run_dir / f"{name}.stderr").read_text()[-2000:]}),
    }


def run_child_faults(steps: int, sleep_s: float, run_dir: Path) -> dict[str, dict[str, Any]]:
    """Both rounds against one simulated replica; one entry per fault."""
    run_dir.mkdir(parents=True, exist_ok=True)
    replica = Replica()
    try:
        return {
            "scrape_child_stopped": _round(run_dir, "scrape_child_stopped", replica, steps, sleep_s, orphan=False),
            "scrape_child_orphaned": _round(run_dir, "scrape_child_orphaned", replica, steps, sleep_s, orphan=True),
        }
    finally:
        replica.server.stop()
