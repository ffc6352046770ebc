"""Issue 14 finding 21 on the PromQL path: the health key of a target Prometheus stops scraping goes with it.

``otel_bridge/scrape_errors/instance.<host:port>`` keys also come from Prometheus' own ``up`` (its failed scrapes of
each target during the step). A target removed from Prometheus' service discovery used to keep its key in every
later record, forever; the scrape path's ``set_targets`` already forgot its own. A real Prometheus reads its targets
from a ``file_sd`` file the test rewrites, as an orchestrator does when a replica goes away.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from otel_bridge import Bridge
from otel_bridge.health import SCRAPE_ERRORS
from tests.conftest import Replica
from tests.faults.support import base_config
from tests.helpers.backends import BackendDouble
from tests.helpers.http_servers import free_port
from tests.helpers.prometheus_server import PrometheusServer

pytestmark = pytest.mark.integration

STEP_S = 0.3  # shorter than the 1 s scrape interval, as fast training steps are
SETTLE_STEPS = 2  # steps after Prometheus dropped the target within which its key must be gone
WAIT_S = 30.0  # bounds each wait for Prometheus (its scrape manager applies target changes every 5 s)


def write_sd(path: Path, targets: list[str]) -> None:
    """Prometheus' file_sd targets, replaced atomically (as an orchestrator writes them)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([{"labels": {"job": "rollout"}, "targets": targets}]), encoding="utf-8")
    tmp.replace(path)


def key(hostport: str) -> str:
    return f"{SCRAPE_ERRORS}/instance.{hostport.replace(':', '_')}"


def up(prometheus: PrometheusServer) -> dict[str, float]:
    """``{instance: up}`` of the targets Prometheus scrapes now (a dropped target's ``up`` is stale, so absent)."""
    return {r["metric"]["instance"]: float(r["value"][1]) for r in prometheus.query("up")}


def targets(prometheus: PrometheusServer) -> list[tuple[str, str, str]]:
    """Prometheus' active targets as ``(instance, health, last error)``: what it scrapes, when a wait on it fails."""
    answer = requests.get(f"{prometheus.url}/api/v1/targets", params={"state": "active"}, timeout=5).json()
    return [(t["labels"].get("instance", "?"), t["health"], t["lastError"]) for t in answer["data"]["activeTargets"]]


@pytest.mark.parametrize("boundary", ["samples", "scrape"])
def test_a_target_prometheus_no_longer_scrapes_loses_its_health_key(
    tmp_path: Path, replicas: list[Replica], boundary: str, prometheus_version: str
) -> None:
    replica = replicas[0]
    # Nothing listens on these two: every scrape of them fails, so each gets a scrape_errors key from ``up``.
    leaving, staying = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    sd_file = tmp_path / "rollout.json"
    write_sd(sd_file, [replica.hostport, leaving, staying])
    job: dict[str, Any] = {
        "job_name": "rollout",
        "file_sd_configs": [{"files": [str(sd_file)], "refresh_interval": "1s"}],
        "scrape_timeout": "1s",
    }
    prometheus = PrometheusServer(
        tmp_path / "prom", extra_scrape_configs=[job], scrape_interval_s=1.0, version=prometheus_version
    )
    collecting = BackendDouble()
    config = base_config(
        tmp_path,
        f"departed-{boundary}",
        prometheus={"url": prometheus.url, "scrape_interval_s": 1, "retries": 0, "timeout_s": 2, "boundary": boundary},
        metrics=[{"name": "vllm:generation_tokens_total", "type": "counter"}],
    )
    records: dict[int, dict[str, float]] = {}
    try:
        prometheus.start()
        deadline = time.monotonic() + WAIT_S
        # the replica scraped twice (a counter's first window has a baseline), the other two failing
        while up(prometheus) != {replica.hostport: 1.0, leaving: 0.0, staying: 0.0} or not prometheus.query(
            "count_over_time(vllm:generation_tokens_total[1m]) >= 2"
        ):
            assert time.monotonic() < deadline, f"Prometheus does not scrape the three targets: {up(prometheus)}"
            time.sleep(0.2)
        with Bridge.from_config(config, backends=[collecting]) as bridge:
            step = 0

            def run_step() -> dict[str, float]:
                nonlocal step
                with bridge.step(step):
                    replica.sim.complete_request(10, 5 + step, ttft_s=0.01, e2e_s=0.1, queue_s=0.0, itl_s=0.01)
                    time.sleep(STEP_S)
                    bridge.log({"actor/loss": float(step)}, step=step)
                records[step] = bridge.collect(step)
                step += 1
                return records[step - 1]

            while not {key(leaving), key(staying)} <= set(run_step()):
                assert step < WAIT_S / STEP_S, "Prometheus' failed scrapes never reached a record"
            before = records[step - 1][key(staying)]
            write_sd(sd_file, [replica.hostport, staying])  # the replica behind `leaving` is gone for good
            deadline = time.monotonic() + WAIT_S
            while leaving in up(prometheus):
                assert time.monotonic() < deadline, (
                    f"Prometheus still scrapes {leaving}: {up(prometheus)}; the file says "
                    f"{sd_file.read_text(encoding='utf-8')}; its targets: {targets(prometheus)}; its log: "
                    f"{prometheus.log_tail()}"
                )
                run_step()
            dropped = step  # the first step that begins after Prometheus stopped scraping it
            while step < dropped + SETTLE_STEPS + 3:
                run_step()
    finally:
        prometheus.stop()
    assert sorted(collecting.by_step()) == list(range(step))
    assert [collecting.by_step()[s]["actor/loss"] for s in range(step)] == [float(s) for s in range(step)]
    late = range(dropped + SETTLE_STEPS, step)
    assert [s for s in late if key(leaving) in records[s]] == [], (
        f"{key(leaving)} still in the records of steps {dropped + SETTLE_STEPS}..{step - 1}, after Prometheus "
        f"dropped the target before step {dropped}"
    )
    # the target that stays keeps its key, still counting
    assert all(records[s][key(staying)] >= before for s in late)
    assert records[step - 1][key(staying)] > before
