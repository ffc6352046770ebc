"""Trainer-side overhead: ``bridge.log()`` of a 100-key dict plus 100 OTel counter adds per step vs a plain dict.

The bridge has no infrastructure source (only the trainer's side is measured) and a JSONL tracker. Per step, timed
on the training thread: 100 ``counter.add(1)`` calls, then ``bridge.log(values, step)`` (here every call is a step
boundary: it snapshots the 100 instruments and enqueues the step). The reference is what a trainer without the bridge
does with the same numbers: ``store.update(values)`` on a plain dict, plus 100 ``dict[key] += 1`` for the counters.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from bench.common import pyplot, save_figure, summary, write_result
from otel_bridge import Bridge

NAME = "overhead"
KEYS = 100
_log = logging.getLogger(__name__)


def run(quick: bool, workdir: Path) -> dict[str, Any]:
    """Run the suite; write ``results/overhead.json`` and ``.png``; return the rows for the README table."""
    steps = 500 if quick else 3000
    values = {f"trainer/metric_{i}": float(i) for i in range(KEYS)}
    config = {"trackers": [{"type": "jsonl"}], "run": {"name": "overhead", "dir": str(workdir)}}
    adds: list[float] = []
    logs: list[float] = []
    plain: list[float] = []
    with Bridge.from_config(config) as bridge:
        meter = bridge.meter("bench")
        counters = [meter.create_counter(f"bench.counter_{i}") for i in range(KEYS)]
        for step in range(steps):
            t0 = time.perf_counter()
            for counter in counters:
                counter.add(1)
            t1 = time.perf_counter()
            bridge.log(values, step=step)
            t2 = time.perf_counter()
            adds.append(t1 - t0)
            logs.append(t2 - t1)
    store: dict[str, float] = {}
    counts = {f"bench.counter_{i}": 0 for i in range(KEYS)}
    names = list(counts)
    for _step in range(steps):
        t0 = time.perf_counter()
        for name in names:
            counts[name] += 1
        store.update(values)
        plain.append(time.perf_counter() - t0)
    ours = [a + b for a, b in zip(adds, logs, strict=True)]
    s_ours, s_plain = summary(ours), summary(plain)
    row = {
        "bridge_us": {k: s_ours[k] * 1e6 for k in ("p50", "p99", "max", "mean")},
        "log_us_p50": summary(logs)["p50"] * 1e6,
        "counter_adds_us_p50": summary(adds)["p50"] * 1e6,
        "plain_dict_us": {k: s_plain[k] * 1e6 for k in ("p50", "p99", "max", "mean")},
        "ratio_p50": s_ours["p50"] / s_plain["p50"],
        "ratio_mean": s_ours["mean"] / s_plain["mean"],
    }
    configuration = {"steps": steps, "keys": KEYS, "counters": KEYS, "config": config}
    samples = {"counter_adds": adds, "log": logs, "plain_dict": plain}
    write_result(NAME, {"configuration": configuration, "samples_s": samples, "rows": [row]})
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.boxplot([[v * 1e6 for v in x] for x in (adds, logs, plain)], showfliers=False)
    ax.set_xticks([1, 2, 3], ["100 counter.add", "bridge.log(100 keys)", "plain dict update"])
    ax.set_yscale("log")
    ax.set_ylabel("microseconds per step")
    ax.set_title(f"trainer-side cost per step (median ratio {row['ratio_p50']:.0f}x)")
    save_figure(fig, NAME)
    return {"rows": [row]}
