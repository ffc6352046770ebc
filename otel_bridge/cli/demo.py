"""``otel-bridge demo``: a small training loop against simulated vLLM servers, with a progress bar and a table."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from otel_bridge.cli.output import progress_bar
from otel_bridge.errors import ConfigError
from otel_bridge.exporters import StepRecord

TABLE_KEYS = (
    "actor/loss",
    "rollout/vllm/generation_tokens_total/delta",
    "rollout/vllm/generation_tokens_total/rate",
    "rollout/vllm/request_success_total/delta",
    "rollout/vllm/num_requests_running/max",
    "rollout/vllm/kv_cache_usage_perc/max",
    "rollout/vllm/prefix_cache_hit_rate",
    "rollout/vllm/time_to_first_token_seconds/p99",
    "rollout/vllm/e2e_request_latency_seconds/mean",
    "phase/gen/seconds",
    "phase/gen/rollout/vllm/generation_tokens_total/rate",
    "phase/gen/rollout/vllm/kv_cache_usage_perc/max",
    "phase/update/seconds",
    "phase/update/rollout/vllm/generation_tokens_total/rate",
    "phase/update/rollout/vllm/kv_cache_usage_perc/max",
    "phase/gen/rollout/DCGM_FI_DEV_GPU_UTIL/gpus/idle_seconds/Hostname.rollout-node",
    "phase/gen/rollout/DCGM_FI_DEV_GPU_UTIL/gpus/idle_seconds/Hostname.trainer-node",
    "phase/update/rollout/DCGM_FI_DEV_GPU_UTIL/gpus/idle_seconds/Hostname.rollout-node",
    "phase/update/rollout/DCGM_FI_DEV_GPU_UTIL/gpus/idle_seconds/Hostname.trainer-node",
    "phase/gen/rollout/DCGM_FI_DEV_GPU_UTIL/mean/Hostname.rollout-node",
    "phase/update/rollout/DCGM_FI_DEV_GPU_UTIL/mean/Hostname.trainer-node",
    "rollout/DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION/joules/delta/Hostname.rollout-node",
    "rollout/DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION/joules/delta/Hostname.trainer-node",
    "phase/outside_seconds",
)


def add_parser(commands: Any) -> None:
    """Register ``demo`` on the sub-command parsers ``commands``."""
    demo = commands.add_parser(
        "demo",
        help="run a small training loop against simulated vLLM servers",
        description="Run a small training loop against two simulated vLLM rollout servers and two simulated "
        "dcgm-exporters (a rollout node's and a trainer node's GPUs) and write the per-step "
        "records (trainer + infrastructure) to TensorBoard and JSONL under OUT/<run name>/. By default the bridge "
        "reads the servers' /metrics itself (scrape path); --prometheus starts a real Prometheus scraping them and "
        "reads through it (PromQL path), then stops it.",
    )
    demo.add_argument("--steps", type=int, default=20, help="training steps (default 20)")
    demo.add_argument("--out", type=Path, default=Path("runs"), help="parent directory of the run (default ./runs)")
    demo.add_argument("--run-name", default=None, help="run folder name (default demo-<timestamp>)")
    where = demo.add_mutually_exclusive_group()
    where.add_argument(
        "--prometheus",
        action="store_true",
        help="start a local Prometheus ($PROMETHEUS_BIN, else /usr/bin/prometheus, else PATH) scraping the simulated "
        "servers, read the infrastructure through it (PromQL path), and stop it at the end",
    )
    demo.add_argument(
        "--prometheus-port", type=int, default=0, help="with --prometheus: its port on 127.0.0.1 (default: a free one)"
    )
    where.add_argument(
        "--prometheus-url",
        default=None,
        help="read infrastructure metrics through this Prometheus (PromQL path); it must scrape the simulated "
        "servers at 127.0.0.1:SIM_PORT and SIM_PORT+1, the simulated dcgm-exporters at SIM_PORT+2 and SIM_PORT+3",
    )
    demo.add_argument(
        "--sim-port", type=int, default=0, help="first port of the simulated servers (default: free ports)"
    )
    demo.add_argument("--step-seconds", type=float, default=1.0, help="duration of one simulated step (default 1.0)")
    demo.add_argument(
        "--scrape-interval",
        type=float,
        default=None,
        help="the Prometheus scrape interval in seconds (PromQL path; default: a fifth of --step-seconds, half of the "
        "shorter phase, so that every phase holds a sample of every gauge)",
    )
    demo.set_defaults(run=run)


def format_table(records: Sequence[StepRecord], keys: Sequence[str] = TABLE_KEYS) -> str:
    """A plain-text table: one row per key, one column per step."""
    if not records:
        return "(no records)"
    width = max(len(k) for k in keys)
    header = "step".ljust(width) + "".join(f"{r.step:>12}" for r in records)
    lines = [header, "-" * len(header)]
    for key in keys:
        cells = "".join(f"{r.values[key]:>12.4g}" if key in r.values else f"{'-':>12}" for r in records)
        lines.append(key.ljust(width) + cells)
    return "\n".join(lines)


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Run the demo; the progress bar redraws in place on a terminal and prints every 5 steps otherwise."""
    from otel_bridge.tools import run_demo

    if args.steps < 1:
        raise ConfigError(f"--steps must be at least 1, got {args.steps}")
    if args.step_seconds <= 0:
        raise ConfigError(f"--step-seconds must be positive, got {args.step_seconds}")
    if args.scrape_interval is not None and args.scrape_interval <= 0:
        raise ConfigError(f"--scrape-interval must be positive, got {args.scrape_interval}")

    interactive = out.isatty()

    def event(line: str) -> None:
        if not args.quiet:
            out.write(line + "\n")
            out.flush()

    def progress(step: int) -> None:
        if args.quiet:
            return
        done = step + 1
        if interactive:
            out.write(f"\rsteps {progress_bar(done, args.steps)}")
            out.flush()
        elif done % 5 == 0 or done == args.steps:
            out.write(f"steps {progress_bar(done, args.steps)}\n")
            out.flush()

    result = run_demo(
        steps=args.steps,
        out=args.out,
        run_name=args.run_name,
        prometheus_url=args.prometheus_url,
        start_prometheus=args.prometheus,
        prometheus_port=args.prometheus_port,
        step_seconds=args.step_seconds,
        sim_port=args.sim_port,
        scrape_interval_s=args.scrape_interval,
        on_step=progress,
        on_event=event,
    )
    if not args.quiet:
        out.write("\n" + format_table(result.records) + "\n\n")
        out.write(f"records: {result.jsonl}\ntensorboard: {tensorboard_command(result.run_dir / 'tensorboard')}\n")
        out.write(f"cli: {cli_hint()}\n")
        out.write(f"plot: otel-bridge plot {result.run_dir} -o {result.run_dir / 'plot.png'}\n")
    return 0


def cli_hint() -> str:
    """How to run ``otel-bridge`` from here: as is when it is on ``PATH``; else the virtualenv's script (e.g.
    ``.venv/bin/otel-bridge`` after ``make demo``) and its ``activate``, runnable as printed."""
    if shutil.which("otel-bridge") or not (Path(sys.executable).parent / "otel-bridge").exists():
        return "otel-bridge --help (docs/cli.md)"
    activate = Path(sys.executable).parent / "activate"
    return (
        f"{_runnable(Path(sys.executable).parent / 'otel-bridge')} --help (or: source {_runnable(activate)}, then "
        "otel-bridge --help)"
    )


def _runnable(script: Path) -> str:
    """``script`` as a shell word that runs from the current directory: relative when it lies below it."""
    relative = os.path.relpath(script)
    if relative.startswith(".."):
        return shlex.quote(str(script))
    return shlex.quote(relative if os.sep in relative else os.path.join(os.curdir, relative))


def tensorboard_command(logdir: Path) -> str:
    """A ``tensorboard --logdir`` command line that runs as printed, from the current directory.

    ``tensorboard`` when it is on ``PATH``; else the script next to this Python (the virtualenv's, e.g.
    ``.venv/bin/tensorboard``, relative when it is under the current directory); else the install command.
    """
    script = Path(sys.executable).parent / "tensorboard"
    if shutil.which("tensorboard"):
        program = "tensorboard"
    elif script.exists():
        program = _runnable(script)
    else:
        return f"pip install tensorboard, then: tensorboard --logdir {shlex.quote(str(logdir))}"
    return f"{program} --logdir {shlex.quote(str(logdir))}"
