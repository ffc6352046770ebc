"""The demo's loop has a ``gen`` and an ``update`` phase: its records carry both, with the rollout servers busy
during ``gen`` and nearly idle during ``update``."""

from __future__ import annotations

from pathlib import Path

from otel_bridge.tools.demo import run_demo


def test_demo_records_gen_and_update_phases(tmp_path: Path) -> None:
    result = run_demo(steps=3, out=tmp_path, run_name="demo-phases", step_seconds=1.0, scrape_interval_s=0.25)
    record = result.records[-1].values
    assert record["phase/gen/seconds"] > record["phase/update/seconds"] > 0
    gen = record["phase/gen/rollout/vllm/request_success_total/delta"]
    update = record["phase/update/rollout/vllm/request_success_total/delta"]
    assert gen > update
