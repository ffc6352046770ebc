"""The demo's loop has a ``gen`` and an ``update`` phase: its records carry both, with the rollout servers busy
during ``gen`` and nearly idle during ``update``."""

from __future__ import annotations

from pathlib import Path

from otel_bridge.tools.demo import run_demo
from otel_bridge.tools.simulation.gpus import BUSY_WATTS, IDLE_WATTS


def test_demo_records_gen_and_update_phases(tmp_path: Path) -> None:
    result = run_demo(steps=3, out=tmp_path, run_name="demo-phases", step_seconds=1.0, scrape_interval_s=0.25)
    record = result.records[-1].values
    assert record["phase/gen/seconds"] > record["phase/update/seconds"] > 0
    gen = record["phase/gen/rollout/vllm/request_success_total/delta"]
    update = record["phase/update/rollout/vllm/request_success_total/delta"]
    assert gen > update


def test_demo_records_where_the_gpu_time_went_per_phase_and_role(tmp_path: Path) -> None:
    """The simulated rollout GPUs work during ``gen`` and wait during ``update``; the trainer's the other way round."""
    result = run_demo(steps=3, out=tmp_path, run_name="demo-gpus", step_seconds=1.0)
    record = result.records[-1].values
    idle = "rollout/DCGM_FI_DEV_GPU_UTIL/gpus/idle_seconds/Hostname"
    assert record[f"phase/update/{idle}.rollout-node"] > record[f"phase/gen/{idle}.rollout-node"]
    assert record[f"phase/gen/{idle}.trainer-node"] > record[f"phase/update/{idle}.trainer-node"]
    for role in ("rollout-node", "trainer-node"):
        joules = record[f"rollout/DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION/joules/delta/Hostname.{role}"]
        seconds = record["phase/step_seconds"]
        assert 2 * IDLE_WATTS * seconds * 0.9 < joules < 2 * BUSY_WATTS * seconds * 1.1
    assert record["phase/outside_seconds"] >= 0
