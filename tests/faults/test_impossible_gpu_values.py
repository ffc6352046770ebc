"""GPU figures no device can show, served by a real local ``/metrics`` server on the scrape path (issue 37 finding 5).

Before: ``DCGM_FI_DEV_GPU_UTIL`` of 150 or -50 (and AMD's ``gpu_gfx_activity`` of 150, Ray's utilization negative)
passed through as ``mean=150``, ``idle_seconds=-0.5``; ``full_scale: true`` was accepted as 1.0 and gave negative idle
GPU-seconds every step. Now a series with a value outside ``[0, full_scale]`` in a step is left out of that step's
statistics of the key, counted in ``otel_bridge/impossible_values{metric}`` and named in a WARNING; the healthy GPUs'
statistics stay right; a boolean where a number belongs is a ``ConfigError``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from otel_bridge import Bridge, BridgeConfig
from otel_bridge.errors import ConfigError
from otel_bridge.health import IMPOSSIBLE_VALUES
from tests.faults.support import ScrapedPage, base_config, collect_steps, prometheus_scraping
from tests.helpers.backends import BackendDouble

pytestmark = pytest.mark.integration

# The exporters' own labels (dcgm-exporter 4.5.3, AMD's device-metrics-exporter, Ray's agent), two GPUs each.
EXPORTERS = {
    "dcgm": ("DCGM_FI_DEV_GPU_UTIL", 'gpu="{gpu}",UUID="GPU-{gpu}",Hostname="node-a"'),
    "amd": ("gpu_gfx_activity", 'gpu_id="{gpu}",hostname="node-a"'),
    "ray": ("ray_node_gpus_utilization", 'ip="127.0.0.1",GpuIndex="{gpu}",GpuDeviceName="H100"'),
}


class GPUServer(ScrapedPage):
    """Serves one utilization gauge for two GPUs with the values the test sets."""

    def __init__(self, name: str, labels: str) -> None:
        self.name = name
        self.labels = labels
        self.values = [50.0, 50.0]
        super().__init__()

    def page(self) -> str:
        lines = [f"# TYPE {self.name} gauge"]
        lines += [f"{self.name}{{{self.labels.format(gpu=gpu)}}} {value!r}" for gpu, value in enumerate(self.values)]
        return "\n".join(lines) + "\n"

    def set(self, *values: float) -> None:
        with self._lock:
            self.values = list(values)


@pytest.mark.parametrize("preset", sorted(EXPORTERS))
def test_a_gpu_reading_outside_its_range_is_left_out_and_counted(
    tmp_path: Path, preset: str, caplog: pytest.LogCaptureFixture
) -> None:
    name, labels = EXPORTERS[preset]
    gpus = GPUServer(name, labels)
    collecting = BackendDouble()
    scrape = {"targets": [f"127.0.0.1:{gpus.server.port}"], "sample_interval_s": 0, "timeout_s": 2}
    # step 0: both GPUs sane; step 1: GPU 0 reads 150; step 2: GPU 1 reads -50; step 3: both sane again
    plan = [(40.0, 60.0), (150.0, 60.0), (40.0, -50.0), (40.0, 60.0)]
    config = base_config(tmp_path, f"impossible-{preset}", scrape=scrape, metrics=[{"preset": preset}])
    try:
        with (
            caplog.at_level(logging.WARNING, logger="otel_bridge"),
            Bridge.from_config(config, backends=[collecting]) as bridge,
        ):
            for step, values in enumerate(plan):
                gpus.set(*values)  # the values of the whole step: its start's reading is its one gauge sample
                scraped = gpus.scrapes
                with bridge.step(step):
                    gpus.wait_for_scrapes(scraped + 1)
                bridge.collect(step)
            left_out = bridge.health.counter(IMPOSSIBLE_VALUES, {"metric": name})
    finally:
        gpus.server.close()
    records = collecting.by_step()
    mean = next(k for k in records[0] if k.endswith(f"/{name}/mean"))
    busiest = next(k for k in records[0] if k.endswith(f"/{name}/busiest_gpu/max"))
    idle = next(k for k in records[0] if k.endswith(f"/{name}/gpus/idle_seconds"))
    for step in (0, 3):
        assert records[step][mean] == pytest.approx(50.0), records[step]
        assert records[step][busiest] == 60.0
    assert records[1][mean] == 60.0
    assert records[1][busiest] == 60.0
    assert records[2][mean] == 40.0
    assert records[2][busiest] == 40.0
    # idle GPU-seconds: step 0 holds both GPUs (0.6 + 0.4 of the window), step 1 GPU 1 alone (0.4), step 2 GPU 0
    # alone (0.6): never negative, and in the ratio the kept GPUs give
    assert all(values[idle] > 0.0 for values in records.values()), records
    assert records[1][idle] / records[0][idle] == pytest.approx(
        0.4 * collecting.window_seconds(1) / collecting.window_seconds(0)
    )
    assert records[2][idle] / records[0][idle] == pytest.approx(
        0.6 * collecting.window_seconds(2) / collecting.window_seconds(0)
    )
    # one series in each of steps 1 and 2 under the mean's key (the other two entries count under their aliases)
    assert left_out == 2.0
    assert any(name in r.getMessage() and "outside [0, 100]" in r.getMessage() for r in caplog.records)


def test_full_scale_must_be_a_number_not_a_boolean() -> None:
    metric = {"name": "DCGM_FI_DEV_GPU_UTIL", "type": "gauge", "stats": ["idle_seconds"], "full_scale": True}
    with pytest.raises(ConfigError) as caught:
        BridgeConfig.load({"metrics": [metric]}, environ={})
    assert "full_scale" in str(caught.value)
    assert "boolean" in str(caught.value)
    with pytest.raises(ConfigError, match="scale"):
        BridgeConfig.load({"metrics": [{"name": "x", "type": "counter", "scale": False}]}, environ={})
    with pytest.raises(ConfigError, match="timeout_s"):
        BridgeConfig.load({"delivery": {"produce_timeout_s": True}}, environ={})


def test_on_the_promql_path_a_gpu_outside_its_range_is_left_out_and_counted(
    tmp_path: Path, prometheus_version: str, caplog: pytest.LogCaptureFixture
) -> None:
    name, labels = EXPORTERS["dcgm"]
    gpus = GPUServer(name, labels)
    gpus.set(150.0, 60.0)  # GPU 0 reads 150 all along
    with prometheus_scraping(tmp_path / "prometheus", gpus, name, version=prometheus_version, series=2) as prometheus:
        config = base_config(
            tmp_path,
            "impossible-promql",
            prometheus={"url": prometheus.url, "scrape_interval_s": 0.25, "boundary": "samples", "retries": 0},
            metrics=[{"preset": "dcgm"}],
        )
        collecting, bridge = collect_steps(config, 3, seconds=1.0, caplog=caplog)  # four scrapes inside each window
        left_out = bridge.health.counter(IMPOSSIBLE_VALUES, {"metric": name})
    records = collecting.by_step()
    for step in (1, 2):
        values = records[step]
        mean = next(k for k in values if k.endswith(f"/{name}/mean"))
        busiest = next(k for k in values if k.endswith(f"/{name}/busiest_gpu/max"))
        idle = next(k for k in values if k.endswith(f"/{name}/gpus/idle_seconds"))
        assert values[mean] == 60.0, values
        assert values[busiest] == 60.0, values
        assert values[idle] == pytest.approx(0.4 * collecting.window_seconds(step))
    # GPU 0 under the mean's key in every window that held its samples, named in one WARNING
    assert left_out >= 2.0
    assert any(name in r.getMessage() and "outside [0, 100]" in r.getMessage() for r in caplog.records)
