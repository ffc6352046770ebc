"""Who holds the trainer process' interpreter lock while the scrape path is busy (issue 18 point 1).

``python -m bench.gil_profile [--steps N]`` runs the overhead suite's busy loop (``BUSY_ENDPOINTS`` endpoints serving
the real vLLM capture, ``BUSY_STEP_WORK_S`` steps) once with ``scrape.isolation: thread`` and once with ``process``,
each under ``py-spy record --gil`` (samples of whichever thread holds the GIL; ``pip install py-spy``), and prints per
case the training thread's p50/p99, the number of GIL-holding samples, and their shares by thread and by what the
thread was doing. Raw py-spy output goes to ``bench/results/gil-<isolation>.txt``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from bench.common import REPO, RESULTS

_LOOP = """
import json, sys, tempfile
from bench.common import capture_servers
from bench.suite_overhead import BUSY_ENDPOINTS, BUSY_SAMPLE_S, BUSY_STEP_WORK_S, _trainer_loop
with capture_servers(BUSY_ENDPOINTS) as capture:
    scrape = {"targets": capture.targets, "sample_interval_s": BUSY_SAMPLE_S, "isolation": sys.argv[1]}
    config = {"trackers": [{"type": "jsonl"}], "run": {"name": "gil", "dir": tempfile.mkdtemp()},
              "metrics": [{"preset": "vllm"}], "scrape": scrape}
    result = _trainer_loop(config, int(sys.argv[2]), BUSY_STEP_WORK_S)
print(json.dumps({k: result[k] for k in ("trainer_us", "p99_over_p50")}))
"""

_WORK = (
    ("parse_exposition", "parsing /metrics pages"),
    ("MetricsEndpoint.fetch", "HTTP reads (requests, urllib3)"),
    ("compute_stats", "window statistics"),
    ("series (", "window statistics"),
    ("snapshot_instruments", "the SDK's collect at a boundary"),
)


def _what(stack: str) -> str:
    return next((what for marker, what in _WORK if marker in stack), "other")


def _thread(frame: str) -> str:
    if ": " not in frame:  # py-spy names a thread once Python's threading does: the main thread's imports
        return "MainThread (imports, before the loop)"
    return re.sub(r"(_| )\d+$", "", frame.split(": ", 1)[1].strip())


def profile(isolation: str, steps: int) -> dict[str, object]:
    """One case under py-spy: the loop's figures and the GIL-holding samples by thread and by work."""
    raw = RESULTS / f"gil-{isolation}.txt"
    RESULTS.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:
        script.write(_LOOP)
    command = ["py-spy", "record", "-r", "200", "--threads", "--gil", "-f", "raw", "-o", str(raw), "--"]
    run = subprocess.run(
        [*command, sys.executable, script.name, isolation, str(steps)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=True,
    )
    figures = json.loads(next(line for line in run.stdout.splitlines() if line.startswith("{")))
    by_thread: collections.Counter[str] = collections.Counter()
    by_work: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        thread = _thread(stack.split(";", 1)[0])
        by_thread[thread] += int(count)
        by_work[f"{thread}: {_what(stack)}"] += int(count)
    total = sum(by_thread.values())
    return {
        **figures,
        "gil_samples": total,
        "by_thread": {k: v / total for k, v in by_thread.most_common()},
        "by_work": {k: v / total for k, v in by_work.most_common()},
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m bench.gil_profile", description=__doc__)
    parser.add_argument("--steps", type=int, default=120)
    args = parser.parse_args(argv)
    if shutil.which("py-spy") is None:
        sys.stderr.write("py-spy is not on PATH: pip install py-spy\n")
        return 2
    results = {isolation: profile(isolation, args.steps) for isolation in ("thread", "process")}
    (RESULTS / "gil_profile.json").write_text(json.dumps(results, indent=1))
    for isolation, result in results.items():
        t = result["trainer_us"]
        assert isinstance(t, dict)
        sys.stdout.write(
            f"== scrape.isolation: {isolation}: training thread p50 {t['p50']:.0f} us, p99 {t['p99']:.0f} us "
            f"(p99/p50 {result['p99_over_p50']:.1f}); {result['gil_samples']} GIL-holding samples\n"
        )
        shares = result["by_work"]
        assert isinstance(shares, dict)
        for what, share in list(shares.items())[:8]:
            sys.stdout.write(f"  {share * 100:5.1f}%  {what}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
