"""SIGTERM in the middle of a training loop.

Opted in (``run.handle_sigterm: true`` or ``otel_bridge.install()``), the bridge turns SIGTERM into ``SystemExit``
(when the trainer has not installed its own handler) and closes itself from an ``atexit`` hook, so the records of every
finished step reach the trackers before the process exits. By default a bridge leaves the process' signals alone:
SIGTERM keeps its default action and kills the process.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TRAINER = textwrap.dedent(
    """
    import signal, sys, time
    from otel_bridge import Bridge
    from otel_bridge.exporters.record import StepRecord

    class SlowBackend:
        name = "slow"
        def __init__(self):
            self.file = open(sys.argv[2], "a")
        def write(self, record: StepRecord) -> None:
            time.sleep(0.05)  # behind the trainer: records are pending when SIGTERM arrives
            self.file.write(f"{record.step}\\n")
            self.file.flush()
        def flush(self): pass
        def close(self): self.file.close()

    mode = sys.argv[3]
    if mode == "own-handler":
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(3))
    run = {"name": "run", "dir": sys.argv[1], "handle_sigterm": mode != "default"}
    if mode == "install":
        import otel_bridge
        bridge = otel_bridge.install({"run": {"name": "installed", "dir": sys.argv[1]}})  # a run of its own
        bridge.close()  # install() set the global MeterProvider and the handler; the run itself uses a plain bridge
        bridge = Bridge.from_config({"run": {"name": "run", "dir": sys.argv[1]}}, backends=[SlowBackend()])
    else:
        bridge = Bridge.from_config({"run": run}, backends=[SlowBackend()])
    print(f"handler {signal.getsignal(signal.SIGTERM) is signal.SIG_DFL and 'default' or 'set'}", flush=True)
    step = 0
    while True:
        with bridge.step(step):
            time.sleep(0.01)
            bridge.log({"actor/loss": float(step)}, step=step)
        print(f"finished {step}", flush=True)
        step += 1
    """
)


def _run_until_sigterm(tmp_path: Path, mode: str) -> tuple[str, list[int], int, str]:
    """Run the trainer, SIGTERM it after 20 finished steps: (handler state, finished steps, exit status, stderr)."""
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    process = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path), str(tmp_path / "slow.txt"), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    handler = ""
    finished: list[int] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("handler "):
                handler = line.split()[1]
                continue
            finished.append(int(line.split()[1]))
            if len(finished) == 20:
                process.send_signal(signal.SIGTERM)
                break
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return handler, finished, process.returncode, stderr


def test_by_default_the_bridge_leaves_sigterm_alone(tmp_path: Path) -> None:
    handler, finished, returncode, stderr = _run_until_sigterm(tmp_path, "default")
    assert handler == "default", stderr
    assert len(finished) == 20, stderr
    # SIGTERM's default action killed the process: no SystemExit, no cleanup (exit status -15, not 143)
    assert returncode == -signal.SIGTERM, (returncode, stderr)


@pytest.mark.parametrize("mode", ["opt-in", "install", "own-handler"])
def test_sigterm_mid_run_flushes_finished_steps(tmp_path: Path, mode: str) -> None:
    handler, finished, returncode, stderr = _run_until_sigterm(tmp_path, mode)
    assert handler == "set", stderr
    assert returncode == (3 if mode == "own-handler" else 128 + signal.SIGTERM), stderr
    slow_out = tmp_path / "slow.txt"
    last_finished = finished[-1]
    jsonl = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    jsonl_steps = [line["step"] for line in jsonl]
    slow_steps = [int(line) for line in slow_out.read_text().split()]
    # every finished step, in order; the step interrupted by the signal may be recorded too (its window ended)
    assert jsonl_steps[: last_finished + 1] == list(range(last_finished + 1)), jsonl_steps
    assert slow_steps[: last_finished + 1] == list(range(last_finished + 1)), slow_steps
    assert len(jsonl_steps) <= last_finished + 2
    finished_lines, interrupted_lines = jsonl[: last_finished + 1], jsonl[last_finished + 1 :]
    assert all(line["actor/loss"] == float(line["step"]) for line in finished_lines)
    # the interrupted step has what was logged before the signal: its loss when log() ran first, nothing otherwise
    for line in interrupted_lines:
        assert any(note.startswith("interrupted:") for note in line["_notes"]), line
        assert line.get("actor/loss", float(line["step"])) == float(line["step"]), line
