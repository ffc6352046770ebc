"""Samples stored after the rule evaluation that stood for their time: the recording-rules path still adds up to the
run exactly when a target restarts in the middle of its traffic (issue 23, the busy node).

Prometheus evaluates a rule at time ``t`` over the samples stored by then. A sample stamped before ``t`` but stored
after the evaluation ran (a scrape that ended late on a busy node, a collector's remote-write batch) is in the raw
series the bridge reads later, but not in that evaluation's sums. Here every sample is remote-written
:data:`LATE_S` after the time it carries, so every evaluation misses the last ones before it, and one of the two
targets restarts while it counts: its new process' first sample (the reset) is stamped in one step and stored after
that step's closing evaluation. Each sample's value is known, so the run's truth is exact.

Samples stored while the rule group evaluates are the other half: an evaluation's records must all hold the same
samples (one snapshot of the store), or a re-read target's share, told from the per-target records, would not be what
the sums held, and the difference would count in two steps (cc28, cc39: a restart on a busy node, the run 1,172 tokens
over). Here a target is remote-written as fast as Prometheus takes it while the rules run every
:data:`SNAPSHOT_INTERVAL_S`, and each evaluation's sum is compared with its per-target sum.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from otel_bridge import Bridge
from otel_bridge.config import MetricConfig, PrometheusConfig
from otel_bridge.producers.metric_set import resolve_metrics
from otel_bridge.producers.promql import connect
from otel_bridge.producers.promql._internal.rules import COUNTED, find_rules, rules_document
from tests.helpers.prometheus_server import PrometheusServer
from tests.helpers.remote_write import push

pytestmark = [
    pytest.mark.integration,
    pytest.mark.sleeps(
        25,
        reason="the outer boundaries quiet for QUIET_S (4 s, past the rule evaluations), steps of STEP_S",
    ),
]

NAME = "rollout_requests_total"
KEY = "rollout/rollout_requests_total/delta"
METRICS = [{"name": NAME, "type": "counter", "stats": ["delta"]}]
INTERVAL_S = 1.0  # the rule group's evaluation interval
LATE_S = 1.5  # every sample is stored this long after the time it carries
TICK_S = 0.25  # a sample of each target every tick
RATE = 20.0  # requests per second while a target counts
STEPS = 10
STEP_S = 1.5
QUIET_S = 4.0  # no counting this long after the first boundary and before the last: the outer boundaries are quiet
SNAPSHOT_INTERVAL_S = 0.05  # the rules' interval while samples arrive without pause
SNAPSHOT_EVALUATIONS = 100  # evaluations compared


class Counters:
    """Two targets' request counters as functions of time: ``a`` counts steadily, ``b`` restarts at ``reset_at``
    (its new process counts from zero, at once: the busy node's kind of restart, with traffic before and after)."""

    def __init__(self, start: float, stop: float, reset_at: float) -> None:
        self.start, self.stop, self.reset_at = start, stop, reset_at

    def _counted(self, since: float, t: float) -> float:
        return float(math.floor(RATE * max(0.0, min(t, self.stop) - since)))

    def value(self, instance: str, t: float) -> float:
        if instance == "b" and t >= self.reset_at:
            return self._counted(self.reset_at, t)
        return self._counted(self.start, t)

    def total(self) -> float:
        """Everything read of both targets: ``b``'s old process until its last sample before the restart (what it
        counted after that is lost to every reader), its new one from zero."""
        end = self.stop + 1.0
        last_read = math.ceil(self.reset_at / TICK_S) * TICK_S - TICK_S  # samples are stamped on the TICK_S grid
        return self.value("a", end) + self.value("b", last_read) + self.value("b", end)


@pytest.fixture
def late_writer(
    tmp_path: Path, prometheus_version: str
) -> Iterator[tuple[PrometheusServer, Callable[[Counters], None]]]:
    """A Prometheus running otel-bridge's rules every :data:`INTERVAL_S`, and ``start(counters)``: a thread
    remote-writing both targets' samples :data:`LATE_S` after their time, every :data:`TICK_S`, until the test ends."""
    rules = rules_document(resolve_metrics([MetricConfig.model_validate(m) for m in METRICS]), INTERVAL_S)
    server = PrometheusServer(
        tmp_path / "prometheus",
        scrape_interval_s=INTERVAL_S,
        remote_write=True,
        rules=rules,
        version=prometheus_version,
    )
    server.start()
    stop = threading.Event()
    errors: list[BaseException] = []
    threads: list[threading.Thread] = []

    def write(counters: Counters) -> None:
        stamp = math.floor(time.time() / TICK_S) * TICK_S - LATE_S
        try:
            while not stop.is_set():
                wait = stamp + LATE_S - time.time()
                if wait > 0:
                    stop.wait(wait)
                series = [
                    ({"__name__": NAME, "job": "rollout", "instance": instance}, counters.value(instance, stamp))
                    for instance in ("a", "b")
                ]
                push(server.url, series, at=stamp)
                stamp += TICK_S
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    def start(counters: Counters) -> None:
        thread = threading.Thread(target=write, args=(counters,), name="late-writer", daemon=True)
        thread.start()
        threads.append(thread)

    try:
        yield server, start
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        server.stop()
    assert not errors, errors


def test_a_restart_whose_samples_are_stored_late_keeps_the_run_exact(
    late_writer: tuple[PrometheusServer, Callable[[Counters], None]], tmp_path: Path
) -> None:
    server, start_writing = late_writer
    first = time.time() + 4.0  # the first boundary, after the rules have evaluated the targets' history
    last = first + STEPS * STEP_S
    counters = Counters(start=first + QUIET_S, stop=last - QUIET_S, reset_at=first + 4 * STEP_S + 0.7)
    start_writing(counters)
    config = {
        "metrics": METRICS,
        "run": {"name": "late", "dir": str(tmp_path / "runs")},
        "prometheus": {
            "url": server.url,
            "scrape_interval_s": INTERVAL_S,
            "boundary": "samples",
            "recording_rules": "required",
        },
    }
    time.sleep(max(0.0, first - time.time()))
    with Bridge.from_config(config) as bridge:
        bridge.begin_step(0)
        for step in range(STEPS):
            time.sleep(max(0.0, first + (step + 1) * STEP_S - time.time()))
            if step == 0:
                bridge.end_step(0)
            else:
                bridge.log({}, step=step)
        bridge.close()
        records = [bridge.record(step) for step in range(STEPS)]
    assert all(record is not None for record in records)
    deltas = [record.values.get(KEY, 0.0) for record in records if record is not None]
    assert min(deltas) >= 0.0, deltas
    assert sum(deltas) == counters.total(), f"steps {deltas}: {sum(deltas)} of {counters.total()}"


def test_every_record_of_one_rule_evaluation_holds_the_same_samples(tmp_path: Path, prometheus_version: str) -> None:
    # The vLLM preset's rules beside the written counter's, as a rollout run has them: evaluated in between.
    queries = resolve_metrics([MetricConfig.model_validate(m) for m in [*METRICS, {"preset": "vllm"}]])
    server = PrometheusServer(
        tmp_path / "prometheus",
        scrape_interval_s=SNAPSHOT_INTERVAL_S,
        remote_write=True,
        rules=rules_document(queries, SNAPSHOT_INTERVAL_S),
        version=prometheus_version,
    )
    labels = {"__name__": NAME, "job": "rollout", "instance": "a"}
    stop = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:  # one sample per request, each one more, stamped just before it is sent
        value, stamp_ms = 0.0, 0
        try:
            with requests.Session() as session:
                while not stop.is_set():
                    stamp_ms = max(int(time.time() * 1000) - 20, stamp_ms + 1)
                    value += 1.0
                    push(server.url, [(labels, value)], at=stamp_ms / 1000, session=session)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    with server:
        writer = threading.Thread(target=write, name="snapshot-writer", daemon=True)
        writer.start()
        try:
            deadline = time.monotonic() + 60.0
            while time.monotonic() < deadline and not errors:  # until the rules evaluated the writes often enough
                done = server.query(f"count_over_time({COUNTED}[1m])")
                if done and float(done[0]["value"][1]) > SNAPSHOT_EVALUATIONS:
                    break
                stop.wait(SNAPSHOT_INTERVAL_S)
        finally:
            stop.set()
            writer.join(timeout=10)
        assert not errors, errors
        client = connect(PrometheusConfig(url=server.url))
        try:
            ruleset, problems = find_rules(queries, client.rule_groups())
        finally:
            client.close()
        assert ruleset is not None, problems
        (summed,) = ruleset.records[0]

        def evaluations(selector: str) -> dict[float, float]:
            (series,) = server.query(f"{selector}[1m]")
            return {float(t): float(v) for t, v in series["values"]}

        sums, counted = evaluations(summed), evaluations(COUNTED)
    both = sorted(set(sums) & set(counted))
    assert len(both) > SNAPSHOT_EVALUATIONS, (len(sums), len(counted))
    apart = [(t, sums[t], counted[t]) for t in both if sums[t] != counted[t]]
    assert not apart, f"{len(apart)} of {len(both)} evaluations summed other samples than they counted: {apart[:5]}"
