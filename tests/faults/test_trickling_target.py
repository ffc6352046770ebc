"""One scrape target trickling its answer among healthy ones, with steps much shorter than ``scrape.timeout_s``.

Every scrape round waits for its slowest target (the trickler, cut at ``scrape.timeout_s``), and the sampler used to
take one round per boundary in order: with steps shorter than a round, the boundaries queued without bound, the
steps' readings missed their deadline one after another, and the healthy replicas were blanked out with the
trickler (issue 14 point 1; the soak saw 0 of 50 records with readings during a trickle). Boundaries that queue while
a round runs are now served by the next round together: each is read late by what the record's
``otel_bridge/boundary_lag_s`` says, and nothing is lost or counted twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_bridge import Bridge
from otel_bridge.health import BOUNDARY_LAG, SCRAPE_ERRORS
from tests.conftest import Replica
from tests.faults.support import base_config
from tests.helpers.backends import BackendDouble
from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer

pytestmark = [
    pytest.mark.integration,
    pytest.mark.sleeps(
        10, reason="steps of 1.3 s: each step's readings are produced before the next, so no backlog hides the wait"
    ),
    pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning"),  # the sampler crashed at close
]

DELTA = "rollout/vllm/generation_tokens_total/delta"
METRICS = [{"name": "vllm:generation_tokens_total", "type": "counter", "stats": ["delta"]}]
STEPS = 24
TIMEOUT_S = 1.0
# Tokens come this long after a step begins: a boundary read later than that (the scrape child at nice +10 on a
# loaded 2-core machine) would move them into the gap between two steps, which no step counts.
QUIET_S = 0.15


@pytest.fixture
def trickler() -> Iterator[ScriptedHTTPServer]:
    def handle(request: RecordedRequest) -> Response:
        return Response(body=b"# TYPE vllm:generation_tokens_total counter\n", trickle_s=2.0)

    server = ScriptedHTTPServer(handle)
    try:
        yield server
    finally:
        server.close()


def test_a_trickling_target_never_blanks_out_the_healthy_ones(
    tmp_path: Path, replicas: list[Replica], trickler: ScriptedHTTPServer
) -> None:
    a, b = replicas
    collecting = BackendDouble()
    scrape = {
        "targets": [a.url, b.url, trickler.url],
        "sample_interval_s": 0.25,
        "timeout_s": TIMEOUT_S,
    }
    config = base_config(tmp_path, "trickle", scrape=scrape, metrics=METRICS)
    generated = 0
    with Bridge.from_config(config, backends=[collecting]) as bridge:
        scrapes = [a.scrapes, b.scrapes]
        bridge.begin_step(0)
        before = a.sim.totals()["vllm:generation_tokens_total"] + b.sim.totals()["vllm:generation_tokens_total"]
        # the run's first boundary read before any token (what comes before it is in no step): the next scrape of
        # each healthy replica after an in-step sample possibly under way
        a.wait_for_scrapes(scrapes[0] + 2)
        b.wait_for_scrapes(scrapes[1] + 2)
        for step in range(STEPS):
            if step:
                bridge.begin_step(step)
            time.sleep(QUIET_S)
            for replica in (a, b):
                replica.sim.complete_request(
                    prompt_tokens=4, generation_tokens=10 + step, ttft_s=0.01, e2e_s=0.02, queue_s=0.0, itl_s=0.001
                )
                generated += 10 + step
            time.sleep(0.05)
            bridge.end_step(step)
    after = a.sim.totals()["vllm:generation_tokens_total"] + b.sim.totals()["vllm:generation_tokens_total"]
    assert after - before == generated
    received = collecting.by_step()
    assert sorted(received) == list(range(STEPS))
    without = [step for step in range(STEPS) if DELTA not in received[step]]
    assert not without, f"steps without the healthy replicas' readings: {without}"
    deltas = [received[step][DELTA] for step in range(STEPS)]
    assert sum(deltas) == generated, (str(deltas), [received[step].get(BOUNDARY_LAG) for step in range(STEPS)])
    hostport = trickler.url.split("//")[1].rstrip("/")
    names = (hostport, hostport.replace(":", "_"))
    last = received[STEPS - 1]
    trickler_errors = [v for k, v in last.items() if k.startswith(SCRAPE_ERRORS) and any(n in k for n in names)]
    assert trickler_errors, last
    assert trickler_errors[0] > 0, last
    assert all(BOUNDARY_LAG in received[step] for step in range(STEPS))


@pytest.mark.parametrize("isolation", ["process", "thread"])
def test_a_trickler_never_blanks_the_healthy_replica_when_the_produce_timeout_is_short(
    tmp_path: Path, replicas: list[Replica], isolation: str
) -> None:
    """Issue 27 finding 4: with ``delivery.produce_timeout_s`` 3 s and ``scrape.timeout_s`` 2 s, the healthy
    replica's keys were in 0 of 15 records: the scrape path waited for the trickler up to its own produce timeout
    while the step's deadline (the same, begun earlier) dropped every reading. The wait now ends inside the step's
    deadline: the trickler is unread there and the healthy replica's readings arrive."""

    def handle(request: RecordedRequest) -> Response:
        return Response(body=b"# TYPE vllm:generation_tokens_total counter\n", trickle_s=1.2)

    slow = ScriptedHTTPServer(handle)
    a = replicas[0]
    collecting = BackendDouble()
    # The trickler answers, slowly (1.2 s, within scrape.timeout_s), and is always being read (sampled every 0.2 s):
    # the reading of a boundary comes 1.2 to 2.4 s after it, always later than the step's 1 s deadline.
    scrape = {"targets": [a.url, slow.url], "sample_interval_s": 0.2, "timeout_s": 2.0, "isolation": isolation}
    config = base_config(tmp_path, isolation, scrape=scrape, metrics=METRICS, delivery={"produce_timeout_s": 1.0})
    steps = 6
    try:
        with Bridge.from_config(config, backends=[collecting]) as bridge:
            for step in range(steps):
                a.sim.complete_request(
                    prompt_tokens=4, generation_tokens=10, ttft_s=0.01, e2e_s=0.02, queue_s=0.0, itl_s=0.001
                )
                bridge.log({"actor/loss": float(step)}, step=step)
                time.sleep(1.3)  # each step's readings are produced before the next: no backlog hides the wait
    finally:
        slow.close()
    received = collecting.by_step()
    assert sorted(received) == list(range(steps))
    without = [step for step in range(1, steps) if DELTA not in received[step]]
    assert not without, (without, {k: v for k, v in received[without[0]].items() if k.startswith("otel_bridge/")})
    hostport = slow.url.split("//")[1].rstrip("/")
    assert any(k.startswith("otel_bridge/unread_s/") and hostport.split(":")[1] in k for k in received[steps - 1])
