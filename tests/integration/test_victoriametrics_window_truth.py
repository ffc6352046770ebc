"""Window truth on the PromQL path with a real VictoriaMetrics instead of Prometheus (issue 24 point 4).

The boundary-truth harness (:mod:`tests.integration.test_boundary_truth`: two simulated vLLM replicas under continuous
traffic, the truth from the traffic log, the same tolerances) runs against a single-node ``victoria-metrics`` (the
peer built from its Go module) that scrapes the replicas every second with its **default**
``-search.latencyOffset`` (30 s): a client that did not send ``nocache=1`` would read every step from half a minute
before its end. A second VictoriaMetrics scrapes the same replicas with ``-search.maxQueryLen`` = :data:`SPLIT_LEN`,
less than one step's union (~1.9 kB, ~4.2 kB for the run's last step), so each step is read in several parts.

Paths (the bridges run side by side on the same traffic and steps):

- ``auto@vm``: ``prometheus.boundary: auto`` (VictoriaMetrics lists its scrape targets at ``/api/v1/targets``, so the
  bridge scrapes them itself at each boundary);
- ``boundary_scrape@vm``: ``prometheus.boundary: scrape``, the same asked for explicitly;
- ``samples@vm``: ``prometheus.boundary: samples``: VictoriaMetrics' samples bound the windows, each window's
  increase is MetricsQL's ``increase()`` (it starts from the last sample before the range and never extrapolates),
  the run's last window is closed by the samples after its end;
- ``samples@split``: the same against the second VictoriaMetrics (queries in parts under ``-search.maxQueryLen``).

Cases: ``contiguous`` (the last step ends 0.75 of an interval after a scrape), ``outage`` (replica 0's process ends
in step 2 and a new one counts from zero four steps later), ``down`` (replica 1's port closed for two steps, its
counters going on), ``pushed`` (no scrape target: the series are pushed into VictoriaMetrics through
``/api/v1/import/prometheus``, so windows are closed by the arrival of samples after their end). What cannot work as
with Prometheus, otel-bridge's recording rules (VictoriaMetrics has no rules of its own: ``/api/v1/rules`` answers an
empty list unless it proxies a vmalert), and a query part that no ``-search.maxQueryLen`` split can fit, are refused at
start-up with an error that says what to change.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from otel_bridge import Bridge
from otel_bridge.config import MetricConfig, PrometheusConfig
from otel_bridge.errors import ConfigError
from otel_bridge.producers.metric_set import resolve_metrics
from otel_bridge.producers.promql import client_for
from otel_bridge.producers.promql._internal.plan import WindowPlan
from otel_bridge.producers.promql._internal.sources.exact_increase import exact_increases
from otel_bridge.producers.promql._internal.store import VICTORIAMETRICS_FLUSH_S, detect_store
from otel_bridge.window import StepWindow
from tests.conftest import Replica
from tests.helpers.victoriametrics import Importer, VictoriaMetricsServer, import_text
from tests.integration.test_boundary_truth import (
    LAG_KEY,
    LAST_PHASE,
    METRICS,
    Driver,
    Outcome,
    after_prometheus_scrape,
    boundary_slack,
    bridge_config,
    down_errors,
    drive_contiguous,
    end_process,
    lag_errors,
    lag_slack,
    last_step_errors,
    outage_errors,
    report,
    run_case,
    sleep_until,
    start_process,
    start_server,
    step_errors,
    stop_server,
    sum_errors,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.sleeps(20, reason="the boundary-truth cases: up to 10 wall-clock steps of 1.2-1.5 s of live traffic"),
]

INTERVAL_S = 1.0
SPLIT_LEN = 600  # bytes: every part of a union fits (the longest, a last step's, is ~410), no whole union does
SCRAPED_PATHS = ("auto@vm", "boundary_scrape@vm", "samples@vm", "samples@split")
LAGGING = ("samples@vm", "samples@split")
# The User-Agent of each store's scrapes, so the replicas' pages tell the two apart (outage_errors: what the reading of
# a path on one store may hold is bounded by that store's pages, not the other's).
AGENTS = {"vm": "vm_promscrape (vm)", "split": "vm_promscrape (split)"}
PUSHED_PATHS = ("auto@vm", "samples@vm")


@dataclass(frozen=True)
class VMCase:
    """How one case runs: its steps, its paths, and whether VictoriaMetrics scrapes the replicas or is pushed to."""

    drive: Driver
    paths: Sequence[str] = SCRAPED_PATHS
    pushed: bool = False


CASES: dict[str, VMCase] = {
    "contiguous": VMCase(
        drive_contiguous([1.3, 1.3, 1.3, 1.3, 1.3, 1.0], last_end=after_prometheus_scrape(LAST_PHASE))
    ),
    "outage": VMCase(drive_contiguous([1.2] * 10, hooks={2: end_process(0), 6: start_process(0)})),
    "down": VMCase(
        drive_contiguous([1.3, 1.3, 1.5, 1.5, 1.5, 1.3], hooks={2: stop_server(1), 4: start_server(1)}),
        paths=("auto@vm", *LAGGING),
    ),
    "pushed": VMCase(drive_contiguous([1.3, 1.3, 1.3, 1.3, 1.3, 1.0]), paths=PUSHED_PATHS, pushed=True),
}


def run_vm_case(name: str, workdir: Path) -> Outcome:
    """Run case ``name`` with the boundary-truth harness, VictoriaMetrics in Prometheus' place: the store ``vm``
    (default flags) and, when it scrapes the replicas, ``split`` (``-search.maxQueryLen`` = :data:`SPLIT_LEN`)."""
    spec = CASES[name]

    @contextmanager
    def stores(workdir: Path, interval_s: float) -> Iterator[tuple[list[Replica], dict[str, Any]]]:
        replicas: list[Replica] = []
        servers: dict[str, VictoriaMetricsServer] = {}
        importer: Importer | None = None
        try:
            replicas += [Replica(), Replica()]
            hostports = [] if spec.pushed else [r.hostport for r in replicas]
            servers["vm"] = VictoriaMetricsServer(
                workdir / "vm", hostports, scrape_interval_s=interval_s, user_agent=AGENTS["vm"]
            ).start()
            if spec.pushed:
                importer = Importer(servers["vm"].url, [(r.url, r.hostport) for r in replicas], interval_s=interval_s)
                importer.start()
            else:
                servers["split"] = VictoriaMetricsServer(
                    workdir / "vm-split",
                    hostports,
                    scrape_interval_s=interval_s,
                    max_query_len=str(SPLIT_LEN),
                    user_agent=AGENTS["split"],
                ).start()
            for server in servers.values():
                wait_for_series(server, "vllm:generation_tokens_total", pushed=spec.pushed)
            yield replicas, servers
        finally:
            if importer is not None:
                importer.stop()
            for server in servers.values():
                server.stop()
            for replica in replicas:
                replica.stop()

    outcome = run_case(
        name, workdir, interval_s=INTERVAL_S, drive=spec.drive, paths=spec.paths, contiguous=True, stores=stores
    )
    outcome.scrapers.update(AGENTS)
    return outcome


def wait_for_series(
    server: VictoriaMetricsServer, name: str, *, replicas: int = 2, pushed: bool = False, timeout_s: float = 30.0
) -> None:
    """Until each replica's ``name`` has two samples in VictoriaMetrics (and, when it scrapes them, all are up)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        counts = server.query(f"count_over_time({name}[1m])")
        up = [] if pushed else server.query("up")
        sampled = len(counts) == replicas and all(float(c["value"][1]) >= 2 for c in counts)
        if sampled and (pushed or (len(up) == replicas and all(u["value"][1] == "1" for u in up))):
            return
        time.sleep(0.25)
    raise RuntimeError(f"no samples of {name} in {server.url} after {timeout_s}s: {server.log_tail()}")


@pytest.fixture(scope="module")
def outcome_of(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Outcome]:
    """The outcome of a case by name, run once per module."""
    done: dict[str, Outcome] = {}

    def get(name: str) -> Outcome:
        if name not in done:
            done[name] = run_vm_case(name, tmp_path_factory.mktemp(f"vm-{name}"))
        return done[name]

    return get


def truth_errors(outcome: Outcome, path: str) -> list[str]:
    """Every step within its slack (the reported lag on VictoriaMetrics' samples), the run's sum exact."""
    if path in LAGGING or outcome.case == "pushed":
        # Read by arrival, the last step is closed by each series' second push after its end: two intervals away.
        errors = lag_errors(outcome, path, last_intervals=2 if outcome.case == "pushed" else None)
        return errors or step_errors(outcome, path, lag_slack) + sum_errors(outcome, path)
    return step_errors(outcome, path, boundary_slack) + sum_errors(outcome, path)


# -- contiguous steps: exact per step and for the run, the default latency offset notwithstanding ----------------------


@pytest.mark.parametrize("path", SCRAPED_PATHS)
def test_contiguous_steps_match_the_truth(path: str, outcome_of: Callable[[str], Outcome]) -> None:
    outcome = outcome_of("contiguous")
    errors = truth_errors(outcome, path)
    assert not errors, report(outcome, path, errors)


@pytest.mark.parametrize("path", SCRAPED_PATHS)
def test_last_step_counts_the_traffic_until_its_end(path: str, outcome_of: Callable[[str], Outcome]) -> None:
    outcome = outcome_of("contiguous")
    errors = last_step_errors(outcome, path, lagging=path in LAGGING)
    assert not errors, report(outcome, path, errors)


def test_the_default_latency_offset_would_hide_the_steps(tmp_path: Path) -> None:
    """The precondition of the cases above: asked as Prometheus is asked, a VictoriaMetrics with its default
    ``-search.latencyOffset`` answers a query at the present from 30 s before it (an empty answer for a server younger
    than that); the bridge's queries carry ``nocache=1`` and see the newest sample."""
    replica = Replica()
    try:
        with VictoriaMetricsServer(tmp_path, [replica.hostport]) as server:
            wait_for_series(server, "up", replicas=1)
            now = time.time()
            fresh = server.query("timestamp(up)", at=now)
            assert fresh, "no up sample read with nocache=1"
            assert now - float(fresh[0]["value"][1]) < INTERVAL_S + VICTORIAMETRICS_FLUSH_S
            as_is = server.query_as_is("timestamp(up)", at=now)
            assert not as_is or now - float(as_is[0]["value"][1]) >= 25, as_is
            client = client_for(PrometheusConfig(url=server.url))
            detect_store(client)
            (series,) = client.query("timestamp(up)", time=now).series
            assert now - series.samples[-1][1] < INTERVAL_S + VICTORIAMETRICS_FLUSH_S
    finally:
        replica.stop()


# -- -search.maxQueryLen: the step's union in parts, every number exact; a part that cannot fit is refused -------------


def test_the_split_store_gets_every_step_in_several_parts() -> None:
    """The ``split`` path's precondition: with the metrics of these cases, neither a step's union nor the last step's
    fits in :data:`SPLIT_LEN`, and every part of both does."""
    queries = [
        dataclasses.replace(q, kind=m["type"])
        for q, m in zip(resolve_metrics([MetricConfig.model_validate(m) for m in METRICS]), METRICS, strict=True)
    ]
    now = time.time()
    for final in (False, True):
        window = StepWindow(5, now - 1.3, now, final=final)
        plan = WindowPlan(
            queries,
            window,
            increase_queries=[0, 1, 2],
            pad_s=2 * INTERVAL_S,
            closing_s=INTERVAL_S + 0.1,
            report_unread=True,
            watched=["127.0.0.1:65000"],
            counters=functools.partial(
                exact_increases, exact=lambda sel, length, at, present=None: f"increase({sel}[{length}] @ {at})"
            ),
        )
        parts = plan.expressions(SPLIT_LEN)
        assert plan.expression is not None
        assert len(plan.expression) > SPLIT_LEN
        assert len(parts) >= 3, [len(p) for p in parts]
        assert all(len(p.encode()) <= SPLIT_LEN for p in parts), [len(p) for p in parts]


def test_a_part_longer_than_max_query_len_is_refused_at_start_up(tmp_path: Path) -> None:
    """No split fits a part longer than ``-search.maxQueryLen``: the bridge says so at start-up, naming the flag and
    the size it needs, instead of sending what VictoriaMetrics would refuse at every step."""
    replica = Replica()
    try:
        with VictoriaMetricsServer(tmp_path, [replica.hostport], max_query_len="120") as server:
            config = bridge_config("samples@vm", tmp_path, [replica], {"vm": server})  # type: ignore[dict-item]
            with pytest.raises(ConfigError) as raised:
                Bridge.from_config(config).close()
    finally:
        replica.stop()
    message = str(raised.value)
    assert "-search.maxQueryLen" in message, message
    assert "(120 bytes)" in message, message


# -- a restart lasting several steps, a down target: named while unread, sums exact ------------------------------------


@pytest.mark.parametrize("path", SCRAPED_PATHS)
def test_a_target_that_comes_back_is_read_again_and_named_while_it_is_not(
    path: str, outcome_of: Callable[[str], Outcome]
) -> None:
    outcome = outcome_of("outage")
    errors = outage_errors(outcome, path)
    assert not errors, report(outcome, path, errors)


@pytest.mark.parametrize("path", CASES["down"].paths)
def test_down_target_is_reported_and_the_sum_stays_exact(path: str, outcome_of: Callable[[str], Outcome]) -> None:
    outcome = outcome_of("down")
    errors = down_errors(outcome, path)
    assert not errors, report(outcome, path, errors)


# -- no targets known: series pushed into VictoriaMetrics, windows closed by arrivals ---------------------------------


@pytest.mark.parametrize("path", PUSHED_PATHS)
def test_pushed_series_are_read_by_arrival_and_match_the_truth(path: str, outcome_of: Callable[[str], Outcome]) -> None:
    outcome = outcome_of("pushed")
    errors = truth_errors(outcome, path)
    last = outcome.records[path][-1]
    if last.values.get(LAG_KEY) is None:
        errors.append(f"step {last.step}: no {LAG_KEY}")
    assert not errors, report(outcome, path, errors)


@pytest.mark.sleeps(25, reason="pushes every second for 8 s after the end, close() called up to 8.5 s after it")
@pytest.mark.parametrize(
    ("close_after_s", "stopping"),
    [(0.0, False), (3 * 1.0 + VICTORIAMETRICS_FLUSH_S + 1.0, False), (0.0, True)],
    ids=["close", "late_close", "one_stopped"],
)
def test_the_runs_last_window_is_closed_by_a_push_read_after_its_end(
    tmp_path: Path, close_after_s: float, stopping: bool
) -> None:
    """A sample pushed without a timestamp is stamped when it arrives, after its sender read it: the first to arrive
    after the run's last end may hold the counter from before that end (CI: one request and its 13 tokens lost, the
    sum said exact). The last window is closed by the series' second arrival after the end, which its sender read
    after the first had arrived; the lag says how far after the end that one lies. (The bridge's first ask for
    arrivals used to come before VictoriaMetrics made the window's own samples queryable, and closed the window at
    its last sample before the end.) The default ``boundary: auto``, which reads by arrival with no target known.
    ``late_close``: ``close()`` called after the arrival wait's bound (three intervals and the storing delay after the
    end; a trainer saving a checkpoint first, or the second of two bridges closed in turn) reads the same: the wait
    used to give up at once and close the window by the first arrival (CI: samples@vm of the pushed truth case, one
    request and its 10 tokens lost). ``one_stopped``: a second series, pushed until the end and not after, holds the
    wait until its bound; the first is still closed by its second arrival (it used to be closed by its first)."""
    name, push_s = "vllm:generation_tokens_total", 1.0
    second = {0.3: 3, 0.6: 4} if stopping else {}  # the second series' pushes in the window: offset, value

    def push(server: VictoriaMetricsServer, value: float, instance: str = "127.0.0.1:9") -> None:
        text = f'# TYPE {name} counter\n{name}{{model_name="m"}} {value:g}\n'
        import_text(server.url, text, job="push", instance=instance)

    with VictoriaMetricsServer(tmp_path / "vm") as server:
        for _ in range(2):
            push(server, 0)
            if second:
                push(server, 0, "127.0.0.1:10")
            time.sleep(push_s)  # the pusher's schedule
        wait_for_series(server, name, replicas=2 if second else 1, pushed=True)
        config = {
            "metrics": [{"name": name, "type": "counter", "stats": ["delta"]}],
            "run": {"name": "pushed", "dir": str(tmp_path / "runs")},
            "prometheus": {"url": server.url, "scrape_interval_s": push_s},
        }
        with Bridge.from_config(config) as bridge:
            push(server, 0)
            if second:
                push(server, 0, "127.0.0.1:10")
            bridge.begin_step(0)
            start = time.time()
            for offset, value in ((0.3, 10), (0.6, 15)):
                sleep_until(start + offset)
                push(server, value)
                if second:
                    push(server, second[offset], "127.0.0.1:10")
            sleep_until(start + 0.9)
            read_before_the_end = 20  # what the sender read here; 10 more tokens complete until the end
            sleep_until(start + 1.0)
            bridge.end_step(0)
            end = time.time()
            arrivals = [(end + 0.05, read_before_the_end)] + [(end + 0.05 + k * push_s, 30) for k in range(1, 8)]
            sent: list[tuple[float, float]] = []  # (sent, answered) of each push after the end

            def pusher() -> None:
                for t, value in arrivals:
                    sleep_until(t)
                    sent.append((time.time(), 0.0))
                    push(server, value)
                    sent[-1] = (sent[-1][0], time.time())

            sending = threading.Thread(target=pusher, name="test-late-push")
            sending.start()
            try:
                sleep_until(end + close_after_s)
                bridge.close()
            finally:
                sending.join()
        record = bridge.record(0)
    assert record is not None
    # the second series' increase is read from its own samples inside the window (its last, 4), none closing it later
    assert record.values["rollout/vllm/generation_tokens_total/delta"] == 30 + (4 if stopping else 0), record.values
    # VictoriaMetrics stamped the closing push (the first 30) between its sending and its answer (give or take the
    # store clock's measured offset, which the bridge's windows are moved by).
    assert sent[1][0] - end - 0.05 <= record.values[LAG_KEY] <= sent[1][1] - end + 0.05, (record.values, sent, end)


# -- what VictoriaMetrics does not have: otel-bridge's recording rules -------------------------------------------------


def test_required_recording_rules_are_refused_at_start_up(tmp_path: Path) -> None:
    """``prometheus.recording_rules: required`` against VictoriaMetrics: refused at start-up, saying why (it runs no
    rules of its own) and what to use instead."""
    replica = Replica()
    try:
        with VictoriaMetricsServer(tmp_path, [replica.hostport]) as server:
            wait_for_series(server, "vllm:generation_tokens_total", replicas=1)
            config = bridge_config("samples@vm", tmp_path, [replica], {"vm": server})  # type: ignore[dict-item]
            config["prometheus"]["recording_rules"] = "required"
            with pytest.raises(ConfigError) as raised:
                Bridge.from_config(config).close()
    finally:
        replica.stop()
    message = str(raised.value)
    for words in ("VictoriaMetrics", "vmalert", "prometheus.recording_rules: off"):
        assert words in message, message
