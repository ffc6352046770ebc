"""Before vs after: the same measurements against two revisions' ``otel_bridge``, alternated in one run.

``python -m bench.compare_revisions --before <rev> [--after <rev>] [--rounds N] [--measurements trainer,scrape,promql]
[--skip-promql] [--output NAME]`` (from the repository root; ``--after`` defaults to ``HEAD``). Made for issue 13's
acceptance ("bench numbers unchanged within noise, ratio in one run, before vs after"); any two revisions whose
``Bridge`` has these calls and keys can be compared (``--output`` names the results file, for bisecting).

How: each revision is checked out with ``git worktree add --detach`` under a temporary directory (removed at the end,
even on errors, with ``git worktree remove --force``). This file is copied once into that directory and every
measurement runs it in a fresh ``python -P`` subprocess with ``PYTHONPATH=<worktree>``, so the measuring code is this
checkout's while ``import otel_bridge`` resolves to the revision's package (the child checks ``otel_bridge.__file__``
is under the worktree and fails otherwise). Rounds alternate the two sides (round 0: before then after, round 1:
after then before, ...) so load from other jobs on the machine falls on both alike; each round gives an after/before
ratio per measurement, and the spread of those ratios is the noise.

Measurements (public API present in both revisions only: ``Bridge.from_config``, ``meter``, ``log``, ``collect``,
``close``; configuration keys present in both):

* ``trainer``: per step on the training thread, 100 ``counter.add(1)`` + ``bridge.log(<100 keys>, step)``, then 2 ms
  of the trainer's own work (a sleep); JSONL tracker, no infrastructure source (``bench/suite_overhead.py``'s quiet
  case). p50/p99 per step.
* ``scrape``: the scrape path over ``SCRAPE_ENDPOINTS`` endpoints of ``bench/capture_server.py`` (the real vLLM
  capture, one server process shared by both sides), ``vllm`` preset. Per step: ``STEP_WORK_S`` of work, then the
  delivery time: from ``bridge.log`` until ``bridge.collect(step)`` returns the record. Where the revision has
  ``scrape.isolation`` (the child process is the default since caca267, after the restructure) it is set to
  ``thread``, the in-process sampler the restructure had, so both sides do the same work in the same place.
* ``promql`` (skipped with ``--skip-promql``): the same delivery time through a real Prometheus
  (``bench.common.prometheus_stack``: two simulated vLLM servers scraped every second), ``vllm`` preset, default
  ``prometheus.boundary`` (``auto``).

Each measurement records per step the wall time and the CPU time: the training thread's (``time.thread_time``) for
``trainer``, the whole process' (``time.process_time``, every thread, from ``bridge.log`` until ``collect`` returned)
for ``scrape`` and ``promql``. Writes ``bench/results/<output>.json`` (default ``compare_revisions``: revisions,
configuration, machine, per-round raw samples and summaries, ratios) and prints the table: medians over the rounds of
each side's per-round statistic, their ratio, and the median, min and max of the per-round ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
KEYS = 100
TRAINER_STEPS = 1500
TRAINER_WARMUP = 100
TRAINER_WORK_S = 0.002
SCRAPE_ENDPOINTS = 16
SCRAPE_STEPS = 24
PROMQL_STEPS = 10
WARMUP_STEPS = 2
STEP_WORK_S = 0.2
SAMPLE_INTERVAL_S = 1.0
CHILD_TIMEOUT_S = 180.0
MEASUREMENTS = ("trainer", "scrape", "promql")
# (series, statistic, quantile) of the table: wall time per step, and CPU per step (the training thread's for
# trainer; the whole process', every thread, from bridge.log until collect returned, for scrape and promql)
TABLE_STATS = (("wall", "p50", 0.5), ("wall", "p99", 0.99), ("cpu", "p50", 0.5))
SIDES = ("before", "after")


# --- child side: runs with PYTHONPATH=<worktree>; imports nothing from bench (the worktree has its own bench/) ---


def _percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (as ``bench.common.summary``)."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.999999) - 1))]


def _stats(samples: Sequence[float]) -> dict[str, float]:
    return {
        "count": float(len(samples)),
        "p50": _percentile(samples, 0.5),
        "p99": _percentile(samples, 0.99),
        "max": max(samples),
        "mean": sum(samples) / len(samples),
    }


def _has_isolation() -> bool:
    """Whether this revision's configuration has ``scrape.isolation`` (older ones refuse unknown keys)."""
    from otel_bridge import BridgeConfig

    scrape = BridgeConfig.model_fields["scrape"].annotation
    return "isolation" in getattr(scrape, "model_fields", {})


def _trainer(config: dict[str, Any], steps: int, warmup: int) -> dict[str, Any]:
    from otel_bridge import Bridge

    values = {f"trainer/metric_{i}": float(i) for i in range(KEYS)}
    walls: list[float] = []
    cpu: list[float] = []
    bridge = Bridge.from_config(config)
    try:
        meter = bridge.meter("bench")
        counters = [meter.create_counter(f"bench.counter_{i}") for i in range(KEYS)]
        for step in range(warmup + steps):
            c0, t0 = time.thread_time(), time.perf_counter()
            for counter in counters:
                counter.add(1)
            bridge.log(values, step=step)
            t1, c1 = time.perf_counter(), time.thread_time()
            time.sleep(TRAINER_WORK_S)
            if step >= warmup:
                walls.append(t1 - t0)
                cpu.append(c1 - c0)
    finally:
        bridge.close()
    return {"samples_s": {"wall": walls, "cpu": cpu}}


def _delivery(config: dict[str, Any], steps: int, warmup: int, key: str) -> dict[str, Any]:
    from otel_bridge import Bridge

    values = {f"trainer/metric_{i}": float(i) for i in range(10)}
    delivery: list[float] = []
    cpu: list[float] = []
    log: list[float] = []
    bridge = Bridge.from_config(config)
    try:
        for step in range(warmup + steps):
            time.sleep(STEP_WORK_S)
            c0, t0 = time.process_time(), time.perf_counter()
            bridge.log(values, step=step)
            t1 = time.perf_counter()
            record = bridge.collect(step)
            t2, c2 = time.perf_counter(), time.process_time()
            if not any(k.startswith(key) for k in record):
                raise RuntimeError(f"step {step}'s record has no {key}* key: {sorted(record)[:20]}")
            if step >= warmup:
                delivery.append(t2 - t0)
                cpu.append(c2 - c0)
                log.append(t1 - t0)
    finally:
        bridge.close()
    return {"samples_s": {"wall": delivery, "cpu": cpu, "log_call": log}}


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One measurement against the ``otel_bridge`` on ``PYTHONPATH`` (checked to be under ``spec['worktree']``)."""
    import otel_bridge

    worktree = Path(spec["worktree"]).resolve()
    package = Path(otel_bridge.__file__).resolve()
    if not package.is_relative_to(worktree):
        raise RuntimeError(f"otel_bridge imported from {package}, not from the worktree {worktree}")
    config: dict[str, Any] = {
        "trackers": [{"type": "jsonl"}],
        "run": {"name": f"{spec['measurement']}-{spec['side']}-{spec['round']}", "dir": spec["run_dir"]},
    }
    isolation = _has_isolation()
    if isolation:
        config["scrape"] = {"isolation": "thread"}
    measurement = spec["measurement"]
    if measurement == "trainer":
        result = _trainer(config, spec["steps"], spec["warmup"])
    elif measurement == "scrape":
        config["metrics"] = [{"preset": "vllm"}]
        config["scrape"] = {
            **config.get("scrape", {}),
            "targets": spec["targets"],
            "sample_interval_s": SAMPLE_INTERVAL_S,
        }
        result = _delivery(config, spec["steps"], spec["warmup"], "rollout/")
    elif measurement == "promql":
        config["metrics"] = [{"preset": "vllm"}]
        config["prometheus"] = {"url": spec["prometheus_url"], "scrape_interval_s": 1.0}
        result = _delivery(config, spec["steps"], spec["warmup"], "rollout/")
    else:
        raise ValueError(f"unknown measurement {measurement!r}")
    return {**result, "otel_bridge_file": str(package), "isolation_set_to_thread": isolation, "config": config}


# --- parent side ---


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()


def _describe(rev: str) -> dict[str, str]:
    commit = _git("rev-parse", "--verify", f"{rev}^{{commit}}")
    date, subject = _git("log", "-1", "--format=%cI%x00%s", commit).split("\x00", 1)
    return {"rev": rev, "commit": commit, "date": date, "subject": subject[:120]}


def _run_child(script: Path, worktree: Path, spec: dict[str, Any], workdir: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(worktree)}
    env.pop("PYTHONHOME", None)
    process = subprocess.run(
        [sys.executable, "-P", str(script), "--child", json.dumps({**spec, "worktree": str(worktree)})],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        check=False,
    )
    if process.returncode != 0:
        raise RuntimeError(
            f"{spec['measurement']} ({spec['side']}, round {spec['round']}) exited with {process.returncode}:\n"
            f"{process.stderr[-3000:]}"
        )
    result: dict[str, Any] = json.loads(process.stdout.strip().splitlines()[-1])
    return result


def _ratio_table(results: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for measurement, data in results.items():
        rounds = data["rounds"]
        for series, stat, q in TABLE_STATS:
            before = [r["before"]["stats"][series][stat] for r in rounds]
            after = [r["after"]["stats"][series][stat] for r in rounds]
            ratios = sorted(a / b for a, b in zip(after, before, strict=True))
            pooled_before = _percentile([s for r in rounds for s in r["before"]["samples_s"][series]], q)
            pooled_after = _percentile([s for r in rounds for s in r["after"]["samples_s"][series]], q)
            rows.append({
                "measurement": measurement,
                "series": series,
                "stat": stat,
                "before_ms_median_of_rounds": statistics.median(before) * 1e3,
                "after_ms_median_of_rounds": statistics.median(after) * 1e3,
                "ratio_of_medians": statistics.median(after) / statistics.median(before),
                "before_ms_pooled": pooled_before * 1e3,
                "after_ms_pooled": pooled_after * 1e3,
                "ratio_pooled": pooled_after / pooled_before,
                "round_ratios": ratios,
                "round_ratio_median": statistics.median(ratios),
                "round_ratio_min": ratios[0],
                "round_ratio_max": ratios[-1],
                "rounds_after_higher": sum(1 for r in ratios if r > 1),
            })  # fmt: skip
    return rows


def _print_table(rows: list[dict[str, Any]], revisions: dict[str, dict[str, str]]) -> None:
    print(f"before {revisions['before']['commit'][:10]}  after {revisions['after']['commit'][:10]}")
    print(
        "| measurement | per step | before (ms) | after (ms) | after/before | per-round ratios: median [min-max] "
        "| rounds after higher |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['measurement']} | {row['series']} {row['stat']} | {row['before_ms_median_of_rounds']:.3f} "
            f"| {row['after_ms_median_of_rounds']:.3f} | {row['ratio_of_medians']:.2f} "
            f"| {row['round_ratio_median']:.2f} [{row['round_ratio_min']:.2f}-{row['round_ratio_max']:.2f}] "
            f"| {row['rounds_after_higher']}/{len(row['round_ratios'])} |"
        )


def main(argv: list[str] | None = None) -> int:
    """Entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m bench.compare_revisions", description=__doc__)
    parser.add_argument("--before", help="revision before the change (e.g. 8892084^)")
    parser.add_argument("--after", default="HEAD", help="revision after the change (default HEAD)")
    parser.add_argument("--rounds", type=int, default=6, help="rounds of before/after (alternating order)")
    parser.add_argument(
        "--measurements",
        default=",".join(MEASUREMENTS),
        help=f"comma-separated subset of {','.join(MEASUREMENTS)} (default: all)",
    )
    parser.add_argument("--skip-promql", action="store_true", help="no measurement through a real Prometheus")
    parser.add_argument("--output", default="compare_revisions", help="results file name under bench/results/")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    if not args.before:
        parser.error("--before is required")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    from bench.common import RESULTS, capture_servers, machine, prometheus_stack

    revisions = {"before": _describe(args.before), "after": _describe(args.after)}
    chosen = [m.strip() for m in args.measurements.split(",") if m.strip()]
    if not chosen or set(chosen) - set(MEASUREMENTS):
        parser.error(f"--measurements: choose among {', '.join(MEASUREMENTS)}")
    measurements = [m for m in MEASUREMENTS if m in chosen and not (m == "promql" and args.skip_promql)]
    started = time.time()
    temp = Path(tempfile.mkdtemp(prefix="otel-bridge-compare-"))
    worktrees: dict[str, Path] = {}
    results: dict[str, Any] = {m: {"rounds": []} for m in measurements}
    notes: dict[str, str] = {}
    try:
        for side in SIDES:
            path = temp / side
            _git("worktree", "add", "--detach", str(path), revisions[side]["commit"])
            worktrees[side] = path
        script = temp / "measure.py"
        shutil.copyfile(Path(__file__).resolve(), script)  # one copy: edits to this file meanwhile change nothing
        (temp / "runs").mkdir()
        (temp / "cwd").mkdir()
        with ExitStack() as servers:
            capture = servers.enter_context(capture_servers(SCRAPE_ENDPOINTS))
            prometheus_url = (
                servers.enter_context(prometheus_stack(temp / "prometheus")) if "promql" in measurements else None
            )
            for index in range(args.rounds):
                order = SIDES if index % 2 == 0 else SIDES[::-1]
                for measurement in measurements:
                    entry: dict[str, Any] = {"round": index, "order": list(order)}
                    for side in order:
                        spec = {
                            "measurement": measurement,
                            "side": side,
                            "round": index,
                            "run_dir": str(temp / "runs"),
                            "steps": TRAINER_STEPS if measurement == "trainer"
                            else SCRAPE_STEPS if measurement == "scrape" else PROMQL_STEPS,
                            "warmup": TRAINER_WARMUP if measurement == "trainer" else WARMUP_STEPS,
                            "targets": capture.targets,
                            "prometheus_url": prometheus_url,
                        }  # fmt: skip
                        t0 = time.perf_counter()
                        out = _run_child(script, worktrees[side], spec, temp / "cwd")
                        samples = out.pop("samples_s")
                        entry[side] = {
                            **out,
                            "samples_s": samples,
                            "stats": {series: _stats(values) for series, values in samples.items()},
                            "child_wall_s": time.perf_counter() - t0,
                            "loadavg_1": os.getloadavg()[0],
                        }
                    results[measurement]["rounds"].append(entry)
                    b, a = entry["before"]["stats"]["wall"]["p50"], entry["after"]["stats"]["wall"]["p50"]
                    print(
                        f"round {index} {measurement}: p50 before {b * 1e3:.3f} ms, after {a * 1e3:.3f} ms,"
                        f" ratio {a / b:.2f} (load {os.getloadavg()[0]:.1f})",
                        flush=True,
                    )
    finally:
        for path in worktrees.values():
            subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=REPO, check=False)
        shutil.rmtree(temp, ignore_errors=True)
    for measurement in MEASUREMENTS:
        if measurement not in measurements:
            notes[measurement] = "not run (--measurements / --skip-promql)"
    rows = _ratio_table(results)
    configuration = {
        "rounds": args.rounds,
        "order": "round i even: before then after; odd: after then before",
        "trainer": {"steps": TRAINER_STEPS, "warmup": TRAINER_WARMUP, "keys": KEYS, "counters": KEYS,
                    "work_s": TRAINER_WORK_S},
        "scrape": {"endpoints": SCRAPE_ENDPOINTS, "steps": SCRAPE_STEPS, "warmup": WARMUP_STEPS,
                   "step_work_s": STEP_WORK_S, "sample_interval_s": SAMPLE_INTERVAL_S, "preset": "vllm"},
        "promql": {"steps": PROMQL_STEPS, "warmup": WARMUP_STEPS, "step_work_s": STEP_WORK_S, "preset": "vllm",
                   "prometheus": "bench.common.prometheus_stack: 2 simulated vLLM servers, 1 s scrape interval"},
        "wall_s": time.time() - started,
    }  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{args.output}.json"
    payload = {
        "suite": "compare_revisions",
        "time": time.time(),
        "machine": machine(),
        "revisions": revisions,
        "configuration": configuration,
        "notes": notes,
        "table": rows,
        "measurements": results,
    }
    path.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    _print_table(rows, revisions)
    print(f"wrote {path} ({configuration['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
