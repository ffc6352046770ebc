"""GPU time at scale: one step's idle GPU-seconds and joules through a real Prometheus for 8 to 1,024 GPUs (issue 28).

Data: no live exporters. The history of N GPUs (N / 8 hosts of 8, the ``dcgm`` preset's families as dcgm-exporter
prints them: ``DCGM_FI_DEV_GPU_UTIL`` and the other gauges per GPU, ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` a
counter in mJ), sampled every 15 s at a per-host offset, is generated, backfilled with ``promtool`` and served by a real
Prometheus (``bench.suite_promql_scale.prometheus_on``: hard-linked blocks, the counting proxy in another process).
Utilization alternates per 30 s (rollout-like then update-like) with a per-GPU level, so every 60 s window has a
non-trivial mean.

Per N, ``PromQLProducer`` with ``- preset: dcgm`` (whole run) and ``- preset: dcgm, by: [Hostname]`` (per node) reads
window -1 (warm-up) and 3 measured 60 s windows. Per step: wall time, requests, bytes on the wire and decoded, series
returned; the trainer's own cost is the producer's ``on_boundary`` (what a step boundary calls on the training
thread), timed over 10,000 calls. The whole-run idle GPU-seconds and joules are compared with the generator's truth
(idle: each GPU's window seconds x (1 - mean of its in-window samples / 100), summed; joules: the counters' increase /
1000), relative error reported.

Targets (at 1,024 GPUs): the whole-run answer's decoded bytes at most 1.5 x those at 8 GPUs (O(configured metrics),
not O(GPUs)); per node, they grow with the nodes (the label groups asked for) and not with the GPUs per node; the
boundary cost does not grow with GPUs; exact within 1e-9.

``python -m bench.suite_gpu_scale [--quick]`` runs it alone (``python -m bench.run --suite gpu-scale`` with the
others).
"""

from __future__ import annotations

import argparse
import logging
import math
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np

from bench.backfill import default_anchor
from bench.common import write_result
from bench.suite_promql_scale import Backend, prometheus_on

NAME = "gpu-scale"
GPUS = (8, 128, 1024)
QUICK_GPUS = (8, 1024)
GPUS_PER_HOST = 8
INTERVAL_S = 15.0
WINDOW_S = 60.0
STEPS = 3
BEFORE_S = 120.0
AFTER_S = 60.0
EXACT_REL = 1e-9
TARGET_BYTES_GROWTH = 1.5
_log = logging.getLogger(__name__)

# (name, kind, value per sample from the utilization u in %)
_FAMILIES: tuple[tuple[str, str], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "gauge"),
    ("DCGM_FI_DEV_FB_USED", "gauge"),
    ("DCGM_FI_DEV_FB_FREE", "gauge"),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge"),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge"),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge"),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge"),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter"),
)


@dataclass
class History:
    """The generated history of ``gpus`` GPUs: TSDB ``blocks``, window ``anchor``, the exact truth per window."""

    gpus: int
    blocks: Path
    anchor: float
    truth: dict[int, dict[str, float]]


def window(anchor: float, k: int) -> tuple[float, float]:
    """``(start, end)`` of window ``k``."""
    return anchor + k * WINDOW_S, anchor + (k + 1) * WINDOW_S


def generate(gpus: int, outdir: Path, anchor: float) -> History:
    """Write the OpenMetrics history of ``gpus`` GPUs, backfill it with promtool, and compute each window's truth."""
    outdir.mkdir(parents=True, exist_ok=True)
    start = anchor - WINDOW_S - BEFORE_S
    end = anchor + STEPS * WINDOW_S + AFTER_S
    rng = np.random.default_rng(gpus)
    hosts = max(1, gpus // GPUS_PER_HOST)
    idle = {k: 0.0 for k in range(-1, STEPS)}
    joules = {k: 0.0 for k in range(-1, STEPS)}
    text = outdir / "history.om.txt"
    with text.open("w", encoding="utf-8") as out:
        per_family: dict[str, list[str]] = {name: [] for name, _ in _FAMILIES}
        for g in range(gpus):
            host = f"gpu-node-{g // GPUS_PER_HOST}"
            offset = (g // GPUS_PER_HOST) * INTERVAL_S / hosts
            times = np.arange(start + offset + 0.25, end, INTERVAL_S)
            level = float(rng.uniform(40, 100))
            busy = ((times - anchor) // 30.0).astype(int) % 2 == (g % 2)
            util = np.where(busy, level, 3.0).round()
            power = 70.0 + 6.3 * util
            energy = 9e8 + np.cumsum(power * INTERVAL_S * 1000.0).round()
            labels = (
                f'gpu="{g % GPUS_PER_HOST}",UUID="GPU-{g:08x}",device="nvidia{g % GPUS_PER_HOST}",'
                f'modelName="NVIDIA H100 80GB HBM3",Hostname="{host}",instance="{host}:9400",job="dcgm"'
            )
            values = {
                "DCGM_FI_DEV_GPU_UTIL": util,
                "DCGM_FI_DEV_FB_USED": np.full_like(util, 60000.0),
                "DCGM_FI_DEV_FB_FREE": np.full_like(util, 21559.0),
                "DCGM_FI_DEV_POWER_USAGE": power,
                "DCGM_FI_DEV_GPU_TEMP": (35 + 0.4 * util).round(),
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE": util / 100,
                "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": util / 200,
                "DCGM_FI_PROF_DRAM_ACTIVE": util / 400,
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": energy,
            }
            for name, series in values.items():
                per_family[name].append(
                    "".join(
                        f"{name}{{{labels}}} {v!r} {t:.3f}\n"
                        for v, t in zip(series.tolist(), times.tolist(), strict=True)
                    )
                )
            for k in range(-1, STEPS):
                lo, hi = window(anchor, k)
                inside = util[(times > lo) & (times <= hi)]
                idle[k] += WINDOW_S * (1 - float(inside.mean()) / 100)
                before = energy[times <= lo][-1]
                last = energy[times <= hi][-1]
                joules[k] += (last - before) / 1000
        for name, kind in _FAMILIES:
            out.write(f"# TYPE {name} {kind}\n")
            out.write("".join(per_family[name]))
        out.write("# EOF\n")
    blocks = outdir / "blocks"
    done = subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(text), str(blocks)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"promtool failed ({done.returncode}): {(done.stderr or done.stdout)[-2000:]}")
    text.unlink()
    truth = {k: {"idle_gpu_seconds": idle[k], "joules": joules[k]} for k in idle}
    return History(gpus, blocks, anchor, truth)


def _producer(url: str, by: list[str]) -> Any:
    from otel_bridge.config import MetricConfig, PrometheusConfig
    from otel_bridge.producers import resolve_metrics
    from otel_bridge.producers.promql import PromQLProducer, connect

    client = connect(PrometheusConfig(url=url))
    queries = resolve_metrics([MetricConfig(preset="dcgm", by=by)])
    producer = PromQLProducer(client, queries, scrape_interval_s=INTERVAL_S, recording_rules="off")
    producer.start()
    return producer


def _read(producer: Any, k: int, anchor: float) -> dict[str, float]:
    from otel_bridge.producers import metrics_of
    from otel_bridge.schema import STAT_ATTRIBUTE
    from otel_bridge.window import StepWindow

    start, end = window(anchor, k)
    values: dict[str, float] = {}
    for metric in metrics_of(producer.produce(window=StepWindow(step=k, start=start, end=end))):
        for point in metric.data.data_points:
            attributes = dict(point.attributes or {})
            stat = attributes.pop(STAT_ATTRIBUTE, None)
            suffix = "".join(f"/{v}" for _, v in sorted(attributes.items()))
            values[f"{metric.name}/{stat}{suffix}"] = float(point.value)
    return values


def boundary_cost_us(producer: Any, calls: int = 10_000) -> float:
    """Mean microseconds of ``on_boundary`` (the training thread's share of a step boundary)."""
    t = time.time()
    started = time.perf_counter()
    for i in range(calls):
        producer.on_boundary(t + i * 1e-6)
    return (time.perf_counter() - started) / calls * 1e6


def measure(history: History, backend: Backend, by: list[str]) -> dict[str, Any]:
    """Warm-up on window -1, then the measured windows; medians and the truth comparison (whole run only)."""
    producer = _producer(backend.proxy.url, by)
    try:
        steps = []
        for k in range(-1, STEPS):
            backend.proxy.take()
            t0 = time.perf_counter()
            values = _read(producer, k, history.anchor)
            wall = time.perf_counter() - t0
            records = backend.proxy.take()
            step: dict[str, Any] = {
                "window": k,
                "wall_s": wall,
                "requests": len(records),
                "wire_bytes": sum(r["wire_bytes"] for r in records),
                "decoded_bytes": sum(r["decoded_bytes"] for r in records),
                "series": sum(r["series"] for r in records),
                "keys": len(values),
            }
            if not by:
                truth = history.truth[k]
                got = {
                    "idle_gpu_seconds": values.get("DCGM_FI_DEV_GPU_UTIL:gpus/idle_seconds", math.nan),
                    "joules": values.get("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION:joules/delta", math.nan),
                }
                step["max_rel_error"] = max(abs(got[key] - truth[key]) / abs(truth[key]) for key in truth)
            if k >= 0:
                steps.append(step)
        summary = {
            field: median(s[field] for s in steps)
            for field in ("wall_s", "requests", "wire_bytes", "decoded_bytes", "series", "keys")
        }
        if not by:
            summary["max_rel_error"] = max(s["max_rel_error"] for s in steps)
        summary["boundary_us"] = boundary_cost_us(producer)
        return {"steps": steps, "summary": summary}
    finally:
        producer.close()


def run(quick: bool, workdir: Path, gpus: tuple[int, ...] | None = None) -> dict[str, Any]:
    """Run the suite; write ``results/gpu-scale.json``; return the rows for the README table."""
    counts = gpus or (QUICK_GPUS if quick else GPUS)
    anchor = default_anchor()
    rows: list[dict[str, Any]] = []
    runs: dict[str, Any] = {}
    for n in counts:
        t0 = time.perf_counter()
        history = generate(n, workdir / "data" / f"n{n}", anchor)
        _log.info("gpu-scale: %d GPUs: history ready in %.1f s", n, time.perf_counter() - t0)
        with prometheus_on(history, workdir / f"prometheus-{n}") as backend:  # type: ignore[arg-type]
            for by in ([], ["Hostname"]):
                result = measure(history, backend, by)
                runs[f"{n}/{'+'.join(by) or 'run'}"] = result
                rows.append({"gpus": n, "by": by, **result["summary"]})
                _log.info("gpu-scale: %d GPUs, by %s: %s", n, by, result["summary"])
    whole = {r["gpus"]: r for r in rows if not r["by"]}
    smallest, largest = min(whole), max(whole)
    goals = {
        "bytes_growth_whole_run": whole[largest]["decoded_bytes"] / whole[smallest]["decoded_bytes"],
        "bytes_growth_ok": whole[largest]["decoded_bytes"] <= TARGET_BYTES_GROWTH * whole[smallest]["decoded_bytes"],
        "exact": all(r["max_rel_error"] <= EXACT_REL for r in whole.values()),
        "boundary_us": {n: r["boundary_us"] for n, r in whole.items()},
    }
    payload = {
        "configuration": {
            "gpus": list(counts),
            "gpus_per_host": GPUS_PER_HOST,
            "window_s": WINDOW_S,
            "scrape_interval_s": INTERVAL_S,
            "steps": STEPS,
            "preset": "dcgm",
        },
        "runs": runs,
        "rows": rows,
        "targets": goals,
    }
    write_result(NAME, payload)
    return {"rows": rows, "targets": goals}


def main() -> None:
    """Entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m bench.suite_gpu_scale", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/otel-bridge-gpu-scale"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    result = run(args.quick, args.workdir)
    print(result["targets"])


if __name__ == "__main__":
    main()
