"""Soak part 6: scrape targets come and go through Ray's service-discovery file while steps outrun the worker (issue 37
finding 8).

Two simulated vLLM replicas stay for the whole run; three more (churners) join and leave: every ``period`` steps the
service-discovery file the bridge reads (``scrape.targets: auto``, ``refresh_interval_s`` 0.1) is rewritten, as Ray
does (atomically), with the healthy pair and the next set of churners. A churner that joins is started first (a node
comes up, then Ray lists it); one that leaves is stopped as it is unlisted (a node that died). Steps take
``step_sleep_s``, far less than a target's scrape, so the worker assembles a backlog of windows whose boundaries lie
before the targets that join meanwhile.

Checked: delivered == expected with no duplicate on every backend; no step waited for a target that was not there at
its boundaries (no "no reading of ... came within" WARNING: every target here answers at once or refuses at once, so
such a wait can only be for a target that joined after the boundary or left before it); the healthy targets' readings
arrive on time (every record has the infrastructure keys, none says they are late or dropped, and no record arrives
more than ``delivery.produce_timeout_s`` after its step ended); a departed target is forgotten at once (no record
assembled :data:`FORGET_S` after it was unlisted, while it stays away, carries a key naming it: health keys are those
of when a record is assembled).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from otel_bridge import Bridge
from otel_bridge.exporters.record import StepRecord
from soak.accounting import TRAINER_KEY, CountingBackend, FlakyBackend, complete, jsonl_copies, tally
from soak.scrape_faults import METRICS
from soak.servers import Replica, generate

_log = logging.getLogger("soak.churn")

REFRESH_S = 0.1
PRODUCE_TIMEOUT_S = 5.0
SCRAPE_TIMEOUT_S = 1.0
FORGET_S = 2 * REFRESH_S + 0.3
"""After a target is unlisted (and stopped: its scrapes are refused at once), by when every record's window began
after the bridge had forgotten it: two refreshes of the file, scheduling slack."""
CHURN: tuple[list[int], ...] = ([0], [0, 1], [1, 2], [], [2], [0, 2])
"""Which churners are listed in each period, in turn: joins, leaves, both at once, none."""


class ArrivingBackend(CountingBackend):
    """A healthy backend that also notes when each step's record arrived and which of its keys name an instance."""

    name = "arriving"

    def __init__(self, steps: int) -> None:
        super().__init__(steps)
        self.arrived = [0.0] * steps
        self.instance_keys: list[tuple[str, ...]] = [()] * steps

    def write(self, record: StepRecord) -> None:
        super().write(record)
        if 0 <= record.step < len(self.arrived):
            self.arrived[record.step] = time.time()
            self.instance_keys[record.step] = tuple(k for k in record.values if "/instance." in k)


class _LateWarnings(logging.Handler):
    """Collects the scrape path's "no reading of ... came within" WARNINGs (``messages``) and the worker's about a
    step's sources that missed ``delivery.produce_timeout_s`` (``deadline``)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []
        self.deadline: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "no reading of" in message:
            self.messages.append(message[:300])
        elif "within delivery.produce_timeout_s" in message:
            self.deadline.append(message[:300])


def _write_sd(path: Path, hostports: list[str]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([{"labels": {"job": "ray"}, "targets": hostports}]))
    tmp.replace(path)  # atomically, as Ray does


def _key_of(hostport: str) -> str:
    return f"/instance.{hostport.replace(':', '_')}"


def run_target_churn(steps: int, step_sleep_s: float, tmp: Path) -> dict[str, dict[str, Any]]:
    """Run ``steps`` steps on the scrape path with the targets changing every ``steps // 10`` steps (at least 40)."""
    tmp.mkdir(parents=True, exist_ok=True)
    period = max(steps // 10, 40)
    healthy, churners = [Replica(), Replica()], [Replica(), Replica(), Replica()]
    for churner in churners:
        churner.set_up(False)
    sd_file = tmp / "prom_metrics_service_discovery.json"
    _write_sd(sd_file, [r.hostport for r in healthy])
    arriving, flaky = ArrivingBackend(steps), FlakyBackend(steps)
    config = {
        "startup": "degrade",
        "scrape": {
            "targets": "auto",
            "ray_service_discovery_file": str(sd_file),
            "refresh_interval_s": REFRESH_S,
            "timeout_s": SCRAPE_TIMEOUT_S,
            "sample_interval_s": 0.5,
        },
        "metrics": METRICS,
        "run": {"name": "churn", "dir": str(tmp)},
        "delivery": {
            "queue_size": 1000,  # the trainer runs ahead of the worker: a backlog of windows
            "produce_timeout_s": PRODUCE_TIMEOUT_S,
            "backend_retries": 3,
            "backend_backoff_s": 0,
            "close_timeout_s": 60,
        },
    }
    late = _LateWarnings()
    logging.getLogger("otel_bridge").addHandler(late)
    ended = [0.0] * steps
    listed: list[tuple[float, set[int]]] = []  # (when the file was written, the churners it listed)
    try:
        bridge = Bridge.from_config(config, backends=[arriving, flaky])
        started = time.monotonic()
        current: set[int] = set()
        for step in range(steps):
            if step % period == 0 and step > 0:
                wanted = set(CHURN[(step // period - 1) % len(CHURN)])
                for index in wanted - current:
                    churners[index].set_up(True)
                _write_sd(sd_file, [r.hostport for r in healthy] + [churners[i].hostport for i in sorted(wanted)])
                listed.append((time.time(), wanted))
                for index in current - wanted:
                    churners[index].set_up(False)
                current = wanted
            with bridge.step(step):
                for replica in healthy + [churners[i] for i in current]:
                    generate(replica.sim, step)
                if step_sleep_s > 0:
                    time.sleep(step_sleep_s)
                bridge.log({TRAINER_KEY: float(step)}, step=step)
            ended[step] = time.time()
        report = bridge.close()
        elapsed = time.monotonic() - started
    finally:
        logging.getLogger("otel_bridge").removeHandler(late)
        for replica in healthy + churners:
            replica.set_up(False)
    jsonl = jsonl_copies(tmp / "churn" / "metrics.jsonl", steps)
    copies = {"jsonl": jsonl.copies, "arriving": arriving.copies, "flaky": flaky.copies}
    delivery = {name: tally(c, range(steps)) for name, c in copies.items()}
    lateness = [arriving.arrived[s] - ended[s] for s in range(steps) if arriving.copies[s]]
    checked, remembered = _remembered(arriving, listed, [c.hostport for c in churners])
    churner_keys = tuple(_key_of(c.hostport) for c in churners)
    naming = sum(1 for keys in arriving.instance_keys if any(c in k for k in keys for c in churner_keys))
    checks = {
        "delivered_equals_expected_no_duplicates": complete(delivery, copies),
        "trainer_values_right": arriving.wrong == flaky.wrong == jsonl.wrong == 0,
        "report_complete": report.complete,
        "no_wait_for_a_target_not_there": not late.messages,
        "healthy_readings_in_every_record": sum(arriving.with_infra) == steps and sum(arriving.infra_missing) == 0,
        "records_on_time": max(lateness, default=0.0) <= PRODUCE_TIMEOUT_S,
        "departed_targets_forgotten": checked > 0 and not remembered,
    }
    entry = {
        "segment": "churn",
        "windows": [[0, steps]],
        "delivery": delivery,
        "figures": {
            "elapsed_s": round(elapsed, 1),
            "period_steps": period,
            "target_changes": len(listed),
            "latest_record_s": round(max(lateness, default=0.0), 3),
            "records_with_infra_keys": sum(arriving.with_infra),
            "records_marked_infra_missing": sum(arriving.infra_missing),
            "late_warnings": late.messages[:5],
            "produce_deadline_warnings": late.deadline[:5],
            "records_naming_a_churner": naming,
            "records_checked_for_departed_keys": checked,
            "departed_keys_remembered": remembered[:5],
        },
        "checks": checks,
    }
    _log.info("target churn part: %d steps in %.1f s", steps, elapsed)
    return {"target_churn": entry}


def _remembered(
    backend: ArrivingBackend, listed: list[tuple[float, set[int]]], hostports: list[str]
) -> tuple[int, list[str]]:
    """How many records arrived :data:`FORGET_S` after a churner was unlisted and before it was listed again (a
    record's health keys are those of when the worker assembled it, which in a backlog is well after its window), and
    ``step: key`` for each of their keys that still names it."""
    checked = 0
    found: list[str] = []
    before: set[int] = set()
    for position, (when, wanted) in enumerate(listed):
        until = listed[position + 1][0] if position + 1 < len(listed) else float("inf")
        for index in before - wanted:
            key = _key_of(hostports[index])
            for step, arrived in enumerate(backend.arrived):
                if when + FORGET_S <= arrived < until and backend.copies[step]:
                    checked += 1
                    found.extend(f"{step}: {k}" for k in backend.instance_keys[step] if key in k)
        before = wanted
    return checked, found
