"""The simulated GPUs print what dcgm-exporter and Ray print (families, types, label names of the fixture and of Ray's
source), and their truth is the exact integral of the load they were given."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_bridge.producers.presets import DCGM
from otel_bridge.tools.simulation.gpus import BUSY_WATTS, IDLE_WATTS, GPUFleet
from tests.unit.test_infra_presets_on_captures import declared_types
from tests.unit.test_preset_on_captures import parse

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm" / "metrics-after.txt"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_simulated_dcgm_exporter_serves_the_preset_as_the_real_one_does() -> None:
    fleet = GPUFleet({"gpu-node-0": ["rollout", "rollout"]})
    text = fleet.dcgm_exposition("gpu-node-0").decode()
    real = FIXTURE.read_text()
    simulated, captured = parse(text), parse(real)
    for entry in DCGM:
        name = entry["name"]
        assert declared_types(text)[name] == declared_types(real)[name] == entry["type"], name
        assert {tuple(sorted(labels)) for labels, _ in simulated[name]} == {
            tuple(sorted(labels)) for labels, _ in captured[name]
        }, name


def test_the_simulated_ray_node_labels_each_gpu_as_ray_does() -> None:
    reporter = pytest.importorskip("ray.dashboard.modules.reporter.reporter_agent")
    fleet = GPUFleet({"gpu-node-0": ["trainer"] * 2})
    samples = parse(fleet.ray_exposition("gpu-node-0", "192.0.2.7").decode())
    for name in ("ray_node_gpus_utilization", "ray_node_gram_used"):
        assert len(samples[name]) == 2
        columns = set(reporter.METRICS_GAUGES[name.removeprefix("ray_")].view.columns)
        for labels, _ in samples[name]:
            assert {"GpuIndex", "GpuDeviceName"} <= set(labels)
            assert "GpuIndex" in columns


def test_truth_integrates_the_load_and_the_energy_counter_counts_it_in_millijoules() -> None:
    clock = Clock()
    fleet = GPUFleet({"a": ["rollout"], "b": ["trainer"]}, clock=clock, energy_offset_mj=0.0)
    clock.now = 1002.0
    fleet.set_utilization("rollout", 100.0)  # rollout busy for 3 s of (1000, 1005]
    clock.now = 1005.0
    truth = fleet.truth(1000.0, 1005.0, "rollout")
    assert truth.gpus == 1
    assert truth.idle_gpu_seconds == pytest.approx(2.0)
    assert truth.mean_utilization == pytest.approx(60.0)
    assert truth.joules == pytest.approx(2 * IDLE_WATTS + 3 * BUSY_WATTS)
    energy = parse(fleet.dcgm_exposition("a").decode())["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    assert energy[0][1] == pytest.approx(1000 * truth.joules, abs=1)
    assert fleet.truth(1000.0, 1005.0).gpus == 2
    with pytest.raises(ValueError, match=r"0\.\.100"):
        fleet.set_utilization("trainer", 101.0)
