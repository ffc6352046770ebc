"""SIGTERM while the training thread waits for room in the step queue (issue 14 point 3).

With delivery behind (a slow infrastructure source, ``delivery.queue_size`` steps waiting), the boundary of the next
step waits in ``StepQueue.put`` up to ``delivery.max_block_s`` holding the record of the step that just finished. A
SIGTERM landing there (``run.handle_sigterm: true`` turns it into ``SystemExit``) must not lose that record.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

TRAINER = textwrap.dedent(
    """
    import sys, time
    from otel_bridge import Bridge, BridgeConfig

    class SlowSource:
        '''An infrastructure source that takes 0.4 s per window: delivery falls behind the trainer.'''
        def produce(self, timeout_millis=10_000, *, window):
            time.sleep(0.4)
            return []

    config = BridgeConfig.load({
        "run": {"name": "run", "dir": sys.argv[1], "handle_sigterm": True},
        "delivery": {"queue_size": 1, "max_block_s": 60},
    })
    bridge = Bridge(config, producers=[SlowSource()])
    step = 0
    while True:
        with bridge.step(step):
            bridge.log({"actor/loss": float(step)}, step=step)
        print(f"finished {step}", flush=True)
        step += 1
    """
)


def test_sigterm_while_the_queue_is_full_keeps_the_finished_step(tmp_path: Path) -> None:
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    process = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    finished: list[int] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            finished.append(int(line.split()[1]))
            if len(finished) == 4:
                break
        # Step 3 finished; the boundary of step 4 now waits in StepQueue.put (queue_size 1, worker 0.4 s per step)
        # with step 3's record in hand. Wait until it surely waits there, then SIGTERM.
        time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        out, stderr = process.communicate(timeout=60)
        finished += [int(line.split()[1]) for line in out.splitlines()]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 143, stderr
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    steps = [json.loads(line)["step"] for line in lines]
    assert steps == finished, (steps, finished, stderr)
