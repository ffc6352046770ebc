"""SIGTERM in the middle of a training loop: the records of every finished step reach the trackers.

The bridge turns SIGTERM into ``SystemExit`` (when the trainer has not installed its own handler) and closes itself
from an ``atexit`` hook, so pending records are delivered before the process exits.
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

    if sys.argv[3] == "own-handler":
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(3))
    bridge = Bridge.from_config({"run": {"name": "run", "dir": sys.argv[1]}}, backends=[SlowBackend()])
    step = 0
    while True:
        with bridge.step(step):
            bridge.log({"actor/loss": float(step)}, step=step)
            time.sleep(0.01)
        print(f"finished {step}", flush=True)
        step += 1
    """
)


@pytest.mark.parametrize("mode", ["default", "own-handler"])
def test_sigterm_mid_run_flushes_finished_steps(tmp_path: Path, mode: str) -> None:
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    slow_out = tmp_path / "slow.txt"
    process = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path), str(slow_out), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    finished: list[int] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            finished.append(int(line.split()[1]))
            if len(finished) == 20:
                process.send_signal(signal.SIGTERM)
                break
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == (3 if mode == "own-handler" else 128 + signal.SIGTERM), stderr
    last_finished = finished[-1]
    jsonl = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    jsonl_steps = [line["step"] for line in jsonl]
    slow_steps = [int(line) for line in slow_out.read_text().split()]
    # every finished step, in order; the step interrupted by the signal may be recorded too (its window ended)
    assert jsonl_steps[: last_finished + 1] == list(range(last_finished + 1)), jsonl_steps
    assert slow_steps[: last_finished + 1] == list(range(last_finished + 1)), slow_steps
    assert len(jsonl_steps) <= last_finished + 2
    assert all(line["actor/loss"] == float(line["step"]) for line in jsonl)
