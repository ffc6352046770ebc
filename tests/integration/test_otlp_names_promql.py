"""The trainer's metrics, configured by their OpenTelemetry names, read per step from a real Prometheus.

Two trainer ranks push ``trainer.tokens`` (a ``Counter`` of ``{token}``), ``trainer.step.duration`` (a ``Histogram`` in
``s``) and ``trainer.gpu.utilization`` (a ``Gauge`` of unit ``1``) to the collector, which remote-writes them into
Prometheus as ``trainer_tokens_total``, ``trainer_step_duration_seconds_{bucket,sum,count}`` and
``trainer_gpu_utilization_ratio``, one series per rank (``collector/otelcol.yaml``: resource attributes as labels).
Here a pusher does what the collector does: every 0.25 s it remote-writes both ranks' series, under those names
(written out, not computed) and without metadata, to a real Prometheus (``--web.enable-remote-write-receiver``). The
bridge is configured with ``otlp:`` entries and must report the sum over both ranks of what happened in each step.

Each step is quiet for longer than the push interval around its changes, so the last sample before a boundary is the
state at the boundary (as in ``test_promql_pipeline.py``).

With ``add_metric_suffixes: false`` on the exporter the collector writes ``trainer_tokens``,
``trainer_step_duration_{bucket,sum,count}`` and ``trainer_gpu_utilization`` instead (otlptranslator's simple case), and
entries that say so read those.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests

from otel_bridge import Bridge
from tests.conftest import Replica
from tests.helpers.prometheus_server import PrometheusServer
from tests.helpers.remote_write import push

pytestmark = pytest.mark.sleeps(
    12, reason="QUIET_S of quiet (longer than the scrape interval) around each step's pushes"
)

QUIET_S = 1.5
STEPS = 3
BOUNDS = (0.1, 0.5, 1.0)
PUSH_INTERVAL_S = 0.25

OTLP_METRICS: list[dict[str, Any]] = [
    {"otlp": {"name": "trainer.tokens", "unit": "{token}", "instrument": "counter"}},
    {"otlp": {"name": "trainer.step.duration", "unit": "s", "instrument": "histogram"}, "stats": ["count", "sum"]},
    {
        "otlp": {"name": "trainer.gpu.utilization", "unit": "1", "instrument": "gauge"},
        "stats": ["last"],
        "agg": "max",
        "alias": "trainer_gpu_utilization_busiest_rank",
    },
]


# The names the collector writes, as an exporter with suffixes (the default) and with add_metric_suffixes: false
# writes them: (counter, histogram, gauge).
SUFFIXED = ("trainer_tokens_total", "trainer_step_duration_seconds", "trainer_gpu_utilization_ratio")
BARE = ("trainer_tokens", "trainer_step_duration", "trainer_gpu_utilization")


class TrainerSeries:
    """What the collector writes into Prometheus: one series per rank, named as the collector names them."""

    def __init__(self, names: tuple[str, str, str] = SUFFIXED) -> None:
        self.counter, self.histogram, self.gauge = names
        self.lock = threading.Lock()
        self.tokens = {0: 0.0, 1: 0.0}
        self.utilization = {0: 0.0, 1: 0.0}
        self.durations: dict[int, list[float]] = {0: [], 1: []}

    def series(self) -> list[tuple[Mapping[str, str], float]]:
        out: list[tuple[Mapping[str, str], float]] = []
        with self.lock:
            for rank in (0, 1):
                labels = {"otel_bridge_rank": str(rank), "service_name": "trainer", "job": "trainer"}
                out.append(({**labels, "__name__": self.counter}, self.tokens[rank]))
                out.append(({**labels, "__name__": self.gauge}, self.utilization[rank]))
                observed = self.durations[rank]
                bucket = {**labels, "__name__": f"{self.histogram}_bucket"}
                for bound in BOUNDS:
                    out.append(({**bucket, "le": str(bound)}, float(sum(1 for v in observed if v <= bound))))
                out.append(({**bucket, "le": "+Inf"}, float(len(observed))))
                out.append(({**labels, "__name__": f"{self.histogram}_sum"}, sum(observed)))
                out.append(({**labels, "__name__": f"{self.histogram}_count"}, float(len(observed))))
        return out

    def step(self, step: int) -> None:
        """Both ranks' work of one step, all at once."""
        with self.lock:
            self.tokens[0] += 100 * (step + 1)
            self.tokens[1] += 50 * (step + 1)
            self.utilization[0] = 0.5 + 0.1 * step
            self.utilization[1] = 0.25
            self.durations[0].append(0.3)
            self.durations[1].extend([0.05, 0.8])


@contextmanager
def collector(prometheus: PrometheusServer, trainer: TrainerSeries) -> Iterator[None]:
    """Remote-writes the trainer's series every PUSH_INTERVAL_S until the block ends (bounded by its stop event)."""
    stop = threading.Event()
    failures: list[BaseException] = []

    def run() -> None:
        while not stop.is_set():
            try:
                push(prometheus.url, trainer.series())
            except (requests.RequestException, RuntimeError) as exc:  # reported below, not lost in the thread
                failures.append(exc)
                return
            stop.wait(PUSH_INTERVAL_S)

    thread = threading.Thread(target=run, name="remote-write", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)
        assert not failures, failures


def wait_for_pushes(prometheus: PrometheusServer, counter: str = SUFFIXED[0], timeout_s: float = 30.0) -> None:
    """Until Prometheus holds at least two pushes of the trainer's counter (no scrape target: no `up` to wait for)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if prometheus.query(f"count_over_time({counter}[1m]) >= 2"):
            return
        time.sleep(0.1)
    raise AssertionError(f"no remote-written samples of {counter} after {timeout_s}s")


def run_steps(config: dict[str, Any], trainer: TrainerSeries, replicas: list[Replica]) -> list[dict[str, Any]]:
    with Bridge.from_config(config) as bridge:
        for step in range(STEPS):
            with bridge.step(step):
                time.sleep(QUIET_S)
                trainer.step(step)
                for replica in replicas:
                    replica.sim.complete_request(
                        prompt_tokens=10,
                        generation_tokens=7 * (step + 1),
                        ttft_s=0.1,
                        e2e_s=0.5,
                        queue_s=0.01,
                        itl_s=0.02,
                    )
                time.sleep(QUIET_S)
    return [json.loads(line) for line in (bridge.run_dir / "metrics.jsonl").read_text().splitlines()]


def check_trainer_keys(records: list[dict[str, Any]], names: tuple[str, str, str] = SUFFIXED) -> None:
    counter, histogram, _ = names
    assert [record["step"] for record in records] == list(range(STEPS))
    for step, record in enumerate(records):
        assert record[f"rollout/{counter}/delta"] == pytest.approx(150 * (step + 1)), record
        assert record[f"rollout/{histogram}/count"] == pytest.approx(3), record
        assert record[f"rollout/{histogram}/sum"] == pytest.approx(1.15), record
        assert record["rollout/trainer_gpu_utilization_busiest_rank/last"] == pytest.approx(0.5 + 0.1 * step), record
        assert record["otel_bridge/missing_metrics"] == 0, record


def trainer_only_records(
    tmp_path: Path, names: tuple[str, str, str], metrics: list[dict[str, Any]], prometheus_version: str
) -> None:
    """The trainer's series remote-written under ``names`` into a Prometheus that scrapes nothing, read by ``metrics``
    per step (boundary auto: no target serves them); the records must hold both ranks' sums."""
    trainer = TrainerSeries(names)
    prometheus = PrometheusServer(tmp_path / "prometheus", remote_write=True, version=prometheus_version)
    try:
        prometheus.start()
        with collector(prometheus, trainer):
            wait_for_pushes(prometheus, names[0])
            config: dict[str, Any] = {
                "prometheus": {"url": prometheus.url, "scrape_interval_s": 1.0},
                "metrics": metrics,
                "trackers": [{"type": "jsonl"}],
                "run": {"name": "otlp-names", "dir": str(tmp_path / "runs")},
            }
            records = run_steps(config, trainer, [])
    finally:
        prometheus.stop()
    check_trainer_keys(records, names)


@pytest.mark.integration
def test_trainer_metrics_by_otel_name_are_read_per_step(tmp_path: Path, prometheus_version: str) -> None:
    trainer_only_records(tmp_path, SUFFIXED, OTLP_METRICS, prometheus_version)


@pytest.mark.integration
def test_without_suffixes_the_entries_read_the_bare_names(tmp_path: Path, prometheus_version: str) -> None:
    """The exporter set to add_metric_suffixes: false writes bare names; entries with the same setting read them (and
    entries without it would look for the suffixed names, which do not exist)."""
    metrics = [{**entry, "otlp": {**entry["otlp"], "add_metric_suffixes": False}} for entry in OTLP_METRICS]
    trainer_only_records(tmp_path, BARE, metrics, prometheus_version)


@pytest.mark.integration
def test_remote_written_trainer_metrics_beside_scraped_rollout_servers(
    tmp_path: Path, replicas: list[Replica], prometheus_version: str
) -> None:
    """Prometheus scrapes the vLLM replicas itself (so boundary auto scrapes them at each boundary) while the trainer's
    series arrive by remote write, from no target: both are read per step."""
    trainer = TrainerSeries()
    prometheus = PrometheusServer(
        tmp_path / "prometheus",
        [r.hostport for r in replicas],
        scrape_interval_s=1.0,
        remote_write=True,
        version=prometheus_version,
    )
    try:
        prometheus.start()
        with collector(prometheus, trainer):
            prometheus.wait_for_samples("vllm:generation_tokens_total", count=2)
            wait_for_pushes(prometheus)
            config: dict[str, Any] = {
                "prometheus": {"url": prometheus.url, "scrape_interval_s": 1.0},
                "metrics": [{"name": "vllm:generation_tokens_total", "type": "counter"}, *OTLP_METRICS],
                "trackers": [{"type": "jsonl"}],
                "run": {"name": "mixed", "dir": str(tmp_path / "runs")},
            }
            records = run_steps(config, trainer, replicas)
    finally:
        prometheus.stop()
    check_trainer_keys(records)
    for step, record in enumerate(records):
        assert record["rollout/vllm/generation_tokens_total/delta"] == pytest.approx(2 * 7 * (step + 1)), record
