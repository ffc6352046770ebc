"""A phase boundary costs the training thread what a step boundary costs, also when a rollout server stops answering
(issue 15 point 4: no network I/O on the training thread). One replica answers the start-up scrape and then hangs every
scrape until ``scrape.timeout_s``; the phases' boundaries return at once and the healthy replica's phase figures are
still recorded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from otel_bridge import Bridge
from tests.conftest import Replica
from tests.faults.support import base_config
from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer

pytestmark = pytest.mark.integration

TIMEOUT_S = 3.0
TOKENS = "rollout/vllm/generation_tokens_total/delta"


def test_phase_boundaries_return_at_once_while_a_target_hangs(tmp_path: Path, replicas: list[Replica]) -> None:
    healthy = replicas[0]
    answered = threading.Event()

    def hang_after_the_first(request: RecordedRequest) -> Response:
        if not answered.is_set():
            answered.set()
            return Response(body=b"# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total 0\n")
        return Response(hang=True)

    with ScriptedHTTPServer(hang_after_the_first) as hanging:
        config = base_config(
            tmp_path,
            "hang",
            scrape={"targets": [healthy.url, hanging.url], "sample_interval_s": 3600, "timeout_s": TIMEOUT_S},
            metrics=[{"name": "vllm:generation_tokens_total", "type": "counter", "stats": ["delta"]}],
        )
        timings: list[float] = []
        boundaries = 0

        def timed(boundary: Callable[[str], None], name: str) -> None:
            nonlocal boundaries
            started = time.perf_counter()
            boundary(name)
            timings.append(time.perf_counter() - started)
            boundaries += 1
            healthy.wait_for_scrapes(1 + boundaries)  # the boundary's own scrape: traffic after this lies after it

        with Bridge.from_config(config) as bridge:
            for step in range(3):
                with bridge.step(step):
                    boundaries += 1
                    healthy.wait_for_scrapes(1 + boundaries)
                    for name in ("gen", "update"):
                        timed(bridge.begin_phase, name)
                        if name == "gen":
                            healthy.sim.complete_request(4, 5, 0.01, 0.1, 0.0, 0.001)
                        time.sleep(0.05)
                        timed(bridge.end_phase, name)
                boundaries += 1
                healthy.wait_for_scrapes(1 + boundaries)
            records = [bridge.collect(step, timeout_s=60) for step in range(3)]
    assert len(timings) == 12
    assert max(timings) < 0.25, f"a phase boundary waited for the network: {max(timings):.3f}s"
    assert [r[f"phase/gen/{TOKENS}"] for r in records] == [5.0, 5.0, 5.0], records  # the healthy replica's
    assert [r[f"phase/update/{TOKENS}"] for r in records] == [0.0, 0.0, 0.0], records
