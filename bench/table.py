"""Render the results in ``bench/results/*.json`` as the Markdown tables of bench/README.md.

``python -m bench.table`` prints them (paste them into the README after a run).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from bench.common import RESULTS


def _load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _ms(value: float) -> str:
    return f"{value:.3f}" if value < 10 else f"{value:.0f}"


def render() -> str:
    """All available tables as one Markdown string."""
    out: list[str] = []
    boundary = _load("boundary")
    if boundary:
        conf = boundary["configuration"]
        out += [
            f"**Step-boundary cost** ({conf['steps']} steps, 20 metrics, training-thread time per step = "
            "`with` enter + `log` + `with` exit; baseline = sequential client)",
            "",
            "| proxy latency | otel-bridge p50 / p99 / max (ms) | baseline p50 / p99 / max (ms) | "
            "p99 <= 1 ms | baseline/bridge: p99, max, mean |",
            "|---|---|---|---|---|",
        ]
        for row in boundary["rows"]:
            o, b, r = row["bridge_ms"], row["baseline_ms"], row["ratios"]
            out.append(
                f"| {row['latency']} | {_ms(o['p50'])} / {_ms(o['p99'])} / {_ms(o['max'])} | "
                f"{_ms(b['p50'])} / {_ms(b['p99'])} / {_ms(b['max'])} | {'yes' if row['target_p99_le_1ms'] else 'NO'} "
                f"| {r['baseline_p99_over_bridge_p99']:.2f}x, {r['baseline_max_over_bridge_max']:.0f}x, "
                f"{r['baseline_mean_over_bridge_mean']:.1f}x |"
            )
        out.append("")
    requests = _load("requests")
    if requests:
        out += ["**Requests per step** (at the proxy)", "", "| metrics | requests/step | max in one step | <= 2 |",
                "|---|---|---|---|"]  # fmt: skip
        for row in requests["rows"]:
            ok = "yes" if row["target_le_2"] else "NO"
            out.append(f"| {row['metrics']} | {row['requests_per_step']:.2f} | {row['max_in_one_step']} | {ok} |")
        out.append("")
    scrape = _load("scrape")
    if scrape:
        parse = scrape["parse_only"]
        out += [
            "**Scrape scaling** (20 of the capture's families configured; wall times are medians)",
            "",
            "| endpoints | collection wall (s) | = scrape round + stats (s) | CPU (s) | MB/s | baseline wall (s) | "
            "baseline MB/s | ratio: collection / round only |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for row in scrape["rows"]:
            out.append(
                f"| {row['endpoints']} | {row['collection_wall_s_p50']:.3f} | {row['scrape_round_wall_s_p50']:.3f} + "
                f"{row['stats_wall_s_p50']:.3f} | {row['collection_cpu_s_p50']:.3f} | {row['bridge_mb_s']:.1f} | "
                f"{row['baseline_wall_s_p50']:.3f} | {row['baseline_mb_s']:.1f} | {row['ratio_collection']:.1f}x / "
                f"{row['ratio_round_only']:.1f}x |"
            )
        mb = parse["throughput_mb_s"]
        out += [
            "",
            f"Parse only (in memory, {parse['bytes']} bytes): otel-bridge {mb['otel_bridge_filtered']:.1f} MB/s "
            f"with 20 families wanted, {mb['otel_bridge_all_families']:.1f} MB/s all families; prometheus_client "
            f"{mb['baseline_prometheus_client']:.2f} MB/s: **{parse['ratio_filtered_over_baseline']:.1f}x**.",
            "",
        ]
    memory = _load("memory")
    if memory:
        out += ["**Memory** (RSS growth)", "", "| run | growth (MB) | between steps | note |", "|---|---|---|---|"]
        for row in memory["rows"]:
            note = ""
            if "extrapolated_9000_steps_mb" in row:
                note = (
                    f"slope x 9,000 steps = {row['extrapolated_9000_steps_mb']:.1f} MB (extrapolated); "
                    f"{row['step_s_mean']:.2f} s/step"
                )
            out.append(f"| {row['run']} | {row['growth_mb']:.2f} | {row['between'][0]}-{row['between'][1]} | {note} |")
        out.append("")
    overhead = _load("overhead")
    if overhead:
        out += [
            "**Trainer-side overhead** (per step on the training thread: 100 counter adds + `bridge.log` of 100 keys)",
            "",
            "| case | p50 (µs) | p99 (µs) | max (µs) | p99/p50 | thread CPU p50 (µs) | process CPU/step (ms) | "
            "scrape child CPU/step (ms) | GCs (gen 2) | longest GC (ms) | p99 of steps without a GC (µs) |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in overhead["rows"]:
            t = row["trainer_us"]
            if "gc" not in row:
                out.append(f"| {row['case']} | {t['p50']:.1f} | {t['p99']:.1f} | {t['max']:.1f} | | | | | | | |")
                continue
            g = row["gc"]
            out.append(
                f"| {row['case']} | {t['p50']:.0f} | {t['p99']:.0f} | {t['max']:.0f} | {row['p99_over_p50']:.1f} "
                f"| {row['trainer_thread_cpu_us_p50']:.0f} | {row['process_cpu_ms_per_step_mean']:.2f} "
                f"| {row['child_cpu_ms_per_step_mean']:.2f} | {g['collections']} ({g['by_generation']['2']}) "
                f"| {g['longest_ms']:.1f} "
                f"| {g['p99_us_of_steps_without']:.0f} |"
            )
        allocations = overhead.get("allocations")
        if allocations:
            b = allocations["boundary_bytes"]
            out += [
                "",
                f"Allocated while one boundary runs: p50 {b['p50'] / 1024:.0f} KiB, p99 {b['p99'] / 1024:.0f} KiB; "
                f"retained growth {allocations['retained_growth_bytes_per_step']:.1f} bytes per step (trend over "
                f"{allocations.get('retained_after_steps', 0)} steps after the record store is full; readings within "
                f"{allocations.get('retained_span_bytes', 0) / 1024:.0f} KiB).",
            ]
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    sys.stdout.write(render() + "\n")
