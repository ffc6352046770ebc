"""Step windows against a real vLLM (issue 35, point 1): vLLM 0.32's CPU build serving a tiny random Llama, its
counters checked against what its own OpenAI answers say each request cost (``usage``), through a real restart.

One run for the whole module (a vLLM start takes 47-177 s on 2 cores): one server, a real Prometheus 2.42 and 3.16
scraping it every second, and five bridges side by side on the same requests and steps:

- ``scrape``: the scrape path (``scrape.targets``: the server's ``/metrics`` at every boundary and every 0.25 s);
- ``auto@2.42``, ``auto@3.16``: the PromQL path with the default ``prometheus.boundary: auto`` (the target answers, so
  the bridge scrapes it itself at each boundary);
- ``samples@2.42``, ``samples@3.16``: the PromQL path with ``prometheus.boundary: samples`` (Prometheus' own samples
  bound the windows, off by the record's ``otel_bridge/boundary_lag_s`` at most).

Steps tile the run (step 0 begins with ``begin_step``, the others end with ``log()``), each 2 s long or until a request
answered in it was counted and stored by each Prometheus, whichever is later (the first requests of a new process on a
loaded machine take seconds). Requests (:class:`tests.helpers.vllm_requests.Requests`, two clients, 1-12 generated
tokens each) run from just after the first boundary, across every boundary, until right before the last one, which ends
most of a scrape interval after a Prometheus scrape. In step 2 the requests pause, every observer reads the idle server
once more (each Prometheus, and each bridge's sampler between boundaries: what the old process counted after a path's
last reading would be lost to that path), and the server's processes are killed (SIGKILL to its process group, as a
crash); step 2 ends with the port refusing connections, and step 3 starts a new server on the same port (its counters
from zero), waits until it serves, and sends requests again until its end.

Checks, from the request log (no timing asserts): every step of every path lies between the requests wholly inside its
window and those overlapping it (:meth:`Requests.bounds`), the window's boundaries widened by how far their readings
may lie from them: ``BAND_S`` or the record's ``boundary_lag_s`` after each boundary on the paths that read the server
themselves, the lag plus ``BAND_S`` either way on Prometheus' samples; every path's sum over the run equals the run's
``usage`` less what the old process counted after the path's last reading of it, which the step that ends with the
server down reports (``unread_s``; nothing when every sampler read the quiet server, as they do but on a loaded
machine); that step names the server unread on the paths that read it; what Prometheus stores is the colon form
(vLLM's ``/metrics`` route answers the text format whatever the scraper asks).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import requests

from otel_bridge import Bridge
from otel_bridge.config import ScrapeConfig
from otel_bridge.exporters.record import StepRecord
from tests.helpers.logs import LogRecords
from tests.helpers.prometheus_server import PROMETHEUS_VERSIONS, PrometheusServer
from tests.helpers.vllm_requests import BAND_S, Requests, Usage
from tests.helpers.vllm_server import MODEL_NAME, VLLMServer, tiny_llama

pytestmark = [
    pytest.mark.integration,
    pytest.mark.sleeps(20, reason="steps are wall-clock windows of live requests to a real vLLM: six steps of 2 s"),
    # The first test sets the run up: two vLLM starts (47-177 s each on 2 cores, the more the busier) and the steps.
    pytest.mark.timeout(900),
]

INTERVAL_S = 1.0  # Prometheus' scrape interval
SAMPLE_INTERVAL_S = 0.25  # the scrape path's in-step samples
BOUNDARY_SAMPLE_INTERVAL_S = ScrapeConfig.model_fields["sample_interval_s"].default  # the PromQL path's (1 s)
STEP_S = 2.0
LAST_PHASE = 0.75  # the last step ends this much of an interval after a Prometheus (2.42) scrape
RESTART_STEP = 2  # the server is killed in this step; the next one starts a new server
PATHS = ("scrape", *(f"{mode}@{v}" for mode in ("auto", "samples") for v in PROMETHEUS_VERSIONS))
BOUNDARY_READ = ("scrape", "auto")  # modes that read the server themselves at each boundary

METRICS: list[dict[str, Any]] = [
    {"name": "vllm:generation_tokens_total", "type": "counter", "stats": ["delta"]},
    {"name": "vllm:prompt_tokens_total", "type": "counter", "stats": ["delta"]},
    {"name": "vllm:request_success_total", "type": "counter", "stats": ["delta"]},  # summed over finished_reason
    {"name": "vllm:e2e_request_latency_seconds", "type": "histogram", "stats": ["count"]},
]
KEYS = {  # tracker key -> the Usage field it must match
    "rollout/vllm/generation_tokens_total/delta": "tokens",
    "rollout/vllm/prompt_tokens_total/delta": "prompt_tokens",
    "rollout/vllm/request_success_total/delta": "requests",
    "rollout/vllm/e2e_request_latency_seconds/count": "requests",
}
KEY_TOKENS = "rollout/vllm/generation_tokens_total/delta"
LAG_KEY = "otel_bridge/boundary_lag_s"
TARGETS_UNREAD_KEY = "otel_bridge/targets_unread"
UNREAD_PREFIX = "otel_bridge/unread_s/"


def mode_of(path: str) -> str:
    return path.partition("@")[0]


@dataclasses.dataclass
class Run:
    """The module's run: the request log, every path's records, what happened when; servers already stopped."""

    requests: Requests
    records: dict[str, list[StepRecord]]
    hostport: str
    start_s: list[float] = dataclasses.field(default_factory=list)  # each server's seconds until it served
    killed: float = 0.0  # time.time() of the kill
    served_again: float = 0.0  # time.time() when the new server answered /health
    last_scrape: float = 0.0  # Prometheus 2.42's last scrape before the last boundary
    stored_names: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # version -> generation_tokens names
    warnings: list[str] = dataclasses.field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """The requests, the records and the times, as JSON."""
        return {
            "requests": [dataclasses.astuple(a) for a in self.requests.log],
            "records": {
                path: [{"step": r.step, "start": r.window_start, "end": r.time, **r.values} for r in records]
                for path, records in self.records.items()
            },
            "start_s": self.start_s,
            "killed": self.killed,
            "served_again": self.served_again,
            "last_scrape": self.last_scrape,
        }


def bridge_config(path: str, workdir: Path, server: VLLMServer, stores: dict[str, PrometheusServer]) -> dict[str, Any]:
    config: dict[str, Any] = {"metrics": METRICS, "run": {"name": path.replace("@", "-"), "dir": str(workdir / "runs")}}
    mode, _, version = path.partition("@")
    if mode == "scrape":
        config["scrape"] = {"targets": [server.hostport], "sample_interval_s": SAMPLE_INTERVAL_S}
    else:
        config["prometheus"] = {"url": stores[version].url, "scrape_interval_s": INTERVAL_S}
        if mode == "samples":
            config["prometheus"]["boundary"] = "samples"
            config["prometheus"]["recording_rules"] = "off"
    return config


def sleep_until(t: float) -> None:
    remaining = t - time.time()
    if remaining > 0:
        time.sleep(remaining)


def end_steps(bridges: Sequence[Bridge], step: int) -> float:
    """End ``step`` on every bridge (step 0 by ``end_step``, the others by ``log()``); the boundary's time."""
    t = time.time()
    for bridge in bridges:
        if step == 0:
            bridge.end_step(0)
        else:
            bridge.log({}, step=step)
    return t


def after_scrape(prometheus: PrometheusServer, instance: str, earliest: float) -> float:
    """The first time >= ``earliest`` that lies ``LAST_PHASE`` of an interval after a scrape of ``instance``, and the
    last scrape before it."""
    (result,) = prometheus.query(f'timestamp(up{{instance="{instance}"}})')
    scrape = float(result["value"][1])
    while scrape + LAST_PHASE * INTERVAL_S < earliest:
        scrape += INTERVAL_S
    return scrape + LAST_PHASE * INTERVAL_S


def drive(
    run: Run, bridges: Sequence[Bridge], server: VLLMServer, stores: dict[str, PrometheusServer], stack: ExitStack
) -> None:
    """Six contiguous steps with requests across every boundary; the restart in steps 2-3 (module docstring). The new
    server is stopped by ``stack``, after the bridges read the last boundary."""
    traffic = run.requests

    def run_step(began: float) -> float:
        """Requests until ``STEP_S`` after ``began`` and until one was answered since then (a loaded machine answers
        the first requests of a new process seconds late), counted by the server (``BAND_S`` after its answer) and in
        every Prometheus (a scrape after that: Prometheus' samples bound the step on the ``samples`` paths); the step's
        end. Only a new process' step waits for more than its ``STEP_S``: in cc29 (four workers) its first answer
        came last in the step, and both ``samples`` paths read it in the next one."""
        sleep_until(began + STEP_S)
        traffic.wait_for_answer(after=began)
        counted = min(a.answered for a in traffic.log if a.answered > began) + BAND_S
        sleep_until(counted)
        for prometheus in stores.values():
            prometheus.wait_for_scrapes_after(counted)
        return time.time()

    for bridge in bridges:
        bridge.begin_step(0)
    time.sleep(BAND_S)  # the first requests well after the first boundary
    began = time.time()
    traffic.start()
    for step in range(RESTART_STEP):
        began = run_step(began)
        end_steps(bridges, step)
    # Step 2: requests, then a quiet spell every observer reads, then the kill; the step ends with the port closed.
    sleep_until(began + 0.8)
    traffic.pause()
    quiet = time.time() + BAND_S
    for prometheus in stores.values():
        prometheus.wait_for_scrapes_after(quiet)
    # And the bridges' own samplers: the scrape path's, and the PromQL path's boundary scrapes, which sample every
    # scrape.sample_interval_s (its default here) between boundaries; a count made after a sampler's last reading of
    # the old process would be lost to that path (the record's unread_s says from when).
    sleep_until(quiet + BOUNDARY_SAMPLE_INTERVAL_S + BAND_S)
    server.kill()
    run.killed = time.time()
    sleep_until(run.killed + 0.5)
    end_steps(bridges, RESTART_STEP)
    # Step 3: a new process on the same port, from zero, requests again until the step's end.
    replacement = VLLMServer(server.workdir.with_name("vllm-restarted"), server.model, port=server.port)
    stack.callback(replacement.stop)
    replacement.start()
    assert replacement.started_s is not None
    run.start_s.append(replacement.started_s)
    run.served_again = time.time()
    traffic.resume()
    began = run_step(run.served_again)
    end_steps(bridges, RESTART_STEP + 1)
    # Step 4, then the last step, which ends LAST_PHASE of an interval after a Prometheus scrape: requests until
    # right before it, so most of an interval of them lies after Prometheus' last sample.
    began = run_step(began)
    end_steps(bridges, RESTART_STEP + 2)
    traffic.wait_for_answer(after=began)
    end = after_scrape(stores[PROMETHEUS_VERSIONS[0]], server.hostport, max(time.time(), began + STEP_S))
    run.last_scrape = end - LAST_PHASE * INTERVAL_S
    sleep_until(end - BAND_S - 0.1)
    traffic.stop()
    last = max(a.answered for a in traffic.log)
    sleep_until(max(end, last + BAND_S))
    end_steps(bridges, RESTART_STEP + 3)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    workdir = tmp_path_factory.mktemp("real_vllm")
    model = tiny_llama()
    with ExitStack() as stack, LogRecords("otel_bridge") as logged:
        server = VLLMServer(workdir / "vllm", model)
        stack.callback(server.stop)
        server.start()
        assert server.started_s is not None
        # One request before the run: its costs (and the first request's warm-up) are before the first boundary.
        warm = requests.post(
            f"{server.url}/v1/completions", json={"model": MODEL_NAME, "prompt": "one", "max_tokens": 1}, timeout=60
        )
        warm.raise_for_status()
        stores: dict[str, PrometheusServer] = {}
        for version in PROMETHEUS_VERSIONS:
            stores[version] = PrometheusServer(
                workdir / f"prometheus-{version}", [server.hostport], scrape_interval_s=INTERVAL_S, version=version
            )
            stack.callback(stores[version].stop)
            stores[version].start()
        for store in stores.values():
            store.wait_for_samples('{__name__=~"vllm.generation_tokens_total"}', count=2)
        traffic = Requests(server.url, MODEL_NAME, seed=35)
        stack.callback(traffic.stop)
        result = Run(traffic, {}, server.hostport, start_s=[server.started_s])
        bridges = [stack.enter_context(Bridge.from_config(bridge_config(p, workdir, server, stores))) for p in PATHS]
        drive(result, bridges, server, stores, stack)
        for bridge in bridges:
            bridge.close()  # reads the last boundary (samples: the first samples after it) with the server up
        result.stored_names = {
            version: sorted(r["metric"]["__name__"] for r in store.query('{__name__=~"vllm.generation_tokens_total"}'))
            for version, store in stores.items()
        }
        steps = range(RESTART_STEP + 4)
        for path, bridge in zip(PATHS, bridges, strict=True):
            found = [bridge.record(step) for step in steps]
            missing = [step for step, record in zip(steps, found, strict=True) if record is None]
            assert not missing, f"{path}: no record for steps {missing}"
            result.records[path] = [record for record in found if record is not None]
        result.warnings = [r.getMessage() for r in logged.records if r.levelno >= logging.WARNING]
    (workdir / "run.json").write_text(json.dumps(result.as_json(), indent=1), encoding="utf-8")  # for a post-mortem
    return result


# -- checks -----------------------------------------------------------------------------------------------------------


def window_of(record: StepRecord) -> tuple[float, float]:
    assert record.window_start is not None, f"step {record.step} has no window start"
    return record.window_start, record.time


def reading_spans(path: str, record: StepRecord) -> tuple[tuple[float, float], tuple[float, float]]:
    """When the window's start and end may have been read: after each boundary, within ``BAND_S`` or the reported
    lag, on the paths that read the server themselves; within the lag plus ``BAND_S`` either way on Prometheus'
    samples."""
    start, end = window_of(record)
    lag = record.values.get(LAG_KEY, 0.0)
    if mode_of(path) in BOUNDARY_READ:
        band = max(BAND_S, lag + 0.05)
        return (start, start + band), (end, end + band)
    reach = lag + BAND_S
    return (start - reach, start + reach), (end - reach, end + reach)


def unread_for(record: StepRecord, hostport: str) -> float | None:
    """The record's ``unread_s`` for ``hostport`` (seconds since the path last read it), or ``None``."""
    names = (hostport, hostport.replace(":", "_"))
    found = [v for k, v in record.values.items() if k.startswith(UNREAD_PREFIX) and any(n in k for n in names)]
    return max(found) if found else None


def lost_in_restart(run: Run, path: str) -> tuple[Usage, Usage]:
    """``(least, most)`` of what the old process counted after ``path`` last read it, lost to that path
    (docs/step-numbers.md, unread targets): when the step that ends with the server down names it unread, its last
    reading was ``unread_s`` before that step's end. The quiet spell before the kill makes it nothing unless a sampler
    ran late."""
    (down,) = (r for r in run.records[path] if r.step == RESTART_STEP)
    unread = unread_for(down, run.hostport)
    if unread is None:
        return Usage(), Usage()
    last_read = down.time - unread
    old = [a for a in run.requests.log if a.sent < run.killed]
    least = sum((a.usage for a in old if a.sent >= last_read), Usage())
    most = sum((a.usage for a in old if a.answered + BAND_S > last_read), Usage())
    return least, most


def step_errors(run: Run, path: str) -> list[str]:
    """Each step between the requests wholly inside its window and those overlapping it (the step that ends with the
    server down less what the path lost in the restart)."""
    errors = []
    _, lost = lost_in_restart(run, path)
    for record in run.records[path]:
        start, end = window_of(record)
        least, most = run.requests.bounds(*reading_spans(path, record))
        for key, what in KEYS.items():
            value = record.values.get(key)
            low = least.get(what) - (lost.get(what) if record.step == RESTART_STEP else 0)
            if value is None:
                errors.append(f"step {record.step} {key}: missing (between {low} and {most.get(what)})")
            elif not low <= value <= most.get(what):
                errors.append(
                    f"step {record.step} ({end - start:.2f} s, lag {record.values.get(LAG_KEY)}) {key}: {value:g}, "
                    f"not between {low} and {most.get(what)}"
                )
    return errors


def sum_errors(run: Run, path: str) -> list[str]:
    """The run's sums: the run's usage, less what the path lost in the restart (nothing, unless a sampler ran late)."""
    total = run.requests.total()
    least, most = lost_in_restart(run, path)
    errors = []
    for key, what in KEYS.items():
        got = sum(r.values.get(key, 0.0) for r in run.records[path])
        if not total.get(what) - most.get(what) <= got <= total.get(what) - least.get(what):
            errors.append(
                f"sum over the run of {key}: {got:g}, usage says {total.get(what)}, of which "
                f"{least.get(what)}..{most.get(what)} counted after the path's last reading of the old process"
            )
    return errors


def report(run: Run, path: str, errors: list[str]) -> str:
    """The errors, then every step of ``path``: its window, lag, requests counted and the bounds of that count."""
    first = run.records[path][0].window_start or 0.0
    lines = []
    for record in run.records[path]:
        start, end = window_of(record)
        least, most = run.requests.bounds(*reading_spans(path, record))
        counted = record.values.get("rollout/vllm/request_success_total/delta")
        tokens = record.values.get(KEY_TOKENS)
        others = {
            p: (r.values.get("rollout/vllm/request_success_total/delta"), r.values.get(KEY_TOKENS))
            for p, records in run.records.items()
            for r in records
            if r.step == record.step and p != path
        }
        lines.append(
            f"step {record.step} ({start - first:.3f}, {end - first:.3f}] lag {record.values.get(LAG_KEY)}: "
            f"{counted} requests ({least.requests}..{most.requests}), {tokens} tokens ({least.tokens}..{most.tokens});"
            f" (requests, tokens) of the other paths: {others}"
        )
    sent = [f"{a.sent - first:.3f}..{a.answered - first:.3f}" for a in run.requests.log[:3]]
    return (
        f"{path}: {len(errors)} problem(s); the run's usage {run.requests.total()} in {len(run.requests.log)} "
        f"requests, servers ready after {[round(s, 1) for s in run.start_s]} s\n  "
        + "\n  ".join([*errors, *lines, f"first requests (s after the first boundary): {sent}"])
    )


def test_requests_ran_in_every_step_and_across_its_boundaries(run: Run) -> None:
    """The run's preconditions: every request was answered; every step but the one that ends with the server down has
    requests answered in it; some requests were running at a boundary between two steps."""
    assert not run.requests.failures, run.requests.failures
    records = run.records["scrape"]
    empty = [r.step for r in records if r.step != RESTART_STEP and not run.requests.answered_between(*window_of(r))]
    assert not empty, f"steps without requests: {empty} ({len(run.requests.log)} requests in all)"
    boundaries = [r.time for r in records[:-1]]
    across = [b for b in boundaries if any(a.sent < b < a.answered for a in run.requests.log)]
    assert across, f"no request was running at any of the boundaries {boundaries}"


@pytest.mark.parametrize("path", PATHS)
def test_every_step_and_the_run_match_the_usage(path: str, run: Run) -> None:
    """Each step within what its boundaries' readings allow; the run's sums exact, the restart included."""
    errors = step_errors(run, path) + sum_errors(run, path)
    if mode_of(path) == "samples":
        for record in run.records[path]:
            lag = record.values.get(LAG_KEY)
            if lag is None or not 0.0 <= lag <= INTERVAL_S + 1.0:
                errors.append(f"step {record.step}: {LAG_KEY} = {lag}, not within [0, one interval + 1 s]")
    assert not errors, report(run, path, errors)


@pytest.mark.parametrize("path", PATHS)
def test_the_restarted_server_is_named_while_down_and_counted_from_zero(path: str, run: Run) -> None:
    """The step that ends with the port closed names the server unread on the paths that read it themselves (on
    Prometheus' samples it may still hold the last sample, from before the kill); the steps after it, with the new
    process serving, name it on none, and the step of the new process holds its requests."""
    records = {r.step: r for r in run.records[path]}
    down = records[RESTART_STEP]
    if mode_of(path) in BOUNDARY_READ:
        health = {k: v for k, v in down.values.items() if k.startswith("otel_bridge/")}
        assert down.values.get(TARGETS_UNREAD_KEY) == 1, health
        assert unread_for(down, run.hostport) is not None, health
    for step in range(RESTART_STEP + 1, RESTART_STEP + 4):
        assert records[step].values.get(TARGETS_UNREAD_KEY, 0) == 0, (step, records[step].values)
    back = records[RESTART_STEP + 1]
    assert back.values.get("rollout/vllm/request_success_total/delta", 0) > 0, back.values


def test_the_last_step_holds_requests_after_prometheus_last_sample(run: Run) -> None:
    """The case's precondition: requests were answered between Prometheus' last scrape and the last boundary (the
    last step's numbers are checked with the others)."""
    last = run.records["scrape"][-1]
    assert run.requests.answered_between(run.last_scrape, last.time) > 0


def test_prometheus_stores_the_colon_names(run: Run) -> None:
    """vLLM 0.32's ``/metrics`` route answers ``text/plain; version=1.0.0`` whatever the scraper asks (no
    OpenMetrics negotiation), so both Prometheus versions store the names as served."""
    for version in PROMETHEUS_VERSIONS:
        assert run.stored_names[version] == ["vllm:generation_tokens_total"], run.stored_names


def test_the_servers_started(run: Run, request: pytest.FixtureRequest) -> None:
    """Both starts are timed (the JUnit report keeps their seconds; every failure report of this module says them)."""
    assert len(run.start_s) == 2, run.start_s
    request.node.user_properties.append(("vllm_start_s", " ".join(f"{s:.1f}" for s in run.start_s)))
