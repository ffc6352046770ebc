"""A forked child never closes, flushes or writes the parent's trackers (issue 14 point 6).

A DataLoader worker, or ``os.fork()`` then ``sys.exit()``, inherits the bridge, its ``atexit`` hook and the SDK
MeterProvider's: before, the child's exit closed the parent's trackers (MLflow showed the parent's run FINISHED while
it trained). Real forks, in a real trainer process; the tracker logs every call with the pid that made it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

TRAINER = textwrap.dedent(
    """
    import multiprocessing, os, sys
    from otel_bridge import Bridge

    class PidTracker:
        '''Appends "<call> <step> <pid>" for every write, flush and close (what a wandb/MLflow run would see).'''
        name = "pid_tracker"
        def __init__(self, path):
            self.path = path
        def _note(self, text):
            with open(self.path, "a") as f:
                f.write(f"{text} {os.getpid()}\\n")
        def write(self, record):
            self._note(f"write {record.step}")
        def flush(self):
            self._note("flush -")
        def close(self):
            self._note("close -")

    def dataloader_worker(batches):
        for i in range(3):
            batches.put(i)  # a DataLoader worker: produce batches, then exit
        sys.exit(0)

    run_dir, events = sys.argv[1], sys.argv[2]
    bridge = Bridge.from_config({"run": {"name": "run", "dir": run_dir}}, backends=[PidTracker(events)])
    for step in range(3):
        with bridge.step(step):
            bridge.log({"actor/loss": float(step)}, step=step)
    bridge.collect(2)

    pid = os.fork()
    if pid == 0:
        sys.exit(0)  # the child's interpreter exits: its atexit hooks run
    assert os.waitpid(pid, 0)[1] == 0

    ctx = multiprocessing.get_context("fork")
    batches = ctx.Queue()
    workers = [ctx.Process(target=dataloader_worker, args=(batches,)) for _ in range(2)]
    for w in workers:
        w.start()
    got = [batches.get(timeout=30) for _ in range(6)]
    for w in workers:
        w.join(30)
        assert w.exitcode == 0

    for step in range(3, 6):
        with bridge.step(step):
            bridge.log({"actor/loss": float(step)}, step=step)
    print(os.getpid(), flush=True)
    """
)


def test_forked_children_leave_the_parents_trackers_alone(tmp_path: Path) -> None:
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    events = tmp_path / "events.txt"
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path), str(events)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    parent = result.stdout.split()[-1]
    lines = [line.split() for line in events.read_text().splitlines()]
    assert all(pid == parent for *_, pid in lines), lines  # no call from a child
    assert [step for call, step, _ in lines if call == "write"] == [str(s) for s in range(6)]
    assert [call for call, *_ in lines].count("close") == 1
    assert lines[-1][0] == "close"  # closed once, by the parent's exit, after its last step
    jsonl = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in jsonl] == list(range(6))
    assert os.path.exists(events)


CLOSED_THEN_FORKED = textwrap.dedent(
    """
    import os
    from otel_bridge.config import MetricConfig
    from otel_bridge.producers.metric_set import resolve_metrics
    from otel_bridge.producers.scrape import ScrapeProcess

    queries = resolve_metrics([MetricConfig(name="x_total", type="counter")])
    closed, live = ScrapeProcess([], queries, discovered=True), ScrapeProcess([], queries, discovered=True)
    closed.start()
    live.start()
    closed.close()  # still referenced (a first bridge kept in a variable), its pipes closed
    pid = os.fork()
    if pid == 0:
        os._exit(0 if live._child._forked else 3)  # the forked copy must not reach the live child
    _, status = os.waitpid(pid, 0)
    live.close()
    print(os.waitstatus_to_exitcode(status), flush=True)
    """
)


def test_a_fork_after_a_child_was_closed_forsakes_the_live_ones(tmp_path: Path) -> None:
    """A producer child closed while its object lives on (a first bridge closed, a second one running), then a fork
    (a data-loader worker): before, the fork's handler failed on the closed one's pipes ("Exception ignored ...
    I/O operation on closed file", once per fork) and, when it came first, left the live one reachable from the
    fork."""
    script = tmp_path / "closed_then_forked.py"
    script.write_text(CLOSED_THEN_FORKED)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Exception ignored" not in result.stderr, result.stderr
    assert result.stdout.split()[-1] == "0", "the forked copy still reaches the live child"
