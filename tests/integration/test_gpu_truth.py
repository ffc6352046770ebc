"""Where each step's GPU time went, against the simulated GPUs' own truth, with the load changing at every boundary.

Two hosts, each behind its own simulated dcgm-exporter (:class:`otel_bridge.tools.simulation.gpus.GPUFleet`):
``gpu-node-0``'s two GPUs serve the rollout, ``gpu-node-1``'s two the trainer (a separated placement: the role is the
host, so ``by: [Hostname]`` keeps the roles apart). Each step: ``gen`` (rollout GPUs busy, trainer GPUs nearly idle),
a gap in no phase (both light), ``update`` (the other way round). The load changes at every phase boundary: right
after the bridge has its reading of the boundary (``settle``: each exporter served three more scrapes, so the one
sent at the boundary has been answered, as in test_phases.py).

Bounds, exact from the exporters' scrape counts and the fleet's truth (no timing asserts):

- energy (a counter): the reading standing for a boundary ``B`` was rendered in ``[B, settle end]``, a span in which
  the load did not change, so a phase's joules lie between the truth from the end of its first settle to its end and
  the truth from its start to the end of the settle after it;
- mean utilization (the mean of the in-window samples): only the readings rendered during the first settle (``k``:
  the exporter's scrapes then, plus one in flight) can show the previous load; at least ``m`` (its scrapes between
  that settle and the phase's end) show the phase's. So each GPU's mean is off by at most ``k / (k + m)`` of the
  change of load;
- idle GPU-seconds (each sample weighed by the time since the one before it, the first by the time since the
  phase's start): a sample showing the previous load was rendered before the load changed, so it was sent before
  that too, and all of them together weigh at most the time from the phase's start to the change. Each GPU's idle
  seconds are off by at most that time's share of the change of load, whenever the machine let the scrapes happen.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from otel_bridge import Bridge
from otel_bridge.tools.simulation.gpus import BUSY_WATTS, GPUFleet
from otel_bridge.tools.simulation.http import MetricsHTTPServer
from tests.helpers.prometheus_server import PrometheusServer

INTERVAL_S = 0.05
PHASE_S = 1.0
LOAD = {"gen": {"rollout": 90.0, "trainer": 5.0}, "gap": {"rollout": 20.0, "trainer": 20.0}}
LOAD["update"] = {"rollout": 0.0, "trainer": 95.0}
HOSTS = {"rollout": "gpu-node-0", "trainer": "gpu-node-1"}
IDLE = "DCGM_FI_DEV_GPU_UTIL/gpus/idle_seconds"
UTIL = "DCGM_FI_DEV_GPU_UTIL/mean"
JOULES = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION/joules/delta"


@dataclass
class Exporter:
    server: MetricsHTTPServer
    scrapes: int = 0


@pytest.fixture
def fleet() -> Iterator[tuple[GPUFleet, list[Exporter]]]:
    gpus = GPUFleet({HOSTS["rollout"]: ["rollout"] * 2, HOSTS["trainer"]: ["trainer"] * 2})
    exporters: list[Exporter] = []
    lock = threading.Lock()
    try:
        for host in gpus.hosts:

            def render(host: str = host, index: int = len(exporters)) -> bytes:
                with lock:
                    exporters[index].scrapes += 1
                return gpus.dcgm_exposition(host)

            exporter = Exporter(MetricsHTTPServer(render))
            exporters.append(exporter)
            exporter.server.start()
        yield gpus, exporters
    finally:
        for exporter in exporters:
            exporter.server.stop()


def load(gpus: GPUFleet, part: str) -> None:
    for role, percent in LOAD[part].items():
        gpus.set_utilization(role, percent)


@dataclass
class PhaseSpan:
    """One phase as the test saw it: the moment before it began, its start (just inside), the end of the settle after
    it, when its load was set, its end (just inside), the end of the settle after that, and each exporter's scrape
    count at its start, at the settle's end and at its end."""

    entered: float
    began: float
    settled: float
    loaded: float
    ended: float
    after: float
    scrapes: list[tuple[int, int, int]]


def settle(exporters: list[Exporter]) -> None:
    """Until each exporter served three more scrapes: the bridge has its reading of the boundary just made."""
    counts = [e.scrapes for e in exporters]
    while any(e.scrapes < c + 3 for e, c in zip(exporters, counts, strict=True)):
        threading.Event().wait(0.005)


def run_phase(bridge: Bridge, gpus: GPUFleet, exporters: list[Exporter], name: str) -> PhaseSpan:
    """Phase ``name``: its load set once the bridge has its reading of the phase's start, the next part's once it
    has its reading of the end."""
    entered = time.time()
    with bridge.phase(name):
        began = time.time()
        at_start = [e.scrapes for e in exporters]
        settle(exporters)
        settled = time.time()
        at_settled = [e.scrapes for e in exporters]
        load(gpus, name)
        loaded = time.time()
        threading.Event().wait(PHASE_S)
        at_end = [e.scrapes for e in exporters]
        ended = time.time()
    settle(exporters)
    after = time.time()
    load(gpus, "gap")
    return PhaseSpan(
        entered, began, settled, loaded, ended, after, list(zip(at_start, at_settled, at_end, strict=True))
    )


def called(boundary: Callable[[str], None], phase: str) -> tuple[float, float]:
    """Mark a phase's boundary; the times just before and just after: the boundary lies between."""
    before = time.time()
    boundary(phase)
    return before, time.time()


def test_idle_gpu_seconds_and_joules_per_phase_and_role_follow_the_gpus(
    tmp_path: Path, fleet: tuple[GPUFleet, list[Exporter]]
) -> None:
    gpus, exporters = fleet
    config = {
        "metrics": [{"preset": "dcgm", "by": ["Hostname"]}],
        "scrape": {"targets": [e.server.url for e in exporters], "sample_interval_s": INTERVAL_S},
        "naming": {"infra_prefix": ""},
        "run": {"name": "gpu-truth", "dir": str(tmp_path)},
    }
    spans: list[dict[str, PhaseSpan]] = []
    with Bridge.from_config(config) as bridge:
        load(gpus, "gap")
        for step in range(2):
            with bridge.step(step):
                gen = run_phase(bridge, gpus, exporters, "gen")
                threading.Event().wait(PHASE_S / 4)
                update = run_phase(bridge, gpus, exporters, "update")
            spans.append({"gen": gen, "update": update})
    records = [bridge.record(step) for step in range(2)]
    hosts = gpus.hosts
    for record, span in zip(records, spans, strict=True):
        assert record is not None
        values = record.values
        for phase, seen in span.items():
            seconds = values[f"phase/{phase}/seconds"]
            for role, host in HOSTS.items():
                key = f"Hostname.{host}"
                joules = values[f"phase/{phase}/{JOULES}/{key}"]
                lowest = gpus.truth(seen.settled, seen.ended, role).joules - 0.01  # 0.01 J: whole mJ in the text
                highest = gpus.truth(seen.began, seen.after, role).joules + 0.01
                assert lowest <= joules <= highest, (phase, role)
                at_start, at_settled, at_end = seen.scrapes[hosts.index(host)]
                wrong = (at_settled - at_start + 1) / (at_settled - at_start + 1 + at_end - at_settled)
                previous, current = LOAD["gap"][role], LOAD[phase][role]
                change = abs(current - previous)
                mean = values[f"phase/{phase}/{UTIL}/{key}"]
                assert mean == pytest.approx(current, abs=wrong * change + 1e-9), (phase, role)
                idle = values[f"phase/{phase}/{IDLE}/{key}"]
                truth_idle = 2 * seconds * (1 - current / 100)
                before_change = seen.loaded - seen.entered
                assert idle == pytest.approx(truth_idle, abs=2 * before_change * change / 100 + 1e-9), (phase, role)
        # the rollout GPUs idle during update, the trainer GPUs during gen: the bubble each role leaves
        assert values[f"phase/update/{IDLE}/Hostname.gpu-node-0"] > values[f"phase/update/{IDLE}/Hostname.gpu-node-1"]
        assert values[f"phase/gen/{IDLE}/Hostname.gpu-node-1"] > values[f"phase/gen/{IDLE}/Hostname.gpu-node-0"]
        assert values["phase/outside_seconds"] >= PHASE_S / 4


ROLES = {"rollout": [{"Hostname": HOSTS["rollout"]}], "trainer": [{"Hostname": HOSTS["trainer"], "gpu": "0"},
                                                               {"Hostname": HOSTS["trainer"], "gpu": "1"}]}  # fmt: skip


@pytest.mark.integration
@pytest.mark.parametrize("grouping", ["Hostname", "role"])
def test_both_paths_report_the_same_idle_gpu_seconds_and_the_gpus_joules(
    tmp_path: Path, fleet: tuple[GPUFleet, list[Exporter]], grouping: str, prometheus_version: str
) -> None:
    """The PromQL path (a real Prometheus scraping the exporters every 0.5 s: ``avg_over_time`` in the query; the
    counters read by the bridge's boundary scrapes, and, with ``boundary: samples``, from Prometheus' samples) and the
    scrape path read the same GPUs side by side. The load changes only in the gaps between phases, with quiet spells
    of two scrape intervals on both sides, so every sample of a phase window, Prometheus' or the bridge's, holds the
    phase's load: both paths must then report exactly ``GPUs x seconds x (1 - load)`` idle GPU-seconds. Grouped by
    node (``by: [Hostname]``) or by the roles the configuration names (host, and host + GPU index)."""
    gpus, exporters = fleet
    interval_s = 0.5
    targets = [f"127.0.0.1:{e.server.port}" for e in exporters]
    server = PrometheusServer(
        tmp_path / "prometheus", targets, scrape_interval_s=interval_s, version=prometheus_version
    )
    with server as prometheus:
        prometheus.wait_for_samples("DCGM_FI_DEV_GPU_UTIL", count=2)
        common = {"metrics": [{"preset": "dcgm", "by": [grouping]}], "roles": ROLES, "naming": {"infra_prefix": ""}}
        promql = {**common, "prometheus": {"url": prometheus.url, "scrape_interval_s": interval_s}}
        scrape = {**common, "scrape": {"targets": [e.server.url for e in exporters], "sample_interval_s": 0.1}}
        samples = {**promql, "prometheus": {**promql["prometheus"], "boundary": "samples"}}
        bridges = [
            Bridge.from_config({**promql, "run": {"name": "gpu-promql", "dir": str(tmp_path)}}),
            Bridge.from_config({**samples, "run": {"name": "gpu-samples", "dir": str(tmp_path)}}),
            Bridge.from_config({**scrape, "run": {"name": "gpu-scrape", "dir": str(tmp_path)}}),
        ]
        quiet = 2 * interval_s
        # per step, phase and bridge: the times around its begin_phase call and around its end_phase call
        spans: list[dict[str, list[tuple[float, float, float, float]]]] = []
        try:
            for step in range(2):
                span: dict[str, list[tuple[float, float, float, float]]] = {}
                for bridge in bridges:
                    bridge.begin_step(step)
                for phase in ("gen", "update"):
                    load(gpus, phase)
                    threading.Event().wait(quiet)
                    begun = [called(bridge.begin_phase, phase) for bridge in bridges]
                    threading.Event().wait(2 * quiet)
                    ended = [called(bridge.end_phase, phase) for bridge in bridges]
                    span[phase] = [(*b, *e) for b, e in zip(begun, ended, strict=True)]
                    threading.Event().wait(quiet)
                for bridge in bridges:
                    bridge.end_step(step)
                spans.append(span)
        finally:
            for bridge in bridges:
                bridge.close()

    def group(role: str) -> str:
        return f"Hostname.{HOSTS[role]}" if grouping == "Hostname" else f"role.{role}"

    for step, span in enumerate(spans):
        records = [bridge.record(step) for bridge in bridges]
        for index, record in enumerate(records):
            assert record is not None
            values = record.values
            for phase in span:
                seconds = values[f"phase/{phase}/seconds"]
                begin_called, begin_returned, end_called, end_returned = span[phase][index]
                for role in HOSTS:
                    idle = values[f"phase/{phase}/{IDLE}/{group(role)}"]
                    assert idle == pytest.approx(2 * seconds * (1 - LOAD[phase][role] / 100), rel=1e-9), (phase, role)
                    assert values[f"phase/{phase}/{UTIL}/{group(role)}"] == LOAD[phase][role]
                    # the phase's window lies between the calls; each boundary's counter reading within the record's
                    # lag of it (the phases' boundaries included)
                    shortest = gpus.truth(begin_returned, end_called, role)
                    longest = gpus.truth(begin_called, end_returned, role)
                    band = 2 * shortest.gpus * BUSY_WATTS * (values["otel_bridge/boundary_lag_s"] + 0.05)
                    joules = values[f"phase/{phase}/{JOULES}/{group(role)}"]
                    assert shortest.joules - band <= joules <= longest.joules + band, (index, phase, role)
        for phase in span:  # the same share of each phase idle, however long each bridge's own phase window was
            for role in HOSTS:
                key = f"phase/{phase}/{IDLE}/{group(role)}"
                shares = [r.values[key] / r.values[f"phase/{phase}/seconds"] for r in records if r is not None]
                assert shares[0] == pytest.approx(shares[1], rel=1e-9), key
                assert shares[0] == pytest.approx(shares[2], rel=1e-9), key
