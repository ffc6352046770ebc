"""Rollout endpoints failing on the scrape path: a vLLM restart (counter reset), an endpoint that disappears, and a Ray
node leaving (simulated by Ray's service-discovery file changing under a running bridge; adding and removing a real Ray
node per test is too heavy for the suite).

The boundary scrapes are awaited before tokens are generated, so every window's expected token count is exact.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import pytest

from otel_bridge import Bridge
from otel_bridge.health import SCRAPE_ERRORS
from tests.conftest import Replica
from tests.faults.support import base_config, count_logs, run_steps
from tests.helpers.backends import BackendDouble
from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer

pytestmark = pytest.mark.integration

DELTA = "rollout/vllm/generation_tokens_total/delta"
METRICS = [{"name": "vllm:generation_tokens_total", "type": "counter", "stats": ["delta"]}]


def generate(replica: Replica, tokens: int) -> None:
    replica.sim.complete_request(
        prompt_tokens=8, generation_tokens=tokens, ttft_s=0.01, e2e_s=0.05, queue_s=0.001, itl_s=0.001
    )


class Scraped(Protocol):
    """A target whose scrapes the test can count: a boundary's scrape of it has been made once it counted one more."""

    def wait_for_scrapes(self, count: int, timeout_s: float = 10.0) -> None: ...


class RefusedScrapes(logging.Handler):
    """A target that is gone (nothing listens on its port): its scrapes are counted by the bridge's own log of each
    refused connection, ``GET <url> failed: connection refused`` (one per scrape, relayed from the scrape process)."""

    def __init__(self, url: str) -> None:
        super().__init__(logging.INFO)
        self._line = f"GET {url} failed: connection refused"
        self._cond = threading.Condition()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == self._line:
            with self._cond:
                self.count += 1
                self._cond.notify_all()

    def wait_for_scrapes(self, count: int, timeout_s: float = 10.0) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self.count >= count, timeout_s):
                raise AssertionError(f"{self.count} refused scrapes, expected {count}")


@contextmanager
def refused_scrapes(url: str) -> Iterator[RefusedScrapes]:
    """Counts the refused scrapes of ``url`` while the block runs (the caller sets the log level to INFO)."""
    counter = RefusedScrapes(url)
    transport = logging.getLogger("otel_bridge.http.transport")
    transport.addHandler(counter)
    try:
        yield counter
    finally:
        transport.removeHandler(counter)


class RecordedScrapes:
    """A scripted target: its scrapes are the requests its server recorded."""

    def __init__(self, server: ScriptedHTTPServer) -> None:
        self.server = server

    def wait_for_scrapes(self, count: int, timeout_s: float = 10.0) -> None:
        self.server.wait_for_requests(count, timeout_s)


class Loop:
    """Runs steps: waits for the step's start-boundary scrape of each target it is given, then generates tokens; and
    for the end boundary's before the next step. A target's scrape still under way at the next boundary would serve
    that boundary too (a boundary needs a new scrape only of a target not asked since), so each is awaited, the
    failing ones too: every boundary then has its own scrape of every target, and their counts are exact."""

    def __init__(self, bridge: Bridge, collecting: BackendDouble) -> None:
        self.bridge = bridge
        self.collecting = collecting
        self.expected: dict[int, float] = {}

    def step(self, step: int, tokens: dict[Replica, int], targets: list[Scraped], scraped: dict[Scraped, int]) -> None:
        with self.bridge.step(step):
            for target in targets:
                scraped[target] += 1
                target.wait_for_scrapes(scraped[target])
            for replica, count in tokens.items():
                generate(replica, count)
            self.bridge.log({"actor/loss": float(step)}, step=step)
        for target in targets:  # the end boundary's scrape, before the next boundary (which it would serve too)
            scraped[target] += 1
            target.wait_for_scrapes(scraped[target])
        self.expected[step] = float(sum(tokens.values()))
        self.bridge.collect(step)


def scrape_config(tmp_path: Path, name: str, scrape: dict[str, Any]) -> dict[str, Any]:
    return base_config(tmp_path, name, scrape={"sample_interval_s": 0, "timeout_s": 2, **scrape}, metrics=METRICS)


def test_vllm_restart_resets_counters_without_negative_deltas(tmp_path: Path, replicas: list[Replica]) -> None:
    a, b = replicas
    collecting = BackendDouble()
    config = scrape_config(tmp_path, "restart", {"targets": [a.hostport, b.hostport]})
    scraped: dict[Scraped, int] = {a: 1, b: 1}  # the start-up scrape
    with Bridge.from_config(config, backends=[collecting]) as bridge:
        loop = Loop(bridge, collecting)
        for step in range(10):
            if step in (4, 7):
                a.sim.restart()  # the process restarted: its counters count from zero again
            loop.step(step, {a: 10 + step, b: 100}, [a, b], scraped)
    received = collecting.by_step()
    deltas = {s: received[s][DELTA] for s in range(10)}
    assert all(v >= 0 for v in deltas.values()), deltas
    assert deltas == loop.expected
    assert [received[s]["actor/loss"] for s in range(10)] == [float(s) for s in range(10)]


def test_removed_endpoint_is_counted_and_the_other_replica_still_reported(
    tmp_path: Path, replicas: list[Replica], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    a, b = replicas
    collecting = BackendDouble()
    config = scrape_config(tmp_path, "removed", {"targets": [a.hostport, b.hostport]})
    scraped: dict[Scraped, int] = {a: 1, b: 1}
    steps = 10
    with Bridge.from_config(config, backends=[collecting]) as bridge, refused_scrapes(b.url) as gone:
        loop = Loop(bridge, collecting)
        for step in range(3):
            loop.step(step, {a: 5, b: 50}, [a, b], scraped)
        b.stop()  # the endpoint is gone for good (stale series)
        scraped[gone] = 0
        for step in range(3, steps):
            loop.step(step, {a: 5 + step}, [a, gone], scraped)
        errors_b = bridge.health.counter(SCRAPE_ERRORS, {"instance": b.hostport})
        errors_a = bridge.health.counter(SCRAPE_ERRORS, {"instance": a.hostport})
    received = collecting.by_step()
    assert {s: received[s][DELTA] for s in range(steps)} == loop.expected
    assert errors_a == 0
    assert errors_b == gone.count == 2 * (steps - 3)  # every boundary scrape of b after it went away
    key_b = f"{SCRAPE_ERRORS}/instance.{b.hostport.replace(':', '_')}"
    assert received[steps - 1][key_b] == errors_b
    assert sorted(received) == list(range(steps))
    assert count_logs(caplog, b.hostport) == 1


def test_ray_node_leaving_via_service_discovery_file(
    tmp_path: Path, replicas: list[Replica], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    a, b = replicas
    sd_file = tmp_path / "prom_metrics_service_discovery.json"

    def write_sd(targets: list[str]) -> None:
        tmp = sd_file.with_suffix(".tmp")
        tmp.write_text(json.dumps([{"labels": {"job": "ray"}, "targets": targets}]))
        tmp.replace(sd_file)  # atomically, as Ray does

    write_sd([a.hostport, b.hostport])
    collecting = BackendDouble()
    config = scrape_config(
        tmp_path,
        "ray-node",
        {"targets": "auto", "ray_service_discovery_file": str(sd_file), "refresh_interval_s": 0.1},
    )
    scraped: dict[Scraped, int] = {a: 1, b: 1}
    with Bridge.from_config(config, backends=[collecting]) as bridge:
        loop = Loop(bridge, collecting)
        for step in range(3):
            loop.step(step, {a: 7, b: 70}, [a, b], scraped)
        write_sd([a.hostport])  # the node running b left the cluster
        b.stop()
        deadline = time.monotonic() + 10
        while count_logs(caplog, "scraping 1 target(s)", logging.INFO) == 0:
            assert time.monotonic() < deadline, "the service-discovery change was not picked up"
            time.sleep(0.05)
        for step in range(3, 8):
            loop.step(step, {a: 7 + step}, [a], scraped)
        errors_b = bridge.health.counter(SCRAPE_ERRORS, {"instance": b.hostport})
    received = collecting.by_step()
    assert {s: received[s][DELTA] for s in range(8)} == loop.expected
    assert errors_b == 0  # a node that left is no longer scraped, so it is not an error
    assert [received[s]["actor/loss"] for s in range(8)] == [float(s) for s in range(8)]
    # Issue 14 finding 21: the health keys of a target that left go with it; the live target's stay.
    key_a, key_b = (f"{SCRAPE_ERRORS}/instance.{r.hostport.replace(':', '_')}" for r in (a, b))
    assert key_b in received[2]
    assert key_b not in received[7]
    assert received[7][key_a] == 0


def test_flapping_endpoint_is_logged_once(
    tmp_path: Path, replicas: list[Replica], caplog: pytest.LogCaptureFixture
) -> None:
    """An endpoint failing every other scrape: each failure is counted, the log says so once."""
    caplog.set_level(logging.INFO)
    a = replicas[0]
    calls = {"n": 0}
    lock = threading.Lock()

    def flapping(_request: RecordedRequest) -> Response:
        with lock:
            calls["n"] += 1
            odd = calls["n"] % 2 == 0
        if odd:
            return Response(status=500, body=b"engine busy")
        return Response(body=a.sim.exposition(), headers={"Content-Type": "text/plain; version=0.0.4"})

    collecting = BackendDouble()
    with ScriptedHTTPServer(flapping) as server:
        hostport = server.url.split("//", 1)[1]
        config = scrape_config(tmp_path, "flapping", {"targets": [f"{server.url}/metrics"]})
        with Bridge.from_config(config, backends=[collecting]) as bridge:
            run_steps(bridge, 10, collect=True)
        # Counted once closed: a scrape in flight at any moment has reached the server but not yet the counter (cc34
        # read the counter mid-run and the requests after close, 6 against 7). Close stops new scrapes; the one in
        # flight then is still answered and counted, within scrape.timeout_s.
        deadline = time.monotonic() + 10
        while (errors := bridge.health.counter(SCRAPE_ERRORS, {"instance": hostport})) < len(server.requests) // 2:
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
        failed = len(server.requests) // 2
    assert errors == failed
    # a step's two boundaries may share one scrape (queued while a round ran); the next step's wait for collect()
    # keeps at least one scrape per step
    assert len(server.requests) >= 10
    assert errors >= 5
    assert [collecting.by_step()[s]["actor/loss"] for s in range(10)] == [float(s) for s in range(10)]
    assert count_logs(caplog, hostport) == 1


@pytest.mark.parametrize("location", ["http://[::1", "http://127.0.0.1:1/\udcff"], ids=["bad-ipv6", "non-utf8"])
def test_a_malformed_redirect_does_not_stop_the_sampler(tmp_path: Path, replicas: list[Replica], location: str) -> None:
    """Issue 14 finding 2: one target answering with a malformed ``Location`` is a scrape error of that target; the
    sampler thread lives on and the healthy target is still read at every step."""
    a = replicas[0]
    raw = location.encode("utf-8", "surrogateescape").decode("latin-1")  # the header's bytes as sent

    def redirect(_request: RecordedRequest) -> Response:
        return Response(status=302, headers={"Location": raw})

    collecting = BackendDouble()
    with ScriptedHTTPServer(redirect) as server:
        bad = server.url.split("//", 1)[1]
        config = scrape_config(tmp_path, "redirect", {"targets": [a.hostport, f"{server.url}/metrics"]})
        redirecting = RecordedScrapes(server)
        scraped: dict[Scraped, int] = {a: 1, redirecting: 1}
        with Bridge.from_config(config, backends=[collecting]) as bridge:
            loop = Loop(bridge, collecting)
            for step in range(4):
                loop.step(step, {a: 3 + step}, [a, redirecting], scraped)
            errors = bridge.health.counter(SCRAPE_ERRORS, {"instance": bad})
        requests = len(server.requests)
    received = collecting.by_step()
    assert {s: received[s][DELTA] for s in range(4)} == loop.expected
    # every scrape of the redirecting target failed and was counted: the start-up one and each boundary's
    assert errors == requests == 1 + 2 * 4


def test_a_late_boundary_scrape_is_reported_as_the_boundary_lag(tmp_path: Path, replicas: list[Replica]) -> None:
    """A target that takes 0.4 s to answer is read 0.4 s after the boundary: what it counted in between is in the
    step that ended, and the record says by how much (``otel_bridge/boundary_lag_s``), as the PromQL path does."""
    a = replicas[0]

    def slow(_request: RecordedRequest) -> Response:
        body = a.sim.exposition()
        return Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"}, delay_s=0.4)

    collecting = BackendDouble()
    with ScriptedHTTPServer(slow) as server:
        config = scrape_config(tmp_path, "late", {"targets": [f"{server.url}/metrics"]})
        with Bridge.from_config(config, backends=[collecting]) as bridge:
            run_steps(bridge, 2, collect=True)
    lags = [values["otel_bridge/boundary_lag_s"] for _, values in sorted(collecting.by_step().items())]
    assert all(0.4 <= lag < 2.0 for lag in lags), lags
