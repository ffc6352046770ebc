"""Soak part 2: the scrape path with a trickling target and a redirecting one among healthy replicas.

Four targets: two simulated vLLM replicas, a :class:`TricklingTarget` that sends 1 byte every 2 s during its window
and a :class:`RedirectingTarget` that answers with bad redirects (a loop, a dead port, a malformed ``Location``) during
its own. Whatever they do, every step's record must reach every backend with the trainer's value, once (issue 14
points 1 and 2); the infrastructure readings may be marked missing or late, as documented. The soak also measures
every step boundary (at most ``2 x delivery.max_block_s`` plus slack) and the step queue's length (at most
``delivery.queue_size``).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from otel_bridge import Bridge
from otel_bridge.health import DROPPED_INFRA, SCRAPE_ERRORS
from soak.accounting import TRAINER_KEY, CountingBackend, FlakyBackend, complete, jsonl_copies, tally
from soak.servers import MisbehavingTarget, RedirectingTarget, Replica, TricklingTarget, generate

_log = logging.getLogger("soak.scrape")

METRICS = [
    {"name": "vllm:generation_tokens_total", "type": "counter"},
    {"name": "vllm:num_requests_running", "type": "gauge"},
]
QUEUE_SIZE = 5
MAX_BLOCK_S = 0.05
BOUNDARY_SLACK_S = 0.25  # scheduling on a loaded 2-core machine


def _queue_length(bridge: Bridge) -> int:
    """How many steps wait in the bridge's step queue (a private attribute: the soak checks the bound)."""
    return len(bridge._jobs._jobs)


def run_scrape_faults(steps: int, step_sleep_s: float, tmp: Path) -> dict[str, dict[str, Any]]:
    """Run ``steps`` steps on the scrape path; the trickle covers [15%, 40%) of them, the redirects [45%, 70%)."""
    trickle_window = (steps * 3 // 20, steps * 8 // 20)
    redirect_window = (steps * 9 // 20, steps * 14 // 20)
    replicas = [Replica(), Replica()]
    trickling, redirecting = TricklingTarget(), RedirectingTarget()
    counting, flaky = CountingBackend(steps), FlakyBackend(steps)
    config = {
        "startup": "degrade",
        "scrape": {
            "targets": [r.hostport for r in replicas] + [trickling.url, redirecting.url],
            "timeout_s": 0.5,
            "sample_interval_s": 0.5,
        },
        "metrics": METRICS,
        "run": {"name": "scrape", "dir": str(tmp)},
        "delivery": {
            "queue_size": QUEUE_SIZE,
            "max_block_s": MAX_BLOCK_S,
            "produce_timeout_s": 1.0,  # longer than one request's deadline: a round with a trickling target fits
            "backend_retries": 3,
            "backend_backoff_s": 0,
            "close_timeout_s": 10,
        },
    }
    faulty: dict[str, tuple[tuple[int, int], MisbehavingTarget]] = {
        "trickle": (trickle_window, trickling),
        "redirect": (redirect_window, redirecting),
    }
    errors: dict[tuple[str, bool], float] = {}
    longest = {"trickle": 0.0, "redirect": 0.0, "other": 0.0}
    queue_max = 0
    try:
        bridge = Bridge.from_config(config, backends=[counting, flaky])
        started = time.monotonic()
        for step in range(steps):
            for phase, (window, target) in faulty.items():
                if step in (window[0], window[1]):  # the fault starts or ends: count its target's scrape errors so far
                    errors[phase, step == window[1]] = bridge.health.counter(
                        SCRAPE_ERRORS, {"instance": target.hostport}
                    )
                    (target.faulty.set if step == window[0] else target.faulty.clear)()
            began = time.monotonic()
            with bridge.step(step):
                for sim in (replicas[0].sim, replicas[1].sim, trickling.sim, redirecting.sim):
                    generate(sim, step)
                worked = time.monotonic()
                if step_sleep_s > 0:
                    time.sleep(step_sleep_s)
                bridge.log({TRAINER_KEY: float(step), "trainer/loss": 1.0 / (1 + step)}, step=step)
                slept = time.monotonic() - worked
            blocked = time.monotonic() - began - slept
            phase = (
                "trickle"
                if trickle_window[0] <= step < trickle_window[1]
                else "redirect"
                if redirect_window[0] <= step < redirect_window[1]
                else "other"
            )
            longest[phase] = max(longest[phase], blocked)
            queue_max = max(queue_max, _queue_length(bridge))
        report = bridge.close()
        elapsed = time.monotonic() - started
        dropped_infra = bridge.health.counter(DROPPED_INFRA)
    finally:
        for replica in replicas:
            replica.set_up(False)
        trickling.close()
        redirecting.close()
    jsonl = jsonl_copies(tmp / "scrape" / "metrics.jsonl", steps)
    copies = {"jsonl": jsonl.copies, "counting": counting.copies, "flaky": flaky.copies}
    statuses = {status.backend: status for status in report.backends}
    bound_s = 2 * MAX_BLOCK_S + BOUNDARY_SLACK_S
    tail = range(redirect_window[1], steps)

    def entry(window: tuple[int, int], phase: str, instance_errors: float, **figures: Any) -> dict[str, Any]:
        steps_in = range(*window)
        delivery = {name: tally(c, steps_in) for name, c in copies.items()}
        checks = {
            "delivered_equals_expected_no_duplicates": complete(delivery, copies),
            "trainer_values_right": counting.wrong == flaky.wrong == jsonl.wrong == 0,
            "boundary_within_2x_max_block_s": longest[phase] <= bound_s,
            "queue_within_queue_size": queue_max <= QUEUE_SIZE,
            "fault_seen_as_scrape_errors": instance_errors > 0,
        }
        observations = {"healthy_replicas_read_during_the_fault": any(counting.with_infra[s] for s in steps_in)}
        return {
            "segment": "scrape",
            "windows": [list(window)],
            "delivery": delivery,
            "figures": {
                "scrape_errors_in_window": instance_errors,
                "records_marked_infra_missing": sum(counting.infra_missing[s] for s in steps_in),
                "records_with_infra_keys": sum(counting.with_infra[s] for s in steps_in),
                "longest_boundary_s": round(longest[phase], 3),
                "boundary_bound_s": bound_s,
                "queue_max": queue_max,
                "queue_size": QUEUE_SIZE,
                **figures,
            },
            "checks": checks,
            "observations": observations,
        }

    whole = {name: tally(c, range(steps)) for name, c in copies.items()}
    run_checks = {
        "delivered_equals_expected_no_duplicates": complete(whole, copies),
        "report_complete": report.complete,
        "jsonl_valid_in_step_order": jsonl.invalid == jsonl.out_of_order == 0 and jsonl.ends_with_newline,
        "report_matches_jsonl": statuses["jsonl"].delivered == jsonl.lines,
        "boundary_within_2x_max_block_s": longest["other"] <= bound_s,
        "no_record_silently_without_infra": counting.silently_without_infra == 0,
    }
    run_observations = {"infra_back_after_the_faults": any(counting.with_infra[s] for s in tail) if tail else True}
    results = {
        "trickling_target": entry(
            trickle_window, "trickle", errors["trickle", True] - errors["trickle", False], trickle_s_per_byte=2.0
        ),
        "redirecting_target": entry(
            redirect_window,
            "redirect",
            errors["redirect", True] - errors["redirect", False],
            redirects_sent=dict(redirecting.sent),
        ),
        "scrape_run": {
            "segment": "scrape",
            "windows": [[0, steps]],
            "delivery": whole,
            "figures": {
                "elapsed_s": round(elapsed, 1),
                "dropped_infra_steps": dropped_infra,
                "records_with_infra_keys": sum(counting.with_infra),
                "records_marked_infra_missing": sum(counting.infra_missing),
                "longest_boundary_outside_faults_s": round(longest["other"], 3),
                "first_step_with_infra_after_the_faults": next((s for s in tail if counting.with_infra[s]), None),
            },
            "checks": run_checks,
            "observations": run_observations,
        },
    }
    _log.info("scrape part: %d steps in %.1f s", steps, elapsed)
    return results
