"""Memory: RSS growth of a process running the bridge for many steps.

Two runs, RSS read from ``/proc/self/statm`` after every step (after a ``gc.collect()`` at the checkpoints):

* ``scrape-64``: the scrape path over 64 endpoints serving the vLLM capture (:mod:`bench.capture_server`),
  ``TWENTY_METRICS``, a JSONL tracker, ``bridge.log(<10 keys>, step)`` as the boundary and ``bridge.collect(step)``
  after it, so the trainer runs at the pipeline's pace (no backlog; a backlog would measure the queue, not a leak).
  One step costs a 64-endpoint scrape round plus its window statistics (see the scrape suite), about 1 s on this
  machine, so 10,000 steps (~3 h) do not fit the 10-minute budget: the run is time-boxed (``SCRAPE_BUDGET_S``) and
  reports RSS(end) - RSS(10 % of the steps), the least-squares slope of RSS over the second half of the steps, and that
  slope extrapolated to 9,000 steps (labelled as an extrapolation). ``python -m bench.suite_memory --steps 10000``
  runs the real 10,000 steps.
* ``trainer-10k``: 10,000 real steps of the same bridge without infrastructure (``bridge.log`` of 100 keys and 100
  OTel counter adds per step, JSONL tracker): RSS(10,000) - RSS(1,000), exactly as the target is phrased, for
  everything per-step that is not the scrape path (records kept for ``collect``, OTel state, delivery queues).
"""

from __future__ import annotations

import argparse
import gc
import logging
import time
from pathlib import Path
from typing import Any

from bench.common import capture_servers, pyplot, rss_bytes, save_figure, write_result
from otel_bridge import Bridge
from tests.helpers.metric_sets import TWENTY_METRICS

NAME = "memory"
SCRAPE_BUDGET_S = 60.0
TARGETS = 64
MB = 1024 * 1024
_log = logging.getLogger(__name__)


def _slope(xs: list[int], ys: list[float]) -> float:
    n = len(xs)
    if n < 2:
        return float("nan")
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else float("nan")


def _scrape_run(workdir: Path, max_steps: int, budget_s: float) -> dict[str, Any]:
    trainer = {f"actor/metric_{i}": float(i) for i in range(10)}
    rss: list[int] = []
    step_wall: list[float] = []
    with capture_servers(TARGETS) as servers:
        config: dict[str, Any] = {
            "scrape": {"targets": servers.targets, "sample_interval_s": 1.0},
            "metrics": TWENTY_METRICS,
            "trackers": [{"type": "jsonl"}],
            "run": {"name": "memory-scrape", "dir": str(workdir)},
        }
        started = time.perf_counter()
        with Bridge.from_config(config) as bridge:
            step = 0
            while step < max_steps and time.perf_counter() - started < budget_s:
                t0 = time.perf_counter()
                bridge.log(trainer, step=step)
                bridge.collect(step)
                step_wall.append(time.perf_counter() - t0)
                rss.append(rss_bytes())
                step += 1
    steps = len(rss)
    first = max(1, steps // 10)
    half = steps // 2
    slope = _slope(list(range(half, steps)), [float(r) for r in rss[half:]])
    return {
        "config": {**config, "scrape": {**config["scrape"], "targets": f"{TARGETS} capture endpoints"}},
        "steps": steps,
        "budget_s": budget_s,
        "rss_bytes_per_step": rss,
        "step_wall_s": step_wall,
        "rss_growth_mb": (rss[-1] - rss[first - 1]) / MB,
        "growth_between_steps": [first, steps],
        "slope_bytes_per_step": slope,
        "extrapolated_9000_steps_mb": slope * 9000 / MB,
        "extrapolated": steps < 10_000,
    }


def _trainer_run(workdir: Path, steps: int) -> dict[str, Any]:
    config = {"trackers": [{"type": "jsonl"}], "run": {"name": "memory-trainer", "dir": str(workdir)}}
    values = {f"trainer/metric_{i}": float(i) for i in range(100)}
    checkpoints: dict[int, int] = {}
    rss: list[int] = []
    with Bridge.from_config(config) as bridge:
        meter = bridge.meter("bench")
        counters = [meter.create_counter(f"bench.counter_{i}") for i in range(100)]
        for step in range(steps):
            for counter in counters:
                counter.add(1)
            bridge.log(values, step=step)
            if (step + 1) % 100 == 0:
                rss.append(rss_bytes())
            if step + 1 in (steps // 10, steps):
                bridge.collect(step)  # let delivery catch up before the checkpoint
                gc.collect()
                checkpoints[step + 1] = rss_bytes()
    first, last = steps // 10, steps
    return {
        "config": config,
        "steps": steps,
        "rss_bytes_every_100_steps": rss,
        "checkpoints_rss_bytes": checkpoints,
        "rss_growth_mb": (checkpoints[last] - checkpoints[first]) / MB,
        "growth_between_steps": [first, last],
    }


def run(quick: bool, workdir: Path, scrape_steps: int = 10_000) -> dict[str, Any]:
    """Run the suite; write ``results/memory.json`` and ``.png``; return the rows for the README table."""
    budget = 30.0 if quick else SCRAPE_BUDGET_S
    _log.info("memory: scrape path, %d endpoints, up to %d steps or %.0f s", TARGETS, scrape_steps, budget)
    scrape = _scrape_run(workdir, scrape_steps, budget if scrape_steps == 10_000 else float("inf"))
    trainer_steps = 2_000 if quick else 10_000
    _log.info("memory: trainer-only, %d steps", trainer_steps)
    trainer = _trainer_run(workdir, trainer_steps)
    rows = [
        {"run": f"scrape-{TARGETS} ({scrape['steps']} steps)", "growth_mb": scrape["rss_growth_mb"],
         "between": scrape["growth_between_steps"], "extrapolated_9000_steps_mb": scrape["extrapolated_9000_steps_mb"],
         "step_s_mean": sum(scrape["step_wall_s"]) / max(1, len(scrape["step_wall_s"]))},
        {"run": f"trainer-only ({trainer['steps']} steps)", "growth_mb": trainer["rss_growth_mb"],
         "between": trainer["growth_between_steps"]},
    ]  # fmt: skip
    configuration = {"targets": TARGETS, "scrape_budget_s": budget, "trainer_steps": trainer_steps}
    write_result(NAME, {"configuration": configuration, "runs": {"scrape": scrape, "trainer": trainer}, "rows": rows})
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(range(1, scrape["steps"] + 1), [r / MB for r in scrape["rss_bytes_per_step"]])
    left.set_title(f"scrape path, {TARGETS} endpoints")
    left.set_xlabel("step")
    left.set_ylabel("RSS (MiB)")
    right.plot(range(100, trainer["steps"] + 1, 100), [r / MB for r in trainer["rss_bytes_every_100_steps"]])
    right.set_title("trainer-only (100 keys + 100 counters per step)")
    right.set_xlabel("step")
    save_figure(fig, NAME)
    return {"rows": rows}


if __name__ == "__main__":
    import tempfile

    parser = argparse.ArgumentParser(description="the memory suite with a chosen number of scrape-path steps")
    parser.add_argument("--steps", type=int, default=10_000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    with tempfile.TemporaryDirectory() as tmp:
        run(False, Path(tmp), scrape_steps=args.steps)
