"""What the training thread pays per call while the PromQL path reads large answers (issue 40).

A scripted store on loopback (:class:`tests.helpers.large_answers.LargeStore`) answers each step's union with 10^4,
10^5 or 10^6 series (``--quick``: 10^4 and 10^5), the ``prometheus`` caps raised to allow it (``max_series`` 2 M,
``max_samples`` 3 M, ``max_response_bytes`` 200 MB). The training thread stays busy while each step is read
(:func:`tests.helpers.large_answers.busy_training`: ``log`` call after call until the step's record is delivered), and
every ``begin_step``/``end_step``/``log`` call's time on that thread is counted: p50/p99/max per size.

**Baseline** (same run, same store, same sizes): ``prometheus.isolation: thread``, the PromQL path as it was (its
reads, JSON decode and reduction on a worker thread of the trainer's process); measured beside ``process`` (the
default: the same in a child process). ``max_ratio``: the baseline's worst call over the child's.

``python -m bench.suite_large_answers [--quick]`` runs it alone.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import write_result
from otel_bridge import Bridge
from tests.helpers.large_answers import KEY, METRICS, RAISED_CAPS, VALUE, LargeStore, busy_training

NAME = "large-answers"
SIZES = (10_000, 100_000, 1_000_000)
QUICK_SIZES = (10_000, 100_000)
STEPS = 2
ISOLATIONS = ("thread", "process")
_log = logging.getLogger("bench.large_answers")


def measure(series: int, isolation: str, workdir: Path) -> dict[str, Any]:
    """One size through one isolation: the training thread's calls, and how long the steps took."""
    store = LargeStore(series)
    prometheus = {"url": store.server.url, "retries": 0, "scrape_interval_s": 1.0, "timeout_s": 120, **RAISED_CAPS}
    config = {
        "trackers": [{"type": "jsonl"}],
        "run": {"name": f"{isolation}-{series}", "dir": str(workdir)},
        "prometheus": {**prometheus, "isolation": isolation},
        "metrics": METRICS,
        "delivery": {"produce_timeout_s": 600},
    }
    began = time.perf_counter()
    try:
        with Bridge.from_config(config) as bridge:
            times = busy_training(bridge, store, STEPS)
            read = [bridge.collect(step).get(KEY) == VALUE for step in range(STEPS)]
    finally:
        store.close()
    row = {
        "series": series,
        "isolation": isolation,
        "calls": times.calls,
        "p50_us": times.quantile_s(0.50) * 1e6,
        "p99_us": times.quantile_s(0.99) * 1e6,
        "max_ms": times.worst_s * 1e3,
        "steps_read_whole": all(read),
        "wall_s": time.perf_counter() - began,
    }
    _log.info("%s", row)
    return row


def run(quick: bool, workdir: Path) -> dict[str, Any]:
    """Run the suite; write ``results/large-answers.json``; return the rows for the README table."""
    workdir.mkdir(parents=True, exist_ok=True)
    rows = [
        measure(series, isolation, workdir) for series in (QUICK_SIZES if quick else SIZES) for isolation in ISOLATIONS
    ]
    for series in {row["series"] for row in rows}:
        baseline, child = (next(r for r in rows if r["series"] == series and r["isolation"] == i) for i in ISOLATIONS)
        child["max_ratio"] = baseline["max_ms"] / child["max_ms"]
    configuration = {"sizes": list(QUICK_SIZES if quick else SIZES), "steps": STEPS, "caps": RAISED_CAPS}
    write_result(NAME, {"configuration": configuration, "rows": rows})
    return {"rows": rows}


def main() -> None:
    """Entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m bench.suite_large_answers", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="10^4 and 10^5 series only")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    _log.setLevel(logging.INFO)
    with tempfile.TemporaryDirectory(prefix="otel-bridge-bench-") as tmp:
        for row in run(args.quick, Path(tmp))["rows"]:
            print(row)


if __name__ == "__main__":
    main()
