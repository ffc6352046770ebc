"""Soak part 3: the JSONL tracker's disk fills up for a window of steps, then space comes back.

The run directory is a real small tmpfs (``tests/helpers/small_disk.py``, as ``tests/faults/test_disk_full.py``
mounts it: root or ``CAP_SYS_ADMIN`` needed, otherwise this part is reported as skipped with the reason, never faked).
During the window a filler file takes every free byte; at its end the filler is removed. What the library promises
(docs/failure-behaviour.md, "disk full"): a failed write is retried; after space returns the file is valid JSON Lines
in step order with each record at most once, and the steps the close report gives up are exactly those missing from
the file. The other backends are untouched: delivered == expected, no duplicate.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from otel_bridge import Bridge
from otel_bridge.health import BACKEND_ERRORS
from soak.accounting import TRAINER_KEY, CountingBackend, FlakyBackend, complete, jsonl_copies, tally
from tests.helpers.small_disk import CannotMountError, fill, small_tmpfs

_log = logging.getLogger("soak.disk")

# 40 keys of ~50 characters: ~2.5 KB records, so a full filesystem fails them (a short one could still fit in the
# last page the file already has).
KEYS = [f"actor/layer_{i:02d}/grad_norm_with_a_descriptive_name" for i in range(40)]


def _values(step: int) -> dict[str, float]:
    return {TRAINER_KEY: float(step), **{key: step + i / 1000 for i, key in enumerate(KEYS)}}


def run_disk_full(steps: int, step_sleep_s: float, tmp: Path) -> dict[str, dict[str, Any]]:
    """Run ``steps`` steps writing JSONL to a small tmpfs that is full during steps [30%, 60%)."""
    window = (steps * 3 // 10, steps * 6 // 10)
    size_kb = max(1024, steps * 8)  # room for the whole run's ~2.5 KB records, twice over
    try:
        with small_tmpfs(tmp / "disk", f"{size_kb}k") as disk:
            return _run(steps, step_sleep_s, disk, window)
    except CannotMountError as err:
        _log.warning("disk-full window skipped: %s", err)
        return {"disk_full": {"segment": "disk", "windows": [list(window)], "skipped": str(err)}}


def _run(steps: int, step_sleep_s: float, disk: Path, window: tuple[int, int]) -> dict[str, dict[str, Any]]:
    counting, flaky = CountingBackend(steps), FlakyBackend(steps)
    config = {
        "run": {"name": "run", "dir": str(disk)},
        "delivery": {"backend_retries": 4, "backend_backoff_s": 0.02, "close_timeout_s": 30},
    }
    filler = disk / "filler"
    bridge = Bridge.from_config(config, backends=[counting, flaky])
    started = time.monotonic()
    for step in range(steps):
        if step == window[0]:
            fill(filler)
            _log.info("disk full from step %d (%d bytes taken)", step, filler.stat().st_size)
        if step == window[1]:
            filler.unlink()
        with bridge.step(step):
            if step_sleep_s > 0:
                time.sleep(step_sleep_s)
            bridge.log(_values(step), step=step)
    report = bridge.close()
    elapsed = time.monotonic() - started
    jsonl_path = disk / "run" / "metrics.jsonl"
    jsonl = jsonl_copies(jsonl_path, steps)
    text_bytes = jsonl_path.stat().st_size
    status = next(s for s in report.backends if s.backend == "jsonl")
    missing = [s for s in range(steps) if not jsonl.copies[s]]
    in_window = range(*window)
    healthy = {"counting": counting.copies, "flaky": flaky.copies}
    delivery: dict[str, dict[str, Any]] = {name: tally(c, in_window) for name, c in healthy.items()}
    delivery["jsonl"] = {**tally(jsonl.copies, in_window), "reported_lost": len(status.failed_steps)}
    whole = {name: tally(c, range(steps)) for name, c in {**healthy, "jsonl": jsonl.copies}.items()}
    errors = bridge.health.counter(BACKEND_ERRORS, {"backend": "jsonl"})
    checks = {
        "healthy_backends_delivered_equals_expected_no_duplicates": complete(delivery, healthy)
        and complete(whole, healthy),
        "trainer_values_right": counting.wrong == flaky.wrong == jsonl.wrong == 0,
        "disk_was_full": errors > 0,
        "jsonl_valid_in_step_order_at_most_once": jsonl.invalid == jsonl.out_of_order == 0
        and whole["jsonl"]["duplicates"] == 0
        and jsonl.ends_with_newline,
        "jsonl_reported_lost_equals_missing_from_file": sorted(status.failed_steps) == missing
        and not status.pending_steps,
        "jsonl_delivered_plus_lost_equals_expected": status.delivered + len(status.failed_steps) == steps
        and status.delivered == jsonl.lines,
        "nothing_lost_after_space_returned": all(step < window[1] for step in missing),
        "jsonl_verified_at_close": not status.problems,
    }
    _log.info("disk part: %d steps in %.1f s, %d JSONL records lost", steps, elapsed, len(missing))
    return {
        "disk_full": {
            "segment": "disk",
            "windows": [list(window)],
            "delivery": delivery,
            "figures": {
                "elapsed_s": round(elapsed, 1),
                "jsonl_write_errors": errors,
                "jsonl_lost_steps": missing[:50],
                "jsonl_bytes": text_bytes,
                "whole_run": whole,
                "report_problems": list(status.problems),
            },
            "checks": checks,
        }
    }
