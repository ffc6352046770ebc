"""The shipped collector pipelines end to end, with the v0.165 distribution built from collector/manifest.yaml.

Once per Prometheus version (Debian's 2.42 and 3.16 built from its Go module):

- two simulated vLLM servers complete requests from a background thread, across step boundaries, with an exact log
  of what was counted when (:class:`tests.helpers.traffic.Traffic`);
- the collector runs collector/otelcol.yaml: its prometheus receiver scrapes both servers, found through the shipped
  `kubernetes-pods` and `rollout-servers` jobs and their relabel rules; its otlp receiver takes the trainer's OTLP
  metrics and step traces, pushed by the bridge's own meter provider (``otel.otlp``); memory_limiter, resource and
  batch process both pipelines; prometheus_remote_write writes into the real Prometheus (started with
  ``--web.enable-remote-write-receiver``, scraping nothing itself), otlp_http/traces into an OTLP sink of the test
  (:class:`tests.helpers.otlp_sink.OTLPTraceSink`), debug into the collector's log;
- the bridge reads the rollout counters and the trainer's ``otlp:`` counter back through ``prometheus.url``, one
  record per step, for six contiguous steps (each with a ``gen`` and an ``update`` phase).

The test overlay changes what a deploy overlay would change for this machine, and nothing else: Kubernetes discovery
becomes file discovery whose targets carry the labels Kubernetes discovery gives a pod (``__meta_kubernetes_*``: the
annotations, phase, namespace, name, Ray labels), so the shipped relabel rules decide what is scraped (a pod without
the annotation and a pending one are listed too, and must be dropped); k8s_attributes, which needs the Kubernetes API
and which this build lacks (tests/helpers/peers.py), is left out; every listening address becomes a free loopback
port; the Ray job reads a file of the test; the scrape interval is 1 s instead of 15 s (the bridge is told the same,
as collector/otelcol.yaml asks). Receivers, processors, exporters and pipelines are the shipped ones.

What is asserted, against the simulators' log and the trainer's own log of its ``add`` calls:

- every step's deltas (tokens, finished requests, the latency histogram's count, the trainer's tokens) within what
  completed within ``lag + BAND_S`` of either boundary, ``lag`` the record's ``otel_bridge/boundary_lag_s`` (as
  tests/integration/test_boundary_truth.py's ``samples`` path: the collector scrapes on its own schedule, so a
  boundary is represented by the last sample before it);
- the sum over the contiguous steps against the run's truth, exactly: expected to fail on the run's last step
  until the core closes remote-written windows (the reason is :func:`test_run_sums_are_exact`'s mark);
- the labels the pipeline gives the series in Prometheus (relabelled, resource attributes, no scope labels);
- one ``step`` span per step with a ``gen`` and an ``update`` child covering the phases, through the collector (its
  resource processor's attribute on them);
- the collector's log: no entry above info, start to stop.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.metrics import Counter

from otel_bridge import Bridge
from otel_bridge.exporters.record import StepRecord
from tests.conftest import Replica
from tests.deploy.support import OTELCOL_CONFIG, load_yaml
from tests.helpers.collector import CollectorProcess, runnable
from tests.helpers.http_servers import free_port
from tests.helpers.otlp_sink import OTLPTraceSink, Span
from tests.helpers.prometheus_server import PROMETHEUS_VERSIONS, PrometheusServer
from tests.helpers.traffic import Counts, Traffic

pytestmark = pytest.mark.integration

INTERVAL_S = 1.0  # the collector's scrape interval here (15 s shipped), and the bridge's prometheus.scrape_interval_s
OTLP_INTERVAL_S = 0.5  # the bridge's OTLP push interval (otel.otlp.interval_s)
BAND_S = 0.3  # as in test_boundary_truth: a sample's timestamp is taken just before the server renders it
STEPS = 6
STEP_S = 1.4
GEN_S = 0.8  # each step: gen for 0.8 s, then update until 1.3 s, then 0.1 s in no phase
UPDATE_END_S = 1.3
TRAINER_ADDS = ((0.45, 100), (1.0, 50))  # (offset into the step, tokens per step number + 1): trainer.tokens.add
ENVIRONMENT = "e2e"
NAMESPACE = "rl-training"

METRICS: list[dict[str, Any]] = [
    {"name": "vllm:generation_tokens_total", "type": "counter", "stats": ["delta"]},
    {"name": "vllm:request_success_total", "type": "counter", "stats": ["delta"]},
    {"name": "vllm:e2e_request_latency_seconds", "type": "histogram", "stats": ["count"]},
    {"otlp": {"name": "trainer.tokens", "unit": "{token}", "instrument": "counter"}, "stats": ["delta"]},
]
ROLLOUT_KEYS = {
    "rollout/vllm/generation_tokens_total/delta": "tokens",
    "rollout/vllm/request_success_total/delta": "requests",
    "rollout/vllm/e2e_request_latency_seconds/count": "requests",
}
TRAINER_KEY = "rollout/trainer_tokens_total/delta"
#: The counter behind each key, as stored in Prometheus.
STORED = {
    "rollout/vllm/generation_tokens_total/delta": "vllm:generation_tokens_total",
    "rollout/vllm/request_success_total/delta": "vllm:request_success_total",
    "rollout/vllm/e2e_request_latency_seconds/count": "vllm:e2e_request_latency_seconds_count",
    TRAINER_KEY: "trainer_tokens_total",
}
LAG_KEY = "otel_bridge/boundary_lag_s"
#: The most a boundary's sample may lie before it: one scrape (or push) interval, plus the shipped batch processor's
#: timeout for the last step (read before the collector sent what it held), plus a second of slack.
LAG_BOUND_S = INTERVAL_S + float(load_yaml(OTELCOL_CONFIG)["processors"]["batch"]["timeout"].rstrip("s")) + 1.0


@dataclass
class TrainerLog:
    """When the trainer's counter got how much (``time.time()`` right after each ``add``)."""

    adds: list[tuple[float, int]] = field(default_factory=list)

    def truth(self, start: float, end: float) -> int:
        return sum(n for t, n in self.adds if start < t <= end)

    def near(self, t: float, reach: float) -> int:
        return self.truth(t - reach, t + reach)


@dataclass
class Run:
    """One version's run, every process already stopped."""

    version: str
    traffic: Traffic
    trainer: TrainerLog
    records: list[StepRecord]
    spans: list[Span]
    rollout_labels: list[dict[str, str]]
    trainer_labels: list[dict[str, str]]
    collector_problems: list[str]
    run_name: str
    stored: dict[str, list[list[tuple[float, float]]]]
    """Per counter, every series' samples as Prometheus held them once all had arrived (read after the run)."""

    def stored_delta(self, name: str, start: float, end: float) -> float:
        """The window's increase from Prometheus' complete samples: per series the last sample at or before each
        boundary (what a reader that waited for every sample would compute), summed."""
        total = 0.0
        for samples in self.stored[name]:
            before_end = [v for t, v in samples if t <= end]
            before_start = [v for t, v in samples if t <= start]
            total += (before_end[-1] if before_end else 0.0) - (before_start[-1] if before_start else 0.0)
        return total


# -- the test overlay -------------------------------------------------------------------------------------------------


def pod(name: str, *, annotations: dict[str, str], phase: str = "Running") -> dict[str, Any]:
    """A file_sd target group as Kubernetes pod discovery describes a pod (its address without a port, as for a pod
    whose containers declare none: the port comes from the annotation, through the shipped relabel rule)."""
    labels = {
        "__meta_kubernetes_namespace": NAMESPACE,
        "__meta_kubernetes_pod_name": name,
        "__meta_kubernetes_pod_phase": phase,
        "__meta_kubernetes_pod_label_ray_io_cluster": "rl",
        "__meta_kubernetes_pod_label_ray_io_node_type": "worker",
    }
    for key, value in annotations.items():
        labels[f"__meta_kubernetes_pod_annotation_{key}"] = value
    return {"targets": ["127.0.0.1"], "labels": labels}


def local_overlay(workdir: Path, replicas: list[Replica], ports: dict[str, int]) -> dict[str, Any]:
    """collector/otelcol.yaml as this test runs it (see the module docstring for what changes and why)."""
    config = runnable(load_yaml(OTELCOL_CONFIG))
    protocols = config["receivers"]["otlp"]["protocols"]
    protocols["grpc"]["endpoint"] = f"127.0.0.1:{ports['grpc']}"
    protocols["http"]["endpoint"] = f"127.0.0.1:{ports['http']}"
    config["extensions"]["health_check"]["endpoint"] = f"127.0.0.1:{ports['health']}"
    config["extensions"]["pprof"]["endpoint"] = f"127.0.0.1:{ports['pprof']}"
    reader = config["service"]["telemetry"]["metrics"]["readers"][0]["pull"]["exporter"]["prometheus"]
    reader.update(host="127.0.0.1", port=ports["telemetry"])

    scrape = config["receivers"]["prometheus"]["config"]
    interval = f"{int(INTERVAL_S * 1000)}ms"
    scrape["global"].update(scrape_interval=interval, scrape_timeout=interval)
    closed = free_port()  # nothing listens there: a pod the relabel rules must drop is never scraped
    vllm0, vllm1 = (int(r.hostport.rsplit(":", 1)[1]) for r in replicas)
    groups = {
        "kubernetes-pods": [
            pod("vllm-0", annotations={"prometheus_io_scrape": "true", "prometheus_io_port": str(vllm0)}),
            pod("no-annotation", annotations={"prometheus_io_port": str(closed)}),
            pod(
                "pending",
                annotations={"prometheus_io_scrape": "true", "prometheus_io_port": str(closed)},
                phase="Pending",
            ),
        ],
        "rollout-servers": [
            pod(
                "vllm-1",
                annotations={"rollout_otel_bridge_io_scrape": "true", "rollout_otel_bridge_io_port": str(vllm1)},
            ),
        ],
    }
    for job in scrape["scrape_configs"]:
        name = job["job_name"]
        sd_file = workdir / f"{name}.json"
        if name in groups:
            assert job.pop("kubernetes_sd_configs"), name
            sd_file.write_text(json.dumps(groups[name]), encoding="utf-8")
        else:
            assert name == "ray", f"a new scrape job in collector/otelcol.yaml: give it targets here ({name})"
            sd_file.write_text("[]", encoding="utf-8")  # Ray on VMs: no Ray node in this test
            job.pop("file_sd_configs")
        job["file_sd_configs"] = [{"files": [str(sd_file)], "refresh_interval": interval}]
    return config


# -- running it -------------------------------------------------------------------------------------------------------


def wait_until(check: Any, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} after {timeout_s}s")
        time.sleep(0.2)


def sleep_until(t: float) -> None:
    remaining = t - time.time()
    if remaining > 0:
        time.sleep(remaining)


def series_labels(prometheus: PrometheusServer, selector: str) -> list[dict[str, str]]:
    return [dict(entry["metric"]) for entry in prometheus.query(selector)]


def stored_samples(prometheus: PrometheusServer, name: str) -> list[list[tuple[float, float]]]:
    """Every sample of ``name`` in the last two minutes, per series."""
    return [[(float(t), float(v)) for t, v in entry["values"]] for entry in prometheus.query(f"{name}[2m]")]


def add_due(tokens: Counter, trainer: TrainerLog, adds: list[tuple[float, int]], until: float) -> None:
    """Make the trainer's adds planned up to ``until`` (each at its time), taking them off ``adds``."""
    while adds and adds[0][0] <= until:
        at, amount = adds.pop(0)
        sleep_until(at)
        tokens.add(amount)
        trainer.adds.append((time.time(), amount))


def drive(bridge: Bridge, tokens: Counter, traffic: Traffic, trainer: TrainerLog) -> None:
    """Six contiguous steps: step 0 opens with begin_step, steps 1.. end with log() (windows tile the run); traffic
    from BAND_S after the first boundary until right before the last one, so the run's truth is all of it."""
    bridge.begin_step(0)
    traffic.start()
    for step in range(STEPS):
        began = time.time()
        bridge.begin_phase("gen")
        adds = [(began + offset, amount * (step + 1)) for offset, amount in TRAINER_ADDS]
        add_due(tokens, trainer, adds, began + GEN_S)
        sleep_until(began + GEN_S)
        bridge.end_phase("gen")
        bridge.begin_phase("update")
        add_due(tokens, trainer, adds, began + UPDATE_END_S)
        sleep_until(began + UPDATE_END_S)
        bridge.end_phase("update")
        sleep_until(began + STEP_S)
        if step == STEPS - 1:
            traffic.stop()  # nothing is counted after the last boundary
        if step == 0:
            bridge.end_step(0)
        else:
            bridge.log({}, step=step)


def run_version(version: str, workdir: Path) -> Run:
    with ExitStack() as stack:
        replicas = [Replica(), Replica()]
        for replica in replicas:
            stack.callback(replica.stop)
        sink = stack.enter_context(OTLPTraceSink())
        prometheus = PrometheusServer(workdir / "prometheus", version=version, remote_write=True)
        stack.callback(prometheus.stop)
        prometheus.start()
        ports = {name: free_port() for name in ("grpc", "http", "health", "pprof", "telemetry")}
        env = {
            "MY_POD_IP": "127.0.0.1",
            "PROMETHEUS_REMOTE_WRITE_ENDPOINT": f"{prometheus.url}/api/v1/write",
            "OTEL_BRIDGE_ENVIRONMENT": ENVIRONMENT,
            "TRACES_OTLP_HTTP_ENDPOINT": sink.url,
            "HOME": os.environ.get("HOME", "/"),
        }
        collector = CollectorProcess(workdir / "otelcol", local_overlay(workdir, replicas, ports), env, ports["health"])
        stack.callback(collector.stop)
        collector.start()
        wait_until(
            lambda: len(prometheus.query("count_over_time(vllm:generation_tokens_total[1m]) >= 2")) == 2,
            "Prometheus has no remote-written samples of both vLLM servers",
        )

        traffic = Traffic([r.sim for r in replicas], seed=24, start_delay_s=BAND_S)
        stack.callback(traffic.stop)
        trainer = TrainerLog()
        run_name = f"e2e-prometheus-{version}"
        bridge = Bridge.from_config(
            {
                "prometheus": {"url": prometheus.url, "scrape_interval_s": INTERVAL_S},
                "metrics": METRICS,
                "otel": {
                    "otlp": {
                        "enabled": True,
                        "endpoint": f"http://127.0.0.1:{ports['http']}/v1/metrics",
                        "interval_s": OTLP_INTERVAL_S,
                    }
                },
                "trackers": [{"type": "jsonl"}],
                "run": {"name": run_name, "dir": str(workdir / "runs")},
            }
        )
        stack.callback(bridge.close)
        # The trainer's series exists (at 0) before the first boundary, as it would after a warm-up step.
        tokens = bridge.meter("trainer").create_counter("trainer.tokens", unit="{token}")
        tokens.add(0)
        wait_until(
            lambda: bool(prometheus.query("count_over_time(trainer_tokens_total[1m]) >= 2")),
            "Prometheus has no samples of the trainer's OTLP counter",
        )
        drive(bridge, tokens, traffic, trainer)
        bridge.close()
        records = [bridge.record(step) for step in range(STEPS)]
        missing = [step for step, record in enumerate(records) if record is None]
        assert not missing, f"no record for steps {missing}"
        traffic.check_simulators()
        spans = sink.wait_for_spans(lambda found: sum(s.name == "step" for s in found) >= STEPS, timeout_s=30)
        rollout_labels = series_labels(prometheus, "vllm:generation_tokens_total")
        trainer_labels = series_labels(prometheus, "trainer_tokens_total")
        collector.stop()  # flushes what it still holds
        stored = {name: stored_samples(prometheus, name) for name in STORED.values()}
        assert not sink.rejected, sink.rejected
        return Run(
            version,
            traffic,
            trainer,
            [r for r in records if r is not None],
            spans,
            rollout_labels,
            trainer_labels,
            collector.log_problems(),
            run_name,
            stored,
        )
    raise AssertionError("unreachable")  # for mypy: the with block returns or raises


@pytest.fixture(scope="module", params=PROMETHEUS_VERSIONS, ids=[f"prometheus-{v}" for v in PROMETHEUS_VERSIONS])
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Run:
    version: str = request.param
    return run_version(version, tmp_path_factory.mktemp(f"collector-e2e-{version}"))


# -- checks -----------------------------------------------------------------------------------------------------------


def window_of(record: StepRecord) -> tuple[float, float]:
    assert record.window_start is not None, f"step {record.step} has no window start"
    return record.window_start, record.time


def test_every_step_is_within_its_reported_lag(run: Run) -> None:
    """A boundary is represented by the last sample the collector took before it: each step is off by at most what
    completed within ``lag + BAND_S`` of either boundary (lag: the record's own ``otel_bridge/boundary_lag_s``)."""
    errors = []
    for record in run.records:
        start, end = window_of(record)
        lag = record.values.get(LAG_KEY)
        if lag is None or not 0.0 <= lag <= LAG_BOUND_S:
            errors.append(f"step {record.step}: {LAG_KEY} = {lag}, expected within [0, {LAG_BOUND_S} s]")
            continue
        reach = lag + BAND_S
        truth = run.traffic.truth(start, end)
        slack = run.traffic.near(start, reach, reach) + run.traffic.near(end, reach, reach)
        expected: dict[str, tuple[float, float]] = {
            key: (truth.get(what), slack.get(what)) for key, what in ROLLOUT_KEYS.items()
        }
        trainer_slack = run.trainer.near(start, reach) + run.trainer.near(end, reach)
        expected[TRAINER_KEY] = (run.trainer.truth(start, end), trainer_slack)
        for key, (want, allowed) in expected.items():
            value = record.values.get(key)
            if value is None:
                errors.append(f"step {record.step} {key}: missing (truth {want})")
            elif abs(value - want) > allowed:
                errors.append(
                    f"step {record.step} ({end - start:.2f} s, lag {lag:.3f} s) {key}: {value:g} vs truth {want} "
                    f"(off by {value - want:+g}, allowed +-{allowed})"
                )
        missing = record.values.get("otel_bridge/missing_metrics")
        if missing != 0:
            errors.append(f"step {record.step}: otel_bridge/missing_metrics = {missing}")
    total = run.traffic.total()
    assert total.requests > 10 * STEPS, f"too little traffic for the test to mean anything: {total}"
    assert not errors, f"Prometheus {run.version}: {len(errors)} problem(s)\n  " + "\n  ".join(errors)


def sum_errors(run: Run) -> list[str]:
    windows = [window_of(r) for r in run.records]
    assert all(a[1] == b[0] for a, b in itertools.pairwise(windows)), "the windows do not tile"
    union = Counts()
    for start, end in windows:
        union += run.traffic.truth(start, end)
    assert union == run.traffic.total(), "traffic outside the run"
    errors = []
    for key, what in ROLLOUT_KEYS.items():
        total = sum(r.values.get(key, 0.0) for r in run.records)
        if total != union.get(what):
            errors.append(f"sum of {key}: {total:g} vs truth {union.get(what)} ({union.get(what) - total:+g} lost)")
    trainer_total = sum(r.values.get(TRAINER_KEY, 0.0) for r in run.records)
    trainer_truth = sum(n for _, n in run.trainer.adds)
    if trainer_total != trainer_truth:
        errors.append(f"sum of {TRAINER_KEY}: {trainer_total:g} vs truth {trainer_truth}")
    return errors


def readings(run: Run) -> str:
    """Per step and key: the bridge's delta, the same window from Prometheus' complete samples, the truth."""
    lines = []
    for record in run.records:
        start, end = window_of(record)
        truth = run.traffic.truth(start, end)
        cells = []
        for key, name in STORED.items():
            want = run.trainer.truth(start, end) if key == TRAINER_KEY else truth.get(ROLLOUT_KEYS[key])
            cells.append(
                f"{name} {record.values.get(key, float('nan')):g}/{run.stored_delta(name, start, end):g}/{want}"
            )
        lines.append(f"step {record.step} (lag {record.values.get(LAG_KEY, float('nan')):.3f} s): " + ", ".join(cells))
    return "bridge/stored/truth per step:\n  " + "\n  ".join(lines)


def test_run_sums_are_exact(run: Run) -> None:
    """Contiguous steps tile the run: the sums over steps equal what the servers and the trainer counted."""
    errors = sum_errors(run)
    assert not errors, f"Prometheus {run.version}:\n  " + "\n  ".join(errors) + "\n" + readings(run)


def test_series_carry_the_pipeline_labels(run: Run) -> None:
    """Relabelled Kubernetes labels on the scraped series, resource attributes as labels (the resource processor's
    deployment.environment.name on both), none of the excluded ones, no scope labels; the decoy pods were dropped."""
    rollout = {(s.get("job"), s.get("pod")) for s in run.rollout_labels}
    assert rollout == {("kubernetes-pods", "vllm-0"), ("rollout-servers", "vllm-1")}, run.rollout_labels
    for labels in run.rollout_labels:
        assert labels["namespace"] == NAMESPACE, labels
        assert labels["ray_cluster"] == "rl", labels
        assert labels["deployment_environment_name"] == ENVIRONMENT, labels
        assert labels["k8s_pod_name"] == labels["pod"], labels  # the receiver's resource from the pod's meta labels
        assert labels["instance"].startswith("127.0.0.1:"), labels
    (trainer,) = run.trainer_labels
    assert trainer["job"] == "otel-bridge-trainer", trainer
    assert trainer["otel_bridge_run"] == run.run_name, trainer
    assert trainer["deployment_environment_name"] == ENVIRONMENT, trainer
    excluded = ("otel_scope_", "service_", "server_", "url_scheme", "telemetry_sdk_")
    for labels in [*run.rollout_labels, trainer]:
        assert not [name for name in labels if name.startswith(excluded)], labels


def test_step_traces_reach_the_trace_store(run: Run) -> None:
    """One ``step`` span per step over its window, with a ``gen`` and an ``update`` child over the phases, in one
    trace per step, carrying the resource attribute the collector's resource processor adds."""
    steps = {int(s.attributes["otel_bridge.step"]): s for s in run.spans if s.name == "step"}
    assert sorted(steps) == list(range(STEPS)), [(s.name, dict(s.attributes)) for s in run.spans]
    assert sum(s.name == "step" for s in run.spans) == STEPS, "a step span arrived twice"
    for record in run.records:
        span = steps[record.step]
        start, end = window_of(record)
        assert span.start == pytest.approx(start, abs=1e-6), (span, start)
        assert span.end == pytest.approx(end, abs=1e-6), (span, end)
        assert span.resource["deployment.environment.name"] == ENVIRONMENT, span.resource
        assert span.resource["service.name"] == "otel-bridge-trainer", span.resource
        children = sorted((s for s in run.spans if s.parent_span_id == span.span_id), key=lambda s: s.start)
        assert [c.name for c in children] == ["gen", "update"], children
        for child in children:
            assert child.trace_id == span.trace_id
            assert child.attributes["otel_bridge.phase"] == child.name
            assert child.attributes["otel_bridge.step"] == record.step
            assert start <= child.start < child.end <= end, (child, start, end)
        gen, update = children
        assert gen.end - gen.start == pytest.approx(GEN_S, abs=0.1)
        assert record.values["phase/gen/seconds"] == pytest.approx(gen.end - gen.start, abs=1e-6)
        assert record.values["phase/update/seconds"] == pytest.approx(update.end - update.start, abs=1e-6)


def test_the_collector_logged_no_warning_or_error(run: Run) -> None:
    """From start to stop: no deprecated alias or field, no failed scrape, export or discovery."""
    assert not run.collector_problems, f"Prometheus {run.version}: the collector logged\n" + "\n".join(
        run.collector_problems
    )
