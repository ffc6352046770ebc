"""Soak part 4: SIGTERM at random points of a real trainer process, several rounds, one run continued by each.

Each round starts ``python -m soak.trainer`` (opt-in SIGTERM handling, a sometimes slow infrastructure source) at the
step after the last one in the run's JSONL, lets it finish a random number of steps (seeded), waits a random few
milliseconds more and sends SIGTERM: the signal lands inside a step, between steps, or while a boundary waits for
room in the step queue. What must hold (docs/failure-behaviour.md, "SIGTERM and exit"; tests/faults/test_sigterm*.py):
the process exits with status 143; every step that began before the signal is in the JSONL exactly once (a finished
one with its trainer value, not marked); only the last record may be marked ``interrupted``; a record of a step whose
beginning the parent did not see is such an interrupted last step. The next round's fresh process continues the run
(the JSONL backend appends), so the whole file is steps 0..N, each once, in order.
"""

from __future__ import annotations

import logging
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from soak.accounting import JsonlContents, jsonl_copies, tally
from soak.trainer import RUN_NAME

_log = logging.getLogger("soak.sigterm")
ROOT = Path(__file__).resolve().parent.parent
MAX_STEPS = 1_000_000  # bound of the step bitmaps; a round runs at most ~60 steps


def _round(run_dir: Path, start: int, seed: int, rng: random.Random) -> dict[str, Any]:
    """One trainer process from ``start`` until SIGTERM: what it said, how it ended."""
    after = rng.randint(1, 40)
    delay_s = rng.uniform(0, 0.03)
    with (run_dir / f"trainer-{seed}.stderr").open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "soak.trainer", str(run_dir), str(start), str(seed)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            cwd=ROOT,
        )
        lines: list[str] = []
        try:
            assert process.stdout is not None
            for line in process.stdout:
                lines.append(line.strip())
                if line.startswith("finished") and sum(x.startswith("finished") for x in lines) == after:
                    break
            time.sleep(delay_s)
            signalled = time.monotonic()
            process.send_signal(signal.SIGTERM)
            # Read the rest through the same buffered file (communicate() would skip what it already buffered); a
            # process still alive after 60 s is killed, which ends the read.
            watchdog = threading.Timer(60, process.kill)
            watchdog.start()
            try:
                lines += process.stdout.read().splitlines()
                process.wait()
            finally:
                watchdog.cancel()
            exit_s = time.monotonic() - signalled
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    boundaries = [int(x.split()[1]) for x in lines if x.startswith("boundary ")]
    began = [int(x.split()[1]) for x in lines if x.startswith("begin ")]
    finished = [int(x.split()[1]) for x in lines if x.startswith("finished ")]
    return {
        "start": start,
        "signal_after_finished": after,
        "extra_delay_ms": round(delay_s * 1000, 1),
        "boundaries": boundaries,
        "began": began,
        "finished": finished,
        "returncode": process.returncode,
        "exit_s": round(exit_s, 2),
        "stderr_tail": (run_dir / f"trainer-{seed}.stderr").read_text()[-2000:],
    }


def _check_round(info: dict[str, Any], jsonl: JsonlContents) -> dict[str, Any]:
    """What the JSONL holds of one round, against what the process said before it was terminated."""
    start, began, finished = info["start"], info["began"], info["finished"]
    last = max(jsonl.last_step, start - 1)
    written = list(range(start, last + 1))
    unseen = [s for s in written if s not in began]  # in the file, its beginning never reported
    interrupted = [s for s in jsonl.interrupted if s >= start]
    outcome = "between steps"
    if interrupted:
        outcome = "inside a step (marked interrupted)"
    elif began and began[-1] not in finished:
        outcome = "after a step's block, before it said so"
    elif info["boundaries"] and info["boundaries"][-1] not in began:
        outcome = "at a boundary (waiting for room in the step queue, or committing the previous step)"
    return {
        "checks": {
            "exit_status_143": info["returncode"] == 128 + signal.SIGTERM,
            "every_begun_step_delivered_once": all(jsonl.copies[s] == 1 for s in began),
            "no_gap": all(jsonl.copies[s] == 1 for s in written),
            "only_the_last_record_interrupted": all(s == last for s in interrupted)
            and not set(interrupted) & set(finished),
            "unseen_step_is_the_interrupted_last": all(s == last and s in interrupted for s in unseen),
        },
        "last_step": last,
        "signal_landed": outcome,
    }


def run_sigterm(rounds: int, seed: int, tmp: Path) -> dict[str, dict[str, Any]]:
    """``rounds`` trainer processes, each SIGTERMed at a random point (``seed``), continuing one run."""
    rng = random.Random(seed)
    run_dir = tmp / "sigterm-runs"
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / RUN_NAME / "metrics.jsonl"
    start = 0
    results: list[dict[str, Any]] = []
    began: list[int] = []
    started = time.monotonic()
    for index in range(rounds):
        info = _round(run_dir, start, seed * 1000 + index, rng)
        checked = _check_round(info, jsonl_copies(path, MAX_STEPS))
        began += info["began"]
        summary = {k: info[k] for k in ("start", "signal_after_finished", "extra_delay_ms", "returncode", "exit_s")}
        summary.update(checked)
        summary["steps_finished"] = len(info["finished"])
        if not all(checked["checks"].values()):
            summary["stderr_tail"] = info["stderr_tail"]
        results.append(summary)
        _log.info("SIGTERM round %d: steps %d-%d, %s", index, start, checked["last_step"], checked["signal_landed"])
        start = checked["last_step"] + 1
    jsonl = jsonl_copies(path, MAX_STEPS)
    total = start
    delivery = {"jsonl": tally(jsonl.copies, sorted(set(began)))}
    whole = tally(jsonl.copies, range(total))
    checks = {
        "every_round": all(all(r["checks"].values()) for r in results),
        "delivered_equals_expected_no_duplicates": delivery["jsonl"]["delivered"] == delivery["jsonl"]["expected"]
        and delivery["jsonl"]["duplicates"] == 0,
        "run_is_steps_0_to_n_once_in_order": whole["delivered"] == total == jsonl.lines
        and whole["duplicates"] == jsonl.out_of_order == jsonl.invalid == 0,
        "trainer_values_right": jsonl.wrong == 0,
    }
    landed: dict[str, int] = {}
    for r in results:
        landed[r["signal_landed"]] = landed.get(r["signal_landed"], 0) + 1
    return {
        "sigterm": {
            "segment": "sigterm",
            "delivery": delivery,
            "figures": {
                "rounds": rounds,
                "seed": seed,
                "steps": total,
                "elapsed_s": round(time.monotonic() - started, 1),
                "signal_landed": landed,
                "interrupted_records": len(jsonl.interrupted),
                "longest_exit_after_signal_s": max((r["exit_s"] for r in results), default=0.0),
                "rounds_detail": results,
            },
            "checks": checks,
        }
    }
