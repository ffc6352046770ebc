"""Run the benchmark suites: ``python -m bench.run [--quick] [--suite NAME ...]`` (from the repository root).

Each suite writes ``bench/results/<suite>.json`` (configuration, machine, raw samples, summaries) and
``bench/results/<suite>.png``; this entry point also writes ``bench/results/summary.json`` and prints the table.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import RESULTS, machine

SUITES = {
    "boundary": "bench.suite_boundary",
    "requests": "bench.suite_requests",
    "scrape": "bench.suite_scrape",
    "memory": "bench.suite_memory",
    "overhead": "bench.suite_overhead",
    "promql-scale": "bench.suite_promql_scale",
    "phases": "bench.suite_phases",
    "gpu-scale": "bench.suite_gpu_scale",
    "large-answers": "bench.suite_large_answers",
    "node-agents": "bench.suite_node_agents",
}


def main(argv: list[str] | None = None) -> int:
    """Entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer steps and rounds (a smoke run, ~2 min)")
    parser.add_argument("--suite", action="append", choices=sorted(SUITES), help="run only this suite (repeatable)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("bench").setLevel(logging.INFO)
    chosen = args.suite or list(SUITES)
    results: dict[str, Any] = {}
    timings: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="otel-bridge-bench-") as tmp:
        for name in chosen:
            module = importlib.import_module(SUITES[name])
            sys.stderr.write(f"== suite {name}\n")
            started = time.perf_counter()
            results[name] = module.run(args.quick, Path(tmp) / name)
            timings[name] = time.perf_counter() - started
            sys.stderr.write(f"== suite {name} done in {timings[name]:.0f}s\n")
    RESULTS.mkdir(parents=True, exist_ok=True)
    summary_path = RESULTS / "summary.json"
    previous: dict[str, Any] = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    suites = {**previous.get("suites", {}), **results}
    durations = {**previous.get("durations_s", {}), **timings}
    summary_path.write_text(
        json.dumps(
            {
                "time": time.time(),
                "quick": args.quick,
                "machine": machine(),
                "suites": suites,
                "durations_s": durations,
            },
            indent=1,
            default=float,
        )
        + "\n",
        encoding="utf-8",
    )
    sys.stdout.write(json.dumps({"durations_s": timings, "suites": results}, indent=1, default=float) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
