"""Soak test: fast training steps with faults injected, watching resources and delivery (not part of ``make test``).

    python -m soak.soak [--steps 20000] [--step-sleep-s 0.004] [--scrape-steps 200] [--disk-steps 300]
                        [--sigterm-rounds 8] [--child-steps 60] [--churn-steps 1000] [--clock-steps 300]
                        [--seed 14]
                        [--require-all-faults]
                        [--out soak/results]

Seven parts, one after the other (see soak/README.md):

1. PromQL path, ``--steps`` fast steps: replica restarts, a replica endpoint down, Prometheus down, a flaky backend;
   RSS, threads and fds watched (``soak/promql_faults.py``).
2. Scrape path, ``--scrape-steps``: a trickling target (1 byte every 2 s) and a redirecting one among healthy
   replicas, each for a window of steps; boundaries and the step queue's bound measured (``soak/scrape_faults.py``).
3. Disk full: the JSONL tracker on a small tmpfs filled for a window of steps (``soak/disk_full.py``; needs root or
   CAP_SYS_ADMIN to mount, else reported as skipped).
4. SIGTERM at random points (seeded) of real trainer processes, ``--sigterm-rounds`` of them continuing one run
   (``soak/sigterm.py``).
5. The scrape child stopped (SIGSTOP) for the rest of a trainer's run, and orphaned through a forked worker when the
   trainer is SIGKILLed, ``--child-steps`` each (``soak/child_faults.py``).
6. Target churn: scrape targets joining and leaving through Ray's service-discovery file while steps outrun the
   worker, ``--churn-steps`` (``soak/target_churn.py``).
7. Clock offset: trainer processes under libfaketime, Prometheus 20 s ahead of one and 5 s behind the other,
   ``--clock-steps`` each (``soak/clock_offset.py``; without libfaketime reported as skipped).

The result, ``<out>/soak-<UTC time>.json``, has one entry per fault: delivered / expected / duplicates per backend over
the fault's window, figures, and named checks. The process exits 1 when any check fails (also a skipped part with
``--require-all-faults``). ``observations`` are reported but do not fail the soak: infrastructure readings that did
not come back are the infrastructure's part, not the trainer's values this soak guards.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from soak.child_faults import run_child_faults
from soak.clock_offset import run_clock_offset
from soak.disk_full import run_disk_full
from soak.promql_faults import run_promql_faults
from soak.scrape_faults import run_scrape_faults
from soak.sigterm import run_sigterm
from soak.target_churn import run_target_churn

_log = logging.getLogger("soak")


def verdict(faults: dict[str, dict[str, Any]], require_all: bool) -> dict[str, Any]:
    """Which checks failed, which parts were skipped, which observations did not hold; ``passed``."""
    failed = [
        f"{name}.{check}" for name, entry in faults.items() for check, ok in entry.get("checks", {}).items() if not ok
    ]
    skipped = {name: entry["skipped"] for name, entry in faults.items() if "skipped" in entry}
    observed = [
        f"{name}.{what}"
        for name, entry in faults.items()
        for what, ok in entry.get("observations", {}).items()
        if not ok
    ]
    passed = not failed and not (require_all and skipped)
    return {"passed": passed, "failed_checks": failed, "skipped": skipped, "observations_not_holding": observed}


def short(faults: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per fault: ``delivered/expected`` and duplicates per backend, and whether its checks passed."""
    out: dict[str, Any] = {}
    for name, entry in faults.items():
        if "skipped" in entry:
            out[name] = {"skipped": entry["skipped"]}
            continue
        out[name] = {
            "delivery": {
                backend: f"{t['delivered']}/{t['expected']}, {t['duplicates']} duplicates"
                + (f", {t['reported_lost']} reported lost" if "reported_lost" in t else "")
                for backend, t in entry["delivery"].items()
            },
            "checks_passed": all(entry["checks"].values()),
        }
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the seven parts and return the results (also written under ``args.out``)."""
    started = time.monotonic()
    faults: dict[str, dict[str, Any]] = {}
    elapsed: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="otel-bridge-soak-") as name:
        tmp = Path(name)
        promql = run_promql_faults(args.steps, args.step_sleep_s, tmp / "promql", args.rss_tolerance_mb)
        elapsed["promql"] = time.monotonic() - started
        faults.update(promql["faults"])
        parts: list[tuple[str, Callable[[], dict[str, dict[str, Any]]]]] = [
            ("scrape", lambda: run_scrape_faults(args.scrape_steps, args.scrape_step_sleep_s, tmp / "scrape")),
            ("disk_full", lambda: run_disk_full(args.disk_steps, args.disk_step_sleep_s, tmp / "disk")),
            ("sigterm", lambda: run_sigterm(args.sigterm_rounds, args.seed, tmp / "sigterm")),
            ("scrape_child", lambda: run_child_faults(args.child_steps, args.child_step_sleep_s, tmp / "child")),
            ("target_churn", lambda: run_target_churn(args.churn_steps, args.churn_step_sleep_s, tmp / "churn")),
            ("clock_offset", lambda: run_clock_offset(args.clock_steps, args.clock_step_sleep_s, tmp / "clock")),
        ]
        for part, run in parts:
            t = time.monotonic()
            faults.update(run())
            elapsed[part] = time.monotonic() - t
    results: dict[str, Any] = {
        "arguments": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "elapsed_s": round(time.monotonic() - started, 1),
        "elapsed_per_part_s": {k: round(v, 1) for k, v in elapsed.items()},
        **verdict(faults, args.require_all_faults),
        "summary": short(faults),
        "faults": faults,
        "promql_schedule": promql["schedule"],
        "resources": promql["resources"],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"soak-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(results, indent=2) + "\n")
    results["path"] = str(path)
    return results


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=20_000, help="steps of part 1 (PromQL path)")
    parser.add_argument("--step-sleep-s", type=float, default=0.004, help="simulated work per step, part 1")
    parser.add_argument("--scrape-steps", type=int, default=200, help="steps of part 2 (scrape path)")
    parser.add_argument("--scrape-step-sleep-s", type=float, default=0.2, help="simulated work per step, part 2")
    parser.add_argument("--disk-steps", type=int, default=300, help="steps of part 3 (disk full)")
    parser.add_argument("--disk-step-sleep-s", type=float, default=0.01, help="simulated work per step, part 3")
    parser.add_argument("--sigterm-rounds", type=int, default=8, help="trainer processes SIGTERMed in part 4")
    parser.add_argument("--child-steps", type=int, default=60, help="steps of each trainer in part 5 (scrape child)")
    parser.add_argument("--child-step-sleep-s", type=float, default=0.05, help="simulated work per step, part 5")
    parser.add_argument("--churn-steps", type=int, default=1000, help="steps of part 6 (target churn)")
    parser.add_argument("--churn-step-sleep-s", type=float, default=0.01, help="simulated work per step, part 6")
    parser.add_argument("--clock-steps", type=int, default=300, help="steps of each trainer in part 7 (clock offset)")
    parser.add_argument("--clock-step-sleep-s", type=float, default=0.02, help="simulated work per step, part 7")
    parser.add_argument("--seed", type=int, default=14, help="seed of the random SIGTERM points")
    parser.add_argument("--require-all-faults", action="store_true", help="fail when a part had to be skipped")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--rss-tolerance-mb", type=float, default=20.0)
    args = parser.parse_args(argv)
    for option, least in (
        ("steps", 1),
        ("scrape_steps", 20),
        ("disk_steps", 10),
        ("sigterm_rounds", 1),
        ("child_steps", 6),
        ("churn_steps", 80),
        ("clock_steps", 2),
    ):
        if getattr(args, option) < least:
            parser.error(f"--{option.replace('_', '-')} must be at least {least} (every fault needs its window)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("otel_bridge.http.transport").setLevel(logging.WARNING)  # per-request failure lines
    results = run(args)
    keys = ("elapsed_s", "passed", "failed_checks", "skipped", "observations_not_holding", "summary", "path")
    sys.stdout.write(json.dumps({k: results[k] for k in keys}, indent=2) + "\n")
    for name, reason in results["skipped"].items():
        _log.warning("%s was not run: %s", name, reason)
    return 0 if results["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
