"""Step windows against the truth while requests keep finishing across step boundaries (issue 12).

Two simulated vLLM replicas complete a request every 10-40 ms each (1-50 generated tokens) from a background thread
(:class:`tests.helpers.traffic.Traffic`), which logs the time of every completion; a real Prometheus scrapes them.
Each case runs once per Prometheus version the suite runs (Debian's 2.42 and 3.16 built from its Go module: left-open
ranges and lookback in 3, anchored increases and so on must not change a number), with one Prometheus and its bridges
side by side on the same traffic and steps, each PromQL mode named for its version (``auto@2.42``, ``auto@3.16``,
...; the scrape path runs beside 2.42). Running both versions in one case loaded the 2-core machine past what a case
measures (three lagging-path failures under the full suite), so they run one after the other:

- ``auto``: the PromQL path with the default ``prometheus.boundary: auto`` (two targets that answer: the bridge
  scrapes them itself at each boundary, so every window is bounded by what the servers said at its boundaries);
- ``samples``: the PromQL path with ``prometheus.boundary: samples`` and ``recording_rules: off`` (Prometheus' own
  samples bound the windows, off by ``otel_bridge/boundary_lag_s`` at most; the last step is closed by the first
  samples after its end);
- ``rules``: the same with ``recording_rules: required``: Prometheus runs otel-bridge's recording rules (the file
  ``otel-bridge prometheus-rules`` writes for these metrics, evaluated every scrape interval) and each boundary is
  represented by the rules' last evaluation at or before it (off by up to one more interval, also reported);
- ``scrape``: the scrape path (``scrape.targets``, in-step samples every 0.25 s), the reference.

Cases:

- ``contiguous``: requests until each step's end, 1 s scrape interval; its last step ends 0.75 of an interval after a
  Prometheus scrape (the last-step case);
- ``short_steps``: 2 s steps under a 3 s scrape interval;
- ``gaps``: 1.5 s of traffic between 1.4 s ``with bridge.step(n)`` blocks;
- ``restart``: one replica restarted mid-step, at once and after a quiet spell (the kind restart);
- ``outage``: one replica's process ends mid-step in the middle of its traffic, its port refuses connections for four
  steps and five scrape intervals, then a new process counts from zero (the restart a real vLLM does: about a minute on
  a CPU node, shortened here); every path;
- ``blocks``: ``with bridge.step(n)`` loops, each step ending and the next beginning at once, requests until each end;
- ``*_busy``: the same on a saturated machine (two CPU-bound processes beside the bridges from their start until
  they are closed, as on a trainer node);
- ``down``: one replica's HTTP server down for two steps (``auto`` only);
- slow rules (``rules`` only, its own test): the rule group turns slow to evaluate after the bridge started (a rule
  waiting on a slow remote-read endpoint put first), so its evaluations are stored seconds after the time they stand
  for.

Contiguous cases end steps 1.. with ``bridge.log({}, step)``, whose window starts exactly at the previous boundary,
so the windows tile the run. Traffic starts ``BAND_S`` after the first boundary and stops right before the last one:
the run's truth is everything the driver completed, and the outer boundaries are quiet.

Tolerances, all computed from the traffic log (no timing asserts):

- ``auto`` and ``scrape``: a boundary scrape reaches the servers a few ms after the boundary, so a completion logged
  in ``(B, B + BAND_S]`` may land on either side of ``B``: ``truth - (what completed in that band after the start)
  <= delta <= truth + (what completed in that band after the end)``. The sum over steps is exact: for contiguous
  steps interior boundaries cancel and the outer ones are quiet; in the gap case every boundary is made quiet
  (``Traffic.quiet``) from just before it until ``BAND_S`` after it (traffic still runs through most of every gap).
- ``samples`` and ``rules``: ``|delta - truth| <=`` what completed within ``lag + BAND_S`` of either boundary,
  ``lag`` being the record's ``otel_bridge/boundary_lag_s`` (``BAND_S`` covers a sample's timestamp being taken just
  before the server renders it). The sum over contiguous steps is exact.
- Counts a process makes and nobody reads before it restarts are lost to every observer, so ``Traffic.restart``
  keeps the replica quiet for longer than the scrape interval before restarting it; it restarts well after its
  counters passed what the new process reaches before its next sample, so the reset is visible. The ``outage`` case
  does not: the run's sum must equal the truth less what the replica completed after the path last read it, a time
  the records report (``otel_bridge/unread_s/instance.<host:port>``: seconds since that reading, in every step the
  target had no reading at its end). Its page was rendered after that time, on a loaded machine long after: what it
  held is bounded by the replica's pages for that kind of scraper (``conftest.Renders``: who asked, when the request
  arrived, what the page counted), not by a band.
"""

from __future__ import annotations

import itertools
import logging
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from otel_bridge import Bridge
from otel_bridge.config import MetricConfig
from otel_bridge.exporters.record import StepRecord
from otel_bridge.producers.metric_set import resolve_metrics
from otel_bridge.producers.promql._internal.rules import rules_document
from tests.conftest import Renders, Replica, replica_routes
from tests.helpers.cpu_load import CPULoad
from tests.helpers.http_servers import Response, ScriptedHTTPServer
from tests.helpers.logs import LogRecords
from tests.helpers.prometheus_server import PROMETHEUS_VERSIONS, PrometheusServer
from tests.helpers.traffic import Counts, Traffic
from tests.plugins import tiers

pytestmark = [
    pytest.mark.integration,
    pytest.mark.sleeps(
        25,
        reason="steps are wall-clock windows of live traffic: 5-10 steps of 1.2-2.8 s a case, gaps, quiet spells",
    ),
]

# A boundary scrape reaches the servers within this long after the boundary. Measured on 2 cores with three bridges,
# Prometheus and the traffic sharing them: the scrape path's boundary scrapes counted completions logged up to 43 ms
# after the boundary (each /metrics render of the simulator takes ~11 ms under its lock, and the renders queue); with
# four bridges and other test suites on the same 2 cores, up to ~200 ms. Still far below the scrape interval (1-3 s)
# whose misattribution these tests exist to catch.
BAND_S = 0.3
SAMPLE_INTERVAL_S = 0.25  # the scrape path's in-step samples
LAST_PHASE = 0.75  # the contiguous case's last step ends this much of an interval after a Prometheus scrape


def on(mode: str, version: str) -> str:
    """The path name of PromQL mode ``mode`` reading the Prometheus of ``version``."""
    return f"{mode}@{version}"


def mode_of(path: str) -> str:
    return path.partition("@")[0]


AUTO = tuple(on("auto", version) for version in PROMETHEUS_VERSIONS)
LAGGING = tuple(on(mode, version) for version in PROMETHEUS_VERSIONS for mode in ("samples", "rules"))
BOUNDARY_SCRAPE = tuple(on("boundary_scrape", version) for version in PROMETHEUS_VERSIONS)
PATHS = (*AUTO, *LAGGING, "scrape")
BOUNDARY_READ = ("auto", "scrape", "boundary_scrape")  # modes that read the targets themselves at each boundary
CASES = (
    "contiguous",
    "short_steps",
    "gaps",
    "restart",
    "blocks",
    *(f"{case}_busy" for case in ("contiguous", "short_steps", "restart", "blocks")),
)
OUTAGES = ("outage", "outage_busy")


def marked(cases: Sequence[str]) -> list[Any]:
    """``cases`` as parameters, the ``*_busy`` ones marked ``saturates`` (they hold the machine, handed out first)."""
    return [pytest.param(case, marks=pytest.mark.saturates) if case.endswith("_busy") else case for case in cases]


def worker_group(test: str) -> str:
    """The part of this module a test belongs to (tests/plugins/tiers.py): the run it reads. Each case runs once per
    Prometheus version, in the worker that runs the tests reading it, so the runs spread over the workers; the
    ``*_busy`` runs are the part of every saturating test (tiers.SATURATING), whose worker holds the machine while
    the others run the tests that need no server. Each slow-rules run is a part of its own."""
    name, _, params = test.partition("[")
    values = params.rstrip("]").split("-") if params else []
    if name == "test_rules_stay_exact_when_their_evaluation_is_stored_late":
        return f"slow_rules@{values[0]}"
    case = next((v for v in values if v.removesuffix("_busy") in CASE_SPECS), None)
    if case is None:  # tests of one case, named in their body
        case = {"test_last_step_counts_the_traffic_until_its_end": "contiguous"}.get(name, "down")
    if case.endswith("_busy"):
        return tiers.SATURATING
    versions = [version_of(v) for v in values if "@" in v] + [v for v in values if v in PROMETHEUS_VERSIONS]
    return f"{case}@{versions[0] if versions else version_of('scrape')}"  # the scrape path runs beside the first


BUSY_PROCESSES = 2  # CPU-bound processes beside a *_busy case: the machine's two cores taken

METRICS: list[dict[str, Any]] = [
    {"name": "vllm:generation_tokens_total", "type": "counter", "stats": ["delta"]},
    {"name": "vllm:request_success_total", "type": "counter", "stats": ["delta"]},  # summed over finished_reason
    {"name": "vllm:e2e_request_latency_seconds", "type": "histogram", "stats": ["count"]},
]
KEYS = {  # tracker key -> the Counts field it must match
    "rollout/vllm/generation_tokens_total/delta": "tokens",
    "rollout/vllm/request_success_total/delta": "requests",
    "rollout/vllm/e2e_request_latency_seconds/count": "requests",
}
LAG_KEY = "otel_bridge/boundary_lag_s"
TARGETS_DOWN_KEY = "otel_bridge/targets_down"
TARGETS_UNREAD_KEY = "otel_bridge/targets_unread"
SCRAPE_ERRORS_PREFIX = "otel_bridge/scrape_errors/"
UNREAD_PREFIX = "otel_bridge/unread_s/"

Driver = Callable[[list[Bridge], Traffic, list[Replica], PrometheusServer], dict[str, Any]]
Environment = Callable[[Path, float], AbstractContextManager[tuple[list[Replica], Mapping[str, PrometheusServer]]]]
"""``(workdir, scrape interval) -> context of (replicas, the stores scraping them by name)``: a path ``mode@name``
reads the store ``name`` (:func:`bridge_config`); :func:`environment`, one Prometheus per version, by default."""


@dataclass
class Outcome:
    """One case's run: the traffic log and every bridge's records, servers already stopped."""

    case: str
    interval_s: float
    contiguous: bool
    traffic: Traffic
    records: dict[str, list[StepRecord]]
    hostports: list[str]
    notes: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    """Every WARNING the bridges logged (the scrape child's too: it logs through the trainer's loggers)."""
    renders: list[Renders] = field(default_factory=list)
    """Each replica's ``/metrics`` pages: when each was asked for, by whom, and what it counted."""
    scrapers: dict[str, str] = field(default_factory=dict)
    """The ``User-Agent`` of each store's scrapes of the replicas, by store name, where several stores scrape them
    and tell themselves apart by it (the twin module's two VictoriaMetrics); without, a store is the only client of
    the replicas but the bridges."""


# -- running a case ---------------------------------------------------------------------------------------------------


@contextmanager
def environment(
    workdir: Path,
    interval_s: float,
    versions: Sequence[str] = PROMETHEUS_VERSIONS,
    *,
    remote_read: Sequence[Mapping[str, Any]] = (),
) -> Iterator[tuple[list[Replica], dict[str, PrometheusServer]]]:
    """Two replicas and a real Prometheus of each of ``versions`` scraping them every ``interval_s`` (its
    ``remote_read`` endpoints as given); all stopped on exit. The replicas serve ``/metrics`` one through vLLM's text
    route, one through prometheus_client's negotiation (``replica_routes``: a 2.42 stores the second one's names
    escaped, ``vllm_x``, beside the first's ``vllm:x``)."""
    replicas: list[Replica] = []
    servers: dict[str, PrometheusServer] = {}
    try:
        for route in replica_routes(*versions):
            replicas.append(Replica(route=route))
        rules = rules_document(resolve_metrics([MetricConfig.model_validate(m) for m in METRICS]), interval_s)
        for version in versions:
            servers[version] = PrometheusServer(
                workdir / f"prometheus-{version}",
                [r.hostport for r in replicas],
                scrape_interval_s=interval_s,
                rules=rules,
                version=version,
                remote_read=remote_read,
            )
            servers[version].start()
        for server in servers.values():
            server.wait_for_samples('{__name__=~"vllm.generation_tokens_total"}', count=2)  # either name
        yield replicas, servers
    finally:
        for server in servers.values():
            server.stop()
        for replica in replicas:
            replica.stop()


def bridge_config(
    path: str, workdir: Path, replicas: Sequence[Replica], servers: Mapping[str, PrometheusServer]
) -> dict[str, Any]:
    config: dict[str, Any] = {"metrics": METRICS, "run": {"name": path.replace("@", "-"), "dir": str(workdir / "runs")}}
    mode, _, version = path.partition("@")
    if mode == "scrape":
        config["scrape"] = {"targets": [r.url for r in replicas], "sample_interval_s": SAMPLE_INTERVAL_S}
    else:
        prometheus = servers[version]
        config["prometheus"] = {"url": prometheus.url, "scrape_interval_s": prometheus.scrape_interval_s}
        if mode in ("samples", "rules"):
            config["prometheus"]["boundary"] = "samples"
            config["prometheus"]["recording_rules"] = "required" if mode == "rules" else "off"
        elif mode == "boundary_scrape":
            config["prometheus"]["boundary"] = "scrape"
    return config


def run_case(
    case: str,
    workdir: Path,
    *,
    interval_s: float,
    drive: Driver,
    paths: Sequence[str] = PATHS,
    contiguous: bool,
    busy: bool = False,
    stores: Environment | None = None,
) -> Outcome:
    """Start the servers, the bridges and the traffic, let ``drive`` run the steps, close everything. ``busy``:
    :data:`BUSY_PROCESSES` CPU-bound processes run from when the servers answer (Prometheus has sampled them) until the
    bridges are closed, so every boundary, read and delivery of the run is on a saturated machine. ``stores`` starts
    the replicas and the stores scraping them (:func:`environment` by default)."""
    with (
        (stores or environment)(workdir, interval_s) as (replicas, servers),
        CPULoad(BUSY_PROCESSES if busy else 0),
        ExitStack() as stack,
        LogRecords("otel_bridge") as logged,
    ):
        traffic = Traffic([r.sim for r in replicas], seed=len(case), start_delay_s=BAND_S)
        stack.callback(traffic.stop)
        bridges = [stack.enter_context(Bridge.from_config(bridge_config(p, workdir, replicas, servers))) for p in paths]
        # A driver that aligns a boundary with Prometheus' scrapes aligns it with the first store's (the first
        # version's; the others scrape at their own offsets).
        notes = drive(bridges, traffic, replicas, next(iter(servers.values())))
        traffic.stop()  # the drivers stop it already; a last completion must not race close()
        for bridge in bridges:
            bridge.close()  # delivers every step; with boundary: samples, waits for the samples after the last end
        warnings = [record.getMessage() for record in logged.records if record.levelno >= logging.WARNING]
        records: dict[str, list[StepRecord]] = {}
        for path, bridge in zip(paths, bridges, strict=True):
            steps = sorted(notes["steps"])
            found = [bridge.record(step) for step in steps]
            missing = [step for step, record in zip(steps, found, strict=True) if record is None]
            assert not missing, f"{case}/{path}: no record for steps {missing}"
            records[path] = [record for record in found if record is not None]
        traffic.check_simulators()
        hostports = [r.hostport for r in replicas]
        renders = [r.renders for r in replicas]
        return Outcome(case, interval_s, contiguous, traffic, records, hostports, notes, warnings, renders)


def sleep_until(t: float) -> None:
    remaining = t - time.time()
    if remaining > 0:
        time.sleep(remaining)


def drive_contiguous(
    durations: Sequence[float],
    hooks: Mapping[int, Callable[[list[Replica], Traffic], None]] | None = None,
    last_end: Callable[[PrometheusServer, list[Replica], float], float] | None = None,
) -> Driver:
    """Steps that tile the run: step 0 begins with ``begin_step``, steps 1.. end with ``log()`` (window from the
    previous boundary). Traffic runs from just after the first boundary until right before the last one;
    ``hooks[k]`` runs at the start of step k (inside its duration); ``last_end`` may move the last step's end later."""

    def drive(
        bridges: list[Bridge], traffic: Traffic, replicas: list[Replica], prometheus: PrometheusServer
    ) -> dict[str, Any]:
        notes: dict[str, Any] = {"steps": list(range(len(durations)))}
        for bridge in bridges:
            bridge.begin_step(0)
        traffic.start()  # first completion BAND_S + one gap after the first boundary
        for step, duration in enumerate(durations):
            began = time.time()
            if hooks and step in hooks:
                hooks[step](replicas, traffic)
            end = began + duration
            if step == len(durations) - 1 and last_end is not None:
                end = notes["aligned_end"] = last_end(prometheus, replicas, end)
            sleep_until(end)
            if step == len(durations) - 1:
                traffic.stop()  # traffic ran until the last step's end; nothing is counted after it
            for bridge in bridges:
                if step == 0:
                    bridge.end_step(0)
                else:
                    bridge.log({}, step=step)
        return notes

    return drive


def drive_gaps(steps: int, step_s: float, gap_s: float) -> Driver:
    """``with bridge.step(n)``-style windows separated by ``gap_s`` of traffic that belongs to no step; each
    boundary is quiet from just before it until ``BAND_S`` after it."""

    def drive(
        bridges: list[Bridge], traffic: Traffic, replicas: list[Replica], prometheus: PrometheusServer
    ) -> dict[str, Any]:
        traffic.start()
        time.sleep(gap_s)
        for step in range(steps):
            with traffic.quiet(after_s=BAND_S):
                for bridge in bridges:
                    bridge.begin_step(step)
            time.sleep(step_s - BAND_S)
            with traffic.quiet(after_s=BAND_S):
                for bridge in bridges:
                    bridge.end_step(step)
            if step < steps - 1:
                time.sleep(gap_s - BAND_S)
        traffic.stop()
        return {"steps": list(range(steps))}

    return drive


def drive_blocks(durations: Sequence[float]) -> Driver:
    """``with bridge.step(n)`` loops: each step ends and the next begins at once (no completion in between, so the
    windows' union holds all the traffic), with requests until each step's end."""

    def drive(
        bridges: list[Bridge], traffic: Traffic, replicas: list[Replica], prometheus: PrometheusServer
    ) -> dict[str, Any]:
        for bridge in bridges:
            bridge.begin_step(0)
        traffic.start()
        began = time.time()
        for step, duration in enumerate(durations):
            began += duration
            sleep_until(began)
            if step == len(durations) - 1:
                traffic.stop()
                for bridge in bridges:
                    bridge.end_step(step)
                break
            with traffic.quiet():
                for bridge in bridges:
                    bridge.end_step(step)
                    bridge.begin_step(step + 1)
        return {"steps": list(range(len(durations)))}

    return drive


def after_prometheus_scrape(phase: float) -> Callable[[PrometheusServer, list[Replica], float], float]:
    """The first time >= ``earliest`` that lies ``phase`` of an interval after a Prometheus scrape of replica 0."""

    def end(prometheus: PrometheusServer, replicas: list[Replica], earliest: float) -> float:
        result = prometheus.query(f'timestamp(up{{instance="{replicas[0].hostport}"}})')
        t = float(result[0]["value"][1]) + phase * prometheus.scrape_interval_s
        while t < earliest:
            t += prometheus.scrape_interval_s
        return t

    return end


def restart_replica_0(interval_s: float) -> Callable[[list[Replica], Traffic], None]:
    def hook(replicas: list[Replica], traffic: Traffic) -> None:
        time.sleep(0.3)
        traffic.restart(0, quiet_before_s=interval_s + 0.3)

    return hook


def end_process(index: int) -> Callable[[list[Replica], Traffic], None]:
    """Replica ``index``'s process ends well inside the step, in the middle of its traffic (its port then refuses
    connections)."""

    def hook(replicas: list[Replica], traffic: Traffic) -> None:
        time.sleep(0.4)
        traffic.down(index, replicas[index].process.go_down)

    return hook


def start_process(index: int) -> Callable[[list[Replica], Traffic], None]:
    """A new process of replica ``index`` serves on the same port, its counters from zero."""

    def hook(replicas: list[Replica], traffic: Traffic) -> None:
        time.sleep(0.3)
        traffic.up(index, replicas[index].process.come_up)

    return hook


def stop_server(index: int) -> Callable[[list[Replica], Traffic], None]:
    def hook(replicas: list[Replica], traffic: Traffic) -> None:
        time.sleep(0.2)  # well after the boundary (and its boundary scrape)
        replicas[index].server.stop()

    return hook


def start_server(index: int) -> Callable[[list[Replica], Traffic], None]:
    def hook(replicas: list[Replica], traffic: Traffic) -> None:
        time.sleep(0.2)
        replicas[index].server.start()  # same port again

    return hook


# -- the cases (each runs once per module; the tests below only read their outcome) -----------------------------------


@dataclass(frozen=True)
class Case:
    """How one case runs (see the module docstring); ``busy`` twins run the same on a saturated machine."""

    interval_s: float
    contiguous: bool
    drive: Driver
    paths: Sequence[str] = PATHS


CASE_SPECS: dict[str, Case] = {
    # (a) + (e): 1 s scrapes, six contiguous steps with requests until each end; the last step ends 0.75 s after a
    # Prometheus scrape of replica 0, so most of a scrape interval of traffic lies after Prometheus' last sample.
    "contiguous": Case(
        1.0, True, drive_contiguous([1.3, 1.3, 1.3, 1.3, 1.3, 1.0], last_end=after_prometheus_scrape(LAST_PHASE))
    ),
    # (b): 2 s steps under a 3 s scrape interval.
    "short_steps": Case(3.0, True, drive_contiguous([2.0] * 6)),
    # (c): five 1.4 s steps, 1.5 s of traffic between them that belongs to no step. (Steps of a whole number of
    # scrape intervals would let a window read between two samples one interval apart look right on average.)
    "gaps": Case(1.0, False, drive_gaps(5, 1.4, 1.5)),
    # (d): replica 0 restarts in the middle of step 3 (quiet 1.3 s before, traffic after).
    "restart": Case(1.0, True, drive_contiguous([1.2, 1.2, 1.2, 2.8, 1.2, 1.2], hooks={3: restart_replica_0(1.0)})),
    # ``with bridge.step(n)`` loops, requests until each step's end.
    "blocks": Case(1.0, False, drive_blocks([1.3] * 6)),
    # Replica 0's process ends 0.4 s into step 2 and a new one serves 0.3 s into step 6 (4.7 s: four steps, five
    # scrape intervals), every path.
    "outage": Case(
        1.0,
        True,
        drive_contiguous([1.2] * 10, hooks={2: end_process(0), 6: start_process(0)}),
        paths=(*PATHS, *BOUNDARY_SCRAPE),
    ),
    # Replica 1's HTTP server is down from 0.2 s into step 2 until 0.2 s into step 4 (its simulator keeps counting);
    # PromQL path with the defaults only.
    "down": Case(
        1.0,
        True,
        drive_contiguous([1.3, 1.3, 1.5, 1.5, 1.5, 1.3], hooks={2: stop_server(1), 4: start_server(1)}),
        paths=AUTO,
    ),
}


def version_of(path: str) -> str:
    """The Prometheus version a path reads (the scrape path, which reads none, runs beside the first version's)."""
    return path.partition("@")[2] or PROMETHEUS_VERSIONS[0]


@pytest.fixture(scope="module")
def outcome_of(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], Outcome]:
    """The outcome of a case by name (``<case>_busy``: the same case on a saturated machine) for the Prometheus
    version ``path`` reads, run once per module and version: each run has one Prometheus and its own bridges, as a
    trainer node has, so the versions do not share (and load) one machine's case."""
    done: dict[tuple[str, str], Outcome] = {}

    def get(name: str, path: str) -> Outcome:
        version = version_of(path)
        if (name, version) not in done:
            spec = CASE_SPECS[name.removesuffix("_busy")]
            paths = [p for p in spec.paths if version_of(p) == version]
            done[name, version] = run_case(
                name,
                tmp_path_factory.mktemp(f"{name}-{version}"),
                interval_s=spec.interval_s,
                contiguous=spec.contiguous,
                drive=spec.drive,
                paths=paths,
                busy=name.endswith("_busy"),
                stores=lambda workdir, interval_s: environment(workdir, interval_s, (version,)),
            )
        return done[name, version]

    return get


# -- checks -----------------------------------------------------------------------------------------------------------


def window_of(record: StepRecord) -> tuple[float, float]:
    assert record.window_start is not None, f"step {record.step} has no window start"
    return record.window_start, record.time


Slack = Callable[
    [Traffic, StepRecord], tuple[Counts, Counts]
]  # (below, above): truth - below <= delta <= truth + above


def boundary_slack(traffic: Traffic, record: StepRecord) -> tuple[Counts, Counts]:
    """A boundary is observed within ``BAND_S`` after it, or as late as the record's ``boundary_lag_s`` says its
    boundary scrapes were answered (a sampler running behind on a loaded machine): what completed in that band after
    the window's start may be missing from it (counted in the previous window), what completed in that band after its
    end may be in it."""
    start, end = window_of(record)
    band = max(BAND_S, record.values.get(LAG_KEY, 0.0) + 0.05)
    return traffic.near(start, 0.0, band), traffic.near(end, 0.0, band)


def lag_slack(traffic: Traffic, record: StepRecord) -> tuple[Counts, Counts]:
    """What completed within ``lag + BAND_S`` of either boundary, ``lag`` the record's ``boundary_lag_s``, either way
    (a sample before a boundary, or after the last one)."""
    start, end = window_of(record)
    reach = record.values[LAG_KEY] + BAND_S
    either = traffic.near(start, reach, reach) + traffic.near(end, reach, reach)
    return either, either


def step_errors(outcome: Outcome, path: str, slack: Slack) -> list[str]:
    """One line per (step, key) whose delta is further from the truth than ``slack`` allows."""
    errors = []
    for record in outcome.records[path]:
        start, end = window_of(record)
        truth = outcome.traffic.truth(start, end)
        below, above = slack(outcome.traffic, record)
        for key, what in KEYS.items():
            value = record.values.get(key)
            if value is None:
                errors.append(f"step {record.step} {key}: missing (truth {truth.get(what)})")
                continue
            off = value - truth.get(what)
            if not -below.get(what) <= off <= above.get(what):
                errors.append(
                    f"step {record.step} ({end - start:.2f} s) {key}: {value:g} vs truth {truth.get(what)} "
                    f"(off by {off:+g}, allowed -{below.get(what)}..+{above.get(what)})"
                )
    return errors


def sum_errors(outcome: Outcome, path: str) -> list[str]:
    """The sum over steps must equal the truth over the union of the windows exactly (for contiguous steps: all the
    traffic of the run, the last step included). Interior boundaries cancel; a boundary that opens or closes a stretch
    of windows (the run's first and last, every one in the gaps case) is quiet for ``BAND_S`` after it, so on the
    paths that read the targets themselves only a reading later than that, which the record reports in its lag (a
    saturated machine: seen once, the opening boundary's sampler 0.3+ s late), may leave out what completed between
    the boundary and that reading (:func:`boundary_slack`'s band)."""
    records, traffic = outcome.records[path], outcome.traffic
    windows = [window_of(r) for r in records]
    union = Counts()
    for start, end in windows:
        union += traffic.truth(start, end)
    if outcome.contiguous:  # preconditions of the case itself
        assert all(a[1] == b[0] for a, b in itertools.pairwise(windows)), f"{path}: windows do not tile"
        assert union == traffic.total(), f"traffic outside the run: {traffic.total()} vs {union} inside"
    below, above = Counts(), Counts()
    if mode_of(path) in BOUNDARY_READ:
        for index, (record, (start, end)) in enumerate(zip(records, windows, strict=True)):
            band = max(BAND_S, record.values.get(LAG_KEY, 0.0) + 0.05)
            if index == 0 or windows[index - 1][1] != start:
                below += traffic.near(start, 0.0, band)
            if index == len(windows) - 1 or windows[index + 1][0] != end:
                above += traffic.near(end, 0.0, band)
    errors = []
    for key, what in KEYS.items():
        total = sum(r.values.get(key, 0.0) for r in records)
        off = total - union.get(what)
        if not -below.get(what) <= off <= above.get(what):
            errors.append(
                f"sum over {len(records)} steps of {key}: {total:g} vs truth {union.get(what)} "
                f"({-off:+g} lost; allowed by the reported lag: -{below.get(what)}..+{above.get(what)})"
            )
    return errors


def lag_errors(outcome: Outcome, path: str, *, last_intervals: int | None = None) -> list[str]:
    """The lag is reported and bounded: one scrape interval (plus one rule interval through the rules) and 1 s;
    ``last_intervals`` for the run's last step, when it is closed otherwise (by arrivals: the second after its end)."""
    errors = []
    records = outcome.records[path]
    usual = 2 if mode_of(path) == "rules" else 1
    for record in records:
        intervals = last_intervals if record is records[-1] and last_intervals is not None else usual
        lag = record.values.get(LAG_KEY)
        if lag is None:
            errors.append(f"step {record.step} : no {LAG_KEY} in the record")
        elif not 0.0 <= lag <= intervals * outcome.interval_s + 1.0:
            errors.append(f"step {record.step} : {LAG_KEY} = {lag} outside [0, {intervals} interval(s) + 1 s]")
    return errors


def report(outcome: Outcome, path: str, errors: list[str]) -> str:
    """The errors, then what a diagnosis of a rare failure needs and a rerun may not show again: each step's window,
    truth, figures and health keys on ``path``, and every warning the run's bridges logged."""
    total = outcome.traffic.total()
    steps = []
    for record in outcome.records[path]:
        start, end = window_of(record)
        truth = outcome.traffic.truth(start, end)
        figures = {key: record.values.get(key) for key in KEYS}
        health = {k: v for k, v in record.values.items() if k.startswith("otel_bridge/") and v}
        steps.append(f"step {record.step} [{start:.3f}, {end:.3f}] truth {truth}: {figures} {health}")
    return (
        f"{outcome.case}/{path}: {len(errors)} problem(s); run truth {total.tokens} tokens, {total.requests} requests "
        f"in {len(outcome.records[path])} steps\n  "
        + "\n  ".join(errors)
        + "\nsteps:\n  "
        + "\n  ".join(steps)
        + f"\nwarnings logged by the run's bridges ({len(outcome.warnings)}):\n  "
        + "\n  ".join(outcome.warnings[:40])
    )


# -- boundary: auto (the default): every step exact up to what completed within BAND_S after its boundaries -----------


@pytest.mark.parametrize("path", AUTO)
@pytest.mark.parametrize("case", marked(CASES))
def test_default_promql_steps_match_the_truth(case: str, path: str, outcome_of: Callable[[str, str], Outcome]) -> None:
    outcome = outcome_of(case, path)
    errors = step_errors(outcome, path, boundary_slack) + sum_errors(outcome, path)
    assert not errors, report(outcome, path, errors)


# -- the scrape path, the reference: the same checks -------------------------------------------------------------------


@pytest.mark.parametrize("case", marked(CASES))
def test_scrape_path_steps_match_the_truth(case: str, outcome_of: Callable[[str, str], Outcome]) -> None:
    outcome = outcome_of(case, "scrape")
    errors = step_errors(outcome, "scrape", boundary_slack) + sum_errors(outcome, "scrape")
    assert not errors, report(outcome, "scrape", errors)


# -- boundary: samples: off by at most what completed within the reported lag of a boundary; sums exact ----------------


@pytest.mark.parametrize("path", LAGGING)
@pytest.mark.parametrize("case", marked(CASES))
def test_samples_boundary_is_within_the_reported_lag(
    case: str, path: str, outcome_of: Callable[[str, str], Outcome]
) -> None:
    """Raw samples and the recording rules alike: each step within its reported lag, contiguous sums exact."""
    outcome = outcome_of(case, path)
    errors = lag_errors(outcome, path)
    if not errors:
        errors += step_errors(outcome, path, lag_slack)
    if outcome.contiguous:
        errors += sum_errors(outcome, path)
    assert not errors, report(outcome, path, errors)


# -- (e) the last step: traffic until its end, counted in it -----------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_last_step_counts_the_traffic_until_its_end(path: str, outcome_of: Callable[[str, str], Outcome]) -> None:
    contiguous = outcome_of("contiguous", path)
    errors = last_step_errors(contiguous, path, lagging=path in LAGGING)
    assert not errors, report(contiguous, path, errors)


def last_step_errors(contiguous: Outcome, path: str, *, lagging: bool) -> list[str]:
    """The contiguous case's last step holds the traffic until its end (most of an interval of it after the store's
    last sample), within the path's slack (``lagging``: the reported lag), and the run's sum is exact."""
    last = contiguous.records[path][-1]
    start, end = window_of(last)
    truth = contiguous.traffic.truth(start, end)
    last_sample = contiguous.notes["aligned_end"] - LAST_PHASE * contiguous.interval_s  # Prometheus' last, replica 0
    after_last_sample = contiguous.traffic.truth(last_sample, end)
    assert after_last_sample.requests > 0, "the case put no traffic between Prometheus' last sample and the end"
    mine = f"step {last.step} "
    errors = [e for e in lag_errors(contiguous, path) if e.startswith(mine)] if lagging else []
    if not errors:
        slack = lag_slack if lagging else boundary_slack
        errors += [e for e in step_errors(contiguous, path, slack) if e.startswith(mine)]
    errors += sum_errors(contiguous, path)
    return [*errors, f"last step truth: {truth}"] if errors else []


# -- a target that is down is reported ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", AUTO)
def test_down_target_is_reported_and_the_sum_stays_exact(path: str, outcome_of: Callable[[str, str], Outcome]) -> None:
    down = outcome_of("down", path)
    errors = down_errors(down, path)
    assert not errors, report(down, path, errors)


def down_errors(down: Outcome, path: str) -> list[str]:
    """Replica 1's HTTP server down from inside step 2 until inside step 4: ``targets_down`` and a ``scrape_errors``
    key name it, ``targets_unread``/``unread_s`` at the ends of steps 2 and 3 only, and the run's sum is exact."""
    records = down.records[path]
    hostport = down.hostports[1]
    errors = []
    for record in records[:2]:
        value = record.values.get(TARGETS_DOWN_KEY, 0.0)
        if value != 0:
            errors.append(f"step {record.step} (all targets up): {TARGETS_DOWN_KEY} = {value}")
    for record in records[2:4]:
        value = record.values.get(TARGETS_DOWN_KEY)
        if value is None or value < 1:
            errors.append(f"step {record.step} ({hostport} down throughout): {TARGETS_DOWN_KEY} = {value}")
    names = (hostport, hostport.replace(":", "_"))
    for record in (records[3], records[-1]):
        scrape_errors = {
            k: v for k, v in record.values.items() if k.startswith(SCRAPE_ERRORS_PREFIX) and any(n in k for n in names)
        }
        if not scrape_errors or max(scrape_errors.values()) <= 0:
            health = {k: v for k, v in record.values.items() if k.startswith("otel_bridge/")}
            errors.append(f"step {record.step}: no {SCRAPE_ERRORS_PREFIX}... key > 0 naming {hostport}: {health}")
    # Unread at the ends of steps 2 and 3 (its port closed throughout), read again from step 4's end on.
    for record in records:
        unread, count = unread_for(record, hostport), record.values.get(TARGETS_UNREAD_KEY)
        if record.step in (2, 3) and (unread is None or count != 1):
            errors.append(f"step {record.step} ({hostport} down at its end): unread_s {unread}, {count} unread")
        if record.step not in (2, 3) and (unread is not None or count != 0):
            errors.append(f"step {record.step} ({hostport} up at its end): unread_s {unread}, {count} unread")
    return errors + sum_errors(down, path)


# -- a process that ends and comes back a minute later (shortened): named while unread, read again, sum exact ---------


def unread_for(record: StepRecord, hostport: str) -> float | None:
    """The record's ``unread_s`` for ``hostport`` (seconds since the path last read it), or ``None``."""
    names = (hostport, hostport.replace(":", "_"))
    found = [v for k, v in record.values.items() if k.startswith(UNREAD_PREFIX) and any(n in k for n in names)]
    return max(found) if found else None


BRIDGE_AGENT = "otel-bridge"  # the User-Agent of the bridge's own scrapes (otel_bridge/producers/scrape/_internal)


def read_through(outcome: Outcome, path: str, last_read: float, down: float) -> tuple[float, float, list[str]]:
    """What ``path``'s last reading of replica 0 (its time ``last_read``) before its process ended at ``down`` may have
    held, from the pages that process rendered: ``(since, through, errors)``, the reading holding every completion of
    the replica logged until ``since`` and none logged after ``through``; ``errors`` says what contradicts that.

    The reading's page is one the old process rendered (its ``process_start_time_seconds`` before ``down``) for a
    client of the path's kind (the bridge's own scrapes, ``auto``, ``boundary_scrape`` and ``scrape``: User-Agent
    ``otel-bridge``; the store's samples: the store's scrapes, :attr:`Outcome.scrapers`, or any client but the
    bridges) whose request arrived at or after ``since``: the reading's time less how far a stamp may lie after its
    request went out. The bridge stamps a reading with when it sent the request, Prometheus a sample with its scrape's
    start (or its aligned schedule, at most 2 ms before it), VictoriaMetrics with its schedule, which it keeps while
    the scrape is off it by at most a tenth of the interval, either way; both stamp in whole milliseconds. So every
    completion logged until ``since`` is in the reading. Which page of those answered it is not known (the bridges
    share a User-Agent, and on a loaded machine nothing bounds how long after its request a page is rendered): the
    reading holds no more than the latest of them counted, up to ``through``. Each page's counts are a prefix of the
    traffic log (:meth:`Traffic.counted_through`), so no timing of the machine enters either bound. With no such
    page, no one answered the reading."""
    own = mode_of(path) in BOUNDARY_READ
    store = outcome.scrapers.get(version_of(path))

    def asked(agent: str) -> bool:
        if own or store is None:
            return agent.startswith(BRIDGE_AGENT) == own
        return agent == store

    since = last_read - 0.001 - (0.0 if own else outcome.interval_s / 10)
    pages = [
        page
        for page in outcome.renders[0].pages(since)
        if asked(page.user_agent) and page.started is not None and page.started < down
    ]
    if not pages:
        kind = "the bridge's own scrapes" if own else f"the store's scrapes ({store or 'any client but the bridges'})"
        return since, down, [f"no page of the old process for {kind} after the last reading at {last_read:.3f}"]
    errors: list[str] = []
    through = float("-inf")
    for page in pages:
        counted = None
        if page.requests is not None and page.tokens is not None:
            counted = outcome.traffic.counted_through(0, page.requests, page.tokens)
        if counted is None:
            errors.append(f"a page for {page.user_agent} ({page.requests} requests, {page.tokens} tokens) is no prefix")
        else:
            through = max(through, counted)
    return since, through, errors


def outage_errors(outcome: Outcome, path: str) -> list[str]:
    """While replica 0 is down every record names it (``unread_s``, ``targets_unread``); once it serves again it is
    read and no record names it; every step is exact but for what the old process completed after the path last read
    it (the first ``unread_s`` tells when that was, and the pages that can have answered that reading what it may have
    held: :func:`read_through`), and so is the run's sum."""
    traffic, records = outcome.traffic, outcome.records[path]
    hostport = outcome.hostports[0]
    (outage,) = traffic.outages
    (restart,) = traffic.restarts
    # A path reading Prometheus' samples sees the change at Prometheus' next scrape (an interval, and its slack); a
    # path reading the targets itself, when its boundary scrape is answered: as late as the record's boundary_lag_s
    # says (on a saturated machine a scrape of the boundary before the restart can reach the new process).
    boundary_read = mode_of(path) in BOUNDARY_READ
    late = 0.0 if boundary_read else outcome.interval_s + BAND_S
    errors = []
    first_unread: StepRecord | None = None
    for record in records:
        end = window_of(record)[1]
        read_by = end + (record.values.get(LAG_KEY, 0.0) + 0.05 if boundary_read else 0.0)  # as boundary_slack
        unread = unread_for(record, hostport)
        count = record.values.get(TARGETS_UNREAD_KEY)
        state = f"unread_s {unread}, {count} unread, boundary read by {read_by - end:.3f} s after it"
        if outage.down + late < end and read_by < restart.t:
            if unread is None or count is None or count < 1:
                errors.append(f"step {record.step} ends while {hostport} is down: {state}")
        elif (read_by < outage.down or end > restart.t + late) and (unread is not None or count != 0):
            errors.append(f"step {record.step} ends while {hostport} serves: {state}")
        if unread is not None and first_unread is None:
            first_unread = record
    if first_unread is None:
        errors.append(f"no record names {hostport} as unread")
        last_read = outage.down - 2 * outcome.interval_s  # the sums are still checked, generously
    else:
        first = unread_for(first_unread, hostport)
        assert first is not None
        last_read = window_of(first_unread)[1] - first
    if not last_read <= outage.down:
        errors.append(f"the path last read {hostport} at {last_read:.3f}, after its process ended ({outage.down:.3f})")
    # What the old process completed after that reading is lost to this path: at most all it completed after the
    # reading's time, at least all it completed after what the latest page that can have answered the reading counted
    # (that page was rendered after the reading's time, on a loaded machine long after it).
    since, through, page_errors = read_through(outcome, path, last_read, outage.down)
    errors += page_errors
    lost_most = traffic.lost_before_down(0, since)
    lost_least = traffic.lost_before_down(0, through)
    total = traffic.total()
    for key, what in KEYS.items():
        got = sum(r.values.get(key, 0.0) for r in records)
        if not total.get(what) - lost_most.get(what) <= got <= total.get(what) - lost_least.get(what):
            errors.append(
                f"sum of {key}: {got:g}, truth {total.get(what)} less {lost_least.get(what)}..{lost_most.get(what)} "
                f"completed after the last reading at {last_read:.3f} before the end at {outage.down:.3f}"
            )

    def slack(traffic: Traffic, record: StepRecord) -> tuple[Counts, Counts]:
        below, above = (boundary_slack if mode_of(path) in BOUNDARY_READ else lag_slack)(traffic, record)
        start, end = window_of(record)
        if start < outage.down <= end:
            below = below + lost_most
        return below, above

    return errors + step_errors(outcome, path, slack)


@pytest.mark.parametrize("path", [*PATHS, *BOUNDARY_SCRAPE])
@pytest.mark.parametrize("case", marked(OUTAGES))
def test_a_target_that_comes_back_is_read_again_and_named_while_it_is_not(
    case: str, path: str, outcome_of: Callable[[str, str], Outcome]
) -> None:
    outcome = outcome_of(case, path)
    errors = outage_errors(outcome, path)
    assert not errors, report(outcome, path, errors)


@pytest.mark.parametrize("version", PROMETHEUS_VERSIONS)
@pytest.mark.parametrize("case", marked(OUTAGES))
def test_the_log_says_once_per_path_that_a_target_is_unread(
    case: str, version: str, outcome_of: Callable[[str, str], Outcome]
) -> None:
    """Rate-limited: one WARNING per bridge for the whole outage (four records name it each time): on the paths that
    read the target themselves, its failed scrape's; on Prometheus' samples, that Prometheus has no reading of it."""
    outcome = outcome_of(case, on("auto", version))
    hostport = outcome.hostports[0]
    own = [w for w in outcome.warnings if hostport in w and "unread_s" in w and "Prometheus" not in w]
    prometheus = [w for w in outcome.warnings if hostport in w and "Prometheus" in w]
    assert len(own) == sum(mode_of(p) in BOUNDARY_READ for p in outcome.records), own
    assert len(prometheus) == sum(p in LAGGING for p in outcome.records), (
        prometheus
    )  # and none from the boundary-reading paths' Prometheus


# -- a rule group that turns slow while the run goes on ----------------------------------------------------------------

# A rule whose selector carries this matcher is also read from the Prometheus' remote-read endpoint (its
# ``required_matchers``), which answers after SLOW_S: put ahead of the bridge's rules in its group, the group's
# evaluation then takes SLOW_S longer, so each evaluation's samples, stamped with its scheduled time, are stored about
# SLOW_S later, past the bridge's usual wait after a boundary. Prometheus waits on the endpoint (its answer is an
# error: the rule's query keeps the local result, with a warning), not on a core, so the test loads the machine as
# any server test does. (Costly rules that took ~2 s of Prometheus' CPU did the same and took a core from every test
# beside it, which then had to wait.)
SLOW_MATCHER = {"otel_bridge_test": "slow"}
SLOW_RULE = 'count(up{otel_bridge_test="slow"})'
SLOW_S = 2.0


@contextmanager
def slow_remote_read() -> Iterator[dict[str, Any]]:
    """A remote-read endpoint that answers every read after :data:`SLOW_S` (with a 503), as Prometheus' ``remote_read``
    entry: only selectors with :data:`SLOW_MATCHER` read it."""
    with ScriptedHTTPServer(lambda request: Response(status=503, delay_s=SLOW_S)) as endpoint:
        yield {
            "url": f"{endpoint.url}/read",
            "read_recent": True,
            "required_matchers": SLOW_MATCHER,
            "remote_timeout": f"{int(SLOW_S * 3)}s",
        }


def slow_rule_group(servers: Mapping[str, PrometheusServer], version: str) -> Callable[[list[Replica], Traffic], None]:
    """A hook that makes the ``otel-bridge`` rule group of ``servers[version]`` (known once the case runs) slow to
    evaluate: its rule file rewritten with a :data:`SLOW_RULE` first, then Prometheus told to reload it (SIGHUP), as a
    platform team adding rules to a running Prometheus does."""

    def hook(replicas: list[Replica], traffic: Traffic) -> None:
        server = servers[version]
        assert server.rules is not None
        assert server.process is not None
        (group,) = server.rules["groups"]
        document = {"groups": [{**group, "rules": [{"record": "test:slow", "expr": SLOW_RULE}, *group["rules"]]}]}
        (server.workdir / "rules.yml").write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
        server.process.send_signal(signal.SIGHUP)

    return hook


@pytest.mark.parametrize("version", PROMETHEUS_VERSIONS)
def test_rules_stay_exact_when_their_evaluation_is_stored_late(
    version: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The rule group turns slow after the bridge started (its evaluations stored ~2 s after the time they stand
    for): a boundary must be represented by the same evaluation on both sides of it, whenever each side reads it, so
    the steps still add up to the run exactly and each stays within its reported lag; replica 0 restarts in step 4, so
    the re-read target's share is taken at those evaluations too."""

    started: dict[str, PrometheusServer] = {}

    @contextmanager
    def stores(workdir: Path, interval_s: float) -> Iterator[tuple[list[Replica], dict[str, PrometheusServer]]]:
        with (
            slow_remote_read() as remote_read,
            environment(workdir, interval_s, (version,), remote_read=[remote_read]) as (replicas, servers),
        ):
            started.update(servers)
            yield replicas, servers

    path = on("rules", version)
    outcome = run_case(
        "slow_rules",
        tmp_path_factory.mktemp(f"slow_rules-{version}"),
        interval_s=1.0,
        contiguous=True,
        drive=drive_contiguous(
            [1.2, 1.2, 1.2, 1.2, 2.8, 1.2, 1.2, 1.2, 1.2, 1.2],
            hooks={1: slow_rule_group(started, version), 4: restart_replica_0(1.0)},
        ),
        paths=[path],
        stores=stores,
    )
    errors = step_errors(outcome, path, lag_slack) + sum_errors(outcome, path)
    assert not errors, report(outcome, path, errors)
