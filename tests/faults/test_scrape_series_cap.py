"""A /metrics page with 400,000 series of a configured metric (16 MB, under the byte cap) on the scrape path (issue 14,
finding 19): the page is refused at ``scrape.max_series`` (counted, one WARNING naming the key), the healthy replica's
readings still arrive, and the trainer's thread is not stalled by the parsing."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from otel_bridge import Bridge
from tests.faults.support import base_config, count_logs
from tests.helpers.backends import BackendDouble
from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer

pytestmark = pytest.mark.integration

SERIES = 400_000
METRICS = [
    {"name": "vllm:num_requests_running", "type": "gauge", "stats": ["last"]},
    {"name": "vllm:generation_tokens_total", "type": "counter", "stats": ["delta"]},
]
GAUGE = "rollout/vllm/num_requests_running/last"
HEADER = "# TYPE vllm:num_requests_running gauge\n"


def huge_page() -> bytes:
    lines = [HEADER] + [f'vllm:num_requests_running{{replica="{i}"}} 1\n' for i in range(SERIES)]
    return "".join(lines).encode()


class HealthyReplica:
    def __init__(self) -> None:
        self.tokens = 0.0
        self.server = ScriptedHTTPServer(self._answer)

    def _answer(self, request: RecordedRequest) -> Response:
        self.tokens += 5.0
        body = (
            f'{HEADER}vllm:num_requests_running{{replica="healthy"}} 3\n'
            "# TYPE vllm:generation_tokens_total counter\n"
            f"vllm:generation_tokens_total {self.tokens}\n"
        )
        return Response(body=body.encode(), headers={"Content-Type": "text/plain; version=0.0.4"})


def test_a_page_over_the_series_cap_is_refused_and_does_not_stall_the_trainer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="otel_bridge")
    page = huge_page()
    assert 12_000_000 < len(page) < 20_000_000  # under scrape.max_response_bytes' default
    huge = ScriptedHTTPServer(lambda _r: Response(body=page, headers={"Content-Type": "text/plain"}))
    healthy = HealthyReplica()
    collecting = BackendDouble()
    targets = [f"127.0.0.1:{healthy.server.port}", f"127.0.0.1:{huge.port}"]
    scrape = {"targets": targets, "sample_interval_s": 0.2, "timeout_s": 10}
    config = base_config(tmp_path, "huge", scrape=scrape, metrics=METRICS, startup="degrade")
    gaps: list[float] = []
    try:
        with Bridge.from_config(config, backends=[collecting]) as bridge:
            for step in range(4):
                with bridge.step(step):  # the training thread: a tight loop, its longest pause is the stall
                    last = time.perf_counter()
                    end = last + 0.75
                    while (now := time.perf_counter()) < end:
                        gaps.append(now - last)
                        last = now
                bridge.collect(step)
    finally:
        huge.close()
        healthy.server.close()
    records = collecting.by_step()
    assert sorted(records) == [0, 1, 2, 3]
    for step in (1, 2, 3):
        assert records[step][GAUGE] == 3.0  # the healthy replica only: the huge page never counts
        assert records[step]["rollout/vllm/generation_tokens_total/delta"] > 0
    huge_errors = records[3][f"otel_bridge/scrape_errors/instance.127.0.0.1_{huge.port}"]
    assert huge_errors >= 4
    assert count_logs(caplog, "scrape.max_series") == 1
    assert max(gaps) < 0.5, f"the training thread stalled {max(gaps) * 1000:.0f} ms"


def test_scrape_max_series_is_a_config_key(tmp_path: Path) -> None:
    """A page exactly at the cap (2 series of the configured metrics) is read."""
    healthy = HealthyReplica()
    collecting = BackendDouble()
    scrape = {"targets": [f"127.0.0.1:{healthy.server.port}"], "sample_interval_s": 0, "max_series": 2}
    try:
        with Bridge.from_config(
            base_config(tmp_path, "cap", scrape=scrape, metrics=METRICS), backends=[collecting]
        ) as b:
            with b.step(0):
                pass
            b.collect(0)
    finally:
        healthy.server.close()
    assert collecting.by_step()[0][GAUGE] == 3.0
