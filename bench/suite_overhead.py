"""Trainer-side overhead: ``bridge.log()`` of a 100-key dict plus 100 OTel counter adds per step vs a plain dict.

Per step, timed on the training thread: 100 ``counter.add(1)`` calls, then ``bridge.log(values, step)`` (here every
call is a step boundary: it snapshots the 100 instruments and enqueues the step), then ``STEP_WORK_S`` of the
trainer's own work (a sleep, so the bridge's threads have the GIL to themselves between steps, as with a GPU step).
The reference is what a trainer without the bridge does with the same numbers: ``store.update(values)`` on a plain
dict, plus 100 ``dict[key] += 1`` for the counters.

Cases, in one run:

* ``quiet``: no infrastructure source, a JSONL tracker (the trainer's side alone);
* ``busy``: the same, while the bridge scrapes ``BUSY_ENDPOINTS`` endpoints serving the real vLLM capture (the
  ``vllm`` preset, an in-step sample every ``BUSY_SAMPLE_S``): the delivery worker and the sampler parse and compute
  beside the training loop, in its process.

Reported per case: the training thread's p50/p99/max per step and p99/p50 (issue 18 asks for <= 3), its own CPU per
step (``time.thread_time``), the whole process' CPU per step (the bridge's threads included), and the garbage
collections that ran during the measured steps (``gc.callbacks``: how many, the longest, how many steps contained
one, and the p99 of the steps without one).
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from bench.common import capture_servers, pyplot, save_figure, summary, write_result
from otel_bridge import Bridge

NAME = "overhead"
KEYS = 100
STEP_WORK_S = 0.002
BUSY_ENDPOINTS = 64
BUSY_SAMPLE_S = 0.05
_log = logging.getLogger(__name__)


class GcLog:
    """The garbage collections of this process while it is entered: (start, seconds, generation) each."""

    def __init__(self) -> None:
        self.events: list[tuple[float, float, int]] = []
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.events.append((self._started, time.perf_counter() - self._started, int(info["generation"])))

    @contextmanager
    def recording(self) -> Iterator[GcLog]:
        gc.callbacks.append(self._callback)
        try:
            yield self
        finally:
            gc.callbacks.remove(self._callback)


def _trainer_loop(config: dict[str, Any], steps: int) -> dict[str, Any]:
    values = {f"trainer/metric_{i}": float(i) for i in range(KEYS)}
    walls: list[float] = []
    starts: list[float] = []
    thread_cpu: list[float] = []
    process_cpu: list[float] = []
    with Bridge.from_config(config) as bridge, GcLog().recording() as collections:
        meter = bridge.meter("bench")
        counters = [meter.create_counter(f"bench.counter_{i}") for i in range(KEYS)]
        for step in range(steps):
            c0, p0 = time.thread_time(), time.process_time()
            t0 = time.perf_counter()
            for counter in counters:
                counter.add(1)
            bridge.log(values, step=step)
            t1 = time.perf_counter()
            time.sleep(STEP_WORK_S)
            starts.append(t0)
            walls.append(t1 - t0)
            thread_cpu.append(time.thread_time() - c0)
            process_cpu.append(time.process_time() - p0)
    with_gc = {
        i for i, (t0, wall) in enumerate(zip(starts, walls, strict=True)) for (g0, _, _) in collections.events
        if t0 <= g0 <= t0 + wall
    }  # fmt: skip
    s = summary(walls)
    return {
        "trainer_us": {k: s[k] * 1e6 for k in ("p50", "p99", "max", "mean")},
        "p99_over_p50": s["p99"] / s["p50"],
        "trainer_thread_cpu_us_p50": summary(thread_cpu)["p50"] * 1e6,
        "process_cpu_ms_per_step_mean": summary(process_cpu)["mean"] * 1e3,
        "gc": {
            "collections": len(collections.events),
            "by_generation": {g: sum(1 for e in collections.events if e[2] == g) for g in (0, 1, 2)},
            "longest_ms": max((e[1] for e in collections.events), default=0.0) * 1e3,
            "steps_with_one": len(with_gc),
            "p99_us_of_steps_without": summary([w for i, w in enumerate(walls) if i not in with_gc])["p99"] * 1e6,
        },
        "samples_s": {"trainer": walls, "trainer_thread_cpu": thread_cpu, "process_cpu": process_cpu},
    }


def _plain(steps: int) -> list[float]:
    values = {f"trainer/metric_{i}": float(i) for i in range(KEYS)}
    store: dict[str, float] = {}
    counts = {f"bench.counter_{i}": 0 for i in range(KEYS)}
    names = list(counts)
    plain = []
    for _step in range(steps):
        t0 = time.perf_counter()
        for name in names:
            counts[name] += 1
        store.update(values)
        plain.append(time.perf_counter() - t0)
    return plain


def run(quick: bool, workdir: Path) -> dict[str, Any]:
    """Run the suite; write ``results/overhead.json`` and ``.png``; return the rows for the README table."""
    steps = 500 if quick else 3000
    rows = []
    samples: dict[str, Any] = {}
    for case in ("quiet", "busy"):
        config: dict[str, Any] = {"trackers": [{"type": "jsonl"}], "run": {"name": case, "dir": str(workdir)}}
        servers = capture_servers(BUSY_ENDPOINTS) if case == "busy" else nullcontext()
        with servers as capture:
            if capture is not None:
                config["metrics"] = [{"preset": "vllm"}]
                config["scrape"] = {"targets": capture.targets, "sample_interval_s": BUSY_SAMPLE_S}
            result = _trainer_loop(config, steps)
        samples[case] = result.pop("samples_s")
        rows.append({"case": case, **result})
    plain = _plain(steps)
    s_plain = summary(plain)
    for row in rows:
        row["ratio_p50_to_plain_dict"] = row["trainer_us"]["p50"] / (s_plain["p50"] * 1e6)
    rows.append({"case": "plain dict", "trainer_us": {k: s_plain[k] * 1e6 for k in ("p50", "p99", "max", "mean")}})
    configuration = {
        "steps": steps,
        "keys": KEYS,
        "counters": KEYS,
        "step_work_s": STEP_WORK_S,
        "busy_endpoints": BUSY_ENDPOINTS,
        "busy_sample_interval_s": BUSY_SAMPLE_S,
    }
    samples["plain_dict"] = plain
    write_result(NAME, {"configuration": configuration, "samples_s": samples, "rows": rows})
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    series = [samples["quiet"]["trainer"], samples["busy"]["trainer"], plain]
    ax.boxplot([[v * 1e6 for v in x] for x in series], whis=(1, 99), showfliers=True)
    ax.set_xticks([1, 2, 3], ["bridge, quiet", f"bridge, {BUSY_ENDPOINTS} endpoints", "plain dict"])
    ax.set_yscale("log")
    ax.set_ylabel("microseconds per step (training thread)")
    ax.set_title("100 counter.add + bridge.log(100 keys) per step; whiskers p1-p99")
    save_figure(fig, NAME)
    return {"rows": rows}
