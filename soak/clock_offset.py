"""Soak part 7: trainers whose clock disagrees with Prometheus' (issue 37, clock offset).

Two simulated vLLM replicas, scraped every second by a real Prometheus (the Debian ``prometheus`` binary, as part 1),
complete one request each every 20 ms (a thread of this process, on the real clock). Trainer processes run under
libfaketime (tests/helpers/faketime.py, as tests/faults/test_clock_offset.py) with their wall clock moved: Prometheus
20 s ahead of the first, 5 s behind the second, ``steps`` steps each on the PromQL path (``boundary: samples``),
writing the JSONL tracker. Checks per trainer:

- every record carries ``otel_bridge/clock_offset_s`` within 0.1 s of the offset set;
- every step has its ``vllm:prompt_tokens_total`` delta, and their sum over the run is what the replicas report
  (:meth:`VLLMSimulator.totals`) between the run's outer boundaries on the real clock, within what completed near
  those two (the samples standing for a boundary lie up to ``boundary_lag_s`` before it, plus a band): the interior
  boundaries cancel, so a window asked at the trainer's times instead of Prometheus' would not;
- exactly one WARNING beyond ``prometheus.max_clock_offset_s``;
- delivered == expected in the JSONL, no duplicate, every record with its step's trainer value; exit status 0.

Without libfaketime the part is reported as skipped with the reason.
"""

from __future__ import annotations

import bisect
import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

from soak.accounting import TRAINER_KEY, jsonl_copies, tally
from soak.servers import Replica, generate
from tests.helpers import faketime
from tests.helpers.http_servers import free_port
from tests.helpers.prometheus_server import PrometheusServer

ROOT = Path(__file__).resolve().parent.parent
OFFSETS_S = {"clock_offset_ahead": 20.0, "clock_offset_behind": -5.0}  # Prometheus' clock minus the trainer's
OFFSET_KEY = "otel_bridge/clock_offset_s"
DELTA_KEY = "rollout/vllm/prompt_tokens_total/delta"
LAG_KEY = "otel_bridge/boundary_lag_s"
COUNTER = "vllm:prompt_tokens_total"
OFFSET_TOLERANCE_S = 0.1
BAND_S = 0.3  # a scrape's timestamp lies before the server renders the value (as tests/faults/test_clock_offset.py)
WARNING = "beyond prometheus.max_clock_offset_s"

TRAINER = textwrap.dedent(
    """
    import json, sys, time
    from otel_bridge import Bridge
    config, steps, sleep_s = json.loads(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    with Bridge.from_config(config) as bridge:
        for step in range(steps):
            with bridge.step(step):
                time.sleep(sleep_s)
                bridge.log({{"{key}": float(step)}}, step=step)
    """
)


class Traffic:
    """Every 20 ms one request on each replica; the replicas' own counter total (summed) after each, with its time."""

    def __init__(self, replicas: list[Replica]) -> None:
        self._replicas = replicas
        self.times: list[float] = []
        self.totals: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-clock-traffic", daemon=True)

    def _run(self) -> None:
        tick = 0
        while not self._stop.is_set():
            for replica in self._replicas:
                generate(replica.sim, tick)
            total = sum(replica.sim.totals().get(COUNTER, 0.0) for replica in self._replicas)
            self.times.append(time.time())
            self.totals.append(total)
            tick += 1
            self._stop.wait(0.02)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def at(self, t: float) -> float:
        """The replicas' total as it stood at real time ``t``."""
        i = bisect.bisect_right(self.times, t)
        return self.totals[i - 1] if i else (self.totals[0] if self.totals else 0.0)

    def between(self, start: float, end: float) -> float:
        """What the replicas counted in ``(start, end]``."""
        return self.at(end) - self.at(start)


def _trainer(
    name: str,
    offset_s: float,
    prometheus: PrometheusServer,
    traffic: Traffic,
    library: Path,
    steps: int,
    sleep_s: float,
    run_dir: Path,
) -> dict[str, Any]:
    config = {
        "prometheus": {"url": prometheus.url, "boundary": "samples", "recording_rules": "off", "scrape_interval_s": 1},
        "metrics": [{"name": COUNTER, "type": "counter", "stats": ["delta"]}],
        "run": {"name": name, "dir": str(run_dir)},
        "delivery": {"queue_size": max(100, steps), "close_timeout_s": 60},
    }
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", TRAINER.format(key=TRAINER_KEY), json.dumps(config), str(steps), str(sleep_s)],
        capture_output=True,
        text=True,
        timeout=120 + steps * (sleep_s + 0.1),
        env=faketime.environment(library, offset_s, ROOT),
        cwd=ROOT,
    )
    elapsed = time.monotonic() - started
    path = run_dir / name / "metrics.jsonl"
    jsonl = jsonl_copies(path, steps)
    delivery = tally(jsonl.copies, range(steps))
    records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    records = [r for r in records if isinstance(r, dict)]
    offsets = [r.get(OFFSET_KEY) for r in records]
    deltas = [r.get(DELTA_KEY) for r in records]
    checks: dict[str, bool] = {
        "exit_status_0": done.returncode == 0,
        "delivered_equals_expected_no_duplicates": delivery["delivered"] == delivery["expected"]
        and delivery["duplicates"] == 0,
        "trainer_values_right": jsonl.wrong == 0 and jsonl.invalid == 0,
        "clock_offset_in_every_record": bool(records)
        and all(isinstance(o, float) and abs(o - offset_s) <= OFFSET_TOLERANCE_S for o in offsets),
        "counter_delta_in_every_step": bool(records) and None not in deltas,
        "one_clock_warning": done.stderr.count(WARNING) == 1,
    }
    figures: dict[str, Any] = {"steps": steps, "elapsed_s": round(elapsed, 1), "returncode": done.returncode}
    if records:
        # The run's outer boundaries on the real (Prometheus') clock; the interior boundaries cancel in the sum.
        first, last = records[0]["window_start"] + offset_s, records[-1]["time"] + offset_s
        lag = max(float(r.get(LAG_KEY, 0.0)) for r in records)
        slack = traffic.between(first - lag - BAND_S, first + BAND_S) + traffic.between(
            last - lag - BAND_S, last + BAND_S
        )
        total = sum(d for d in deltas if isinstance(d, (int, float)))
        truth = traffic.between(first, last)
        checks["deltas_sum_to_the_replicas_totals"] = abs(total - truth) <= slack
        figures |= {
            "sum_of_deltas": total,
            "replicas_counted": truth,
            "allowed_near_the_boundaries": slack,
            "max_boundary_lag_s": lag,
            "offsets_seen": sorted({o for o in offsets if isinstance(o, float)})[:5],
            "steps_with_a_nonzero_delta": sum(1 for d in deltas if d),
        }
    else:
        checks["deltas_sum_to_the_replicas_totals"] = False
    return {
        "segment": "clock",
        "offset_s": offset_s,
        "delivery": {"jsonl": delivery},
        "figures": figures,
        "checks": checks,
        **({} if all(checks.values()) else {"stderr_tail": done.stderr[-2000:]}),
    }


def run_clock_offset(steps: int, sleep_s: float, tmp: Path) -> dict[str, dict[str, Any]]:
    """Both trainers against one Prometheus; one entry per offset (or one ``skipped`` entry without libfaketime)."""
    library = faketime.libfaketime()
    if library is None:
        return {"clock_offset": {"segment": "clock", "skipped": faketime.missing_reason()}}
    tmp.mkdir(parents=True, exist_ok=True)
    replicas = [Replica(), Replica()]
    traffic = Traffic(replicas)
    prometheus = PrometheusServer(tmp / "prom", [r.hostport for r in replicas], port=free_port())
    try:
        traffic.start()
        prometheus.start()
        prometheus.wait_for_samples(COUNTER, count=2)
        return {
            name: _trainer(name, offset_s, prometheus, traffic, library, steps, sleep_s, tmp)
            for name, offset_s in OFFSETS_S.items()
        }
    finally:
        prometheus.stop()
        traffic.stop()
        for replica in replicas:
            replica.set_up(False)
