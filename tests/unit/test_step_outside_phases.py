"""A step with phases records its own seconds and the seconds no phase covered, beside each phase's seconds."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from otel_bridge import Bridge


def test_the_step_record_says_how_long_the_step_ran_outside_its_phases(tmp_path: Path) -> None:
    with Bridge.from_config({"run": {"name": "outside", "dir": str(tmp_path)}}) as bridge:
        with bridge.step(0):
            time.sleep(0.02)  # before any phase
            with bridge.phase("gen"):
                time.sleep(0.02)
            time.sleep(0.02)  # between phases
            with bridge.phase("update"):
                time.sleep(0.02)
        record = bridge.collect(0)
        full = bridge.record(0)
        with bridge.step(1):  # no phase: no phase keys at all
            pass
        plain = bridge.collect(1)
    assert full is not None
    assert full.window_start is not None
    assert record["phase/step_seconds"] == pytest.approx(full.time - full.window_start, abs=1e-6)
    phases = record["phase/gen/seconds"] + record["phase/update/seconds"]
    assert record["phase/outside_seconds"] == pytest.approx(record["phase/step_seconds"] - phases, abs=1e-9)
    assert record["phase/outside_seconds"] >= 0.04  # the two sleeps outside a phase, at least
    assert not [key for key in plain if key.startswith("phase/")]
