"""A store that answers with warnings (Thanos' partial responses when a store is unreachable, a Mimir querier that
could not reach every ingester) may have left series out: the step keeps what it got, and the record and the log say
that the answer was partial, never silently."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_bridge import Bridge
from tests.helpers.http_servers import (
    RecordedRequest,
    Response,
    ScriptedHTTPServer,
    json_response,
    prom_success,
    prom_vector,
)
from tests.helpers.logs import LogRecords

PARTIAL = "No StoreAPIs matched for this query"  # what Thanos' querier says when a store is out of reach


def partial_querier(request: RecordedRequest) -> Response:
    """Answers like a Thanos querier with one store down: every query succeeds with a warning."""
    if request.path.endswith("/targets"):
        return json_response({"status": "success", "data": {"activeTargets": [], "droppedTargets": []}})
    if request.path.endswith("/buildinfo"):
        return prom_success({"version": "0.39.2", "revision": "", "branch": "", "goVersion": "go1.25"})
    query = request.param("query") or ""
    if "unless count_over_time" in query:  # every series has arrived after the window's end
        return prom_vector([])
    result = [{"metric": {"otel_bridge_q": "0/last"}, "value": [1.0, "3"]}]
    return prom_success({"resultType": "vector", "result": result}, warnings=[PARTIAL])


@pytest.fixture
def querier() -> Iterator[ScriptedHTTPServer]:
    server = ScriptedHTTPServer(partial_querier)
    try:
        yield server
    finally:
        server.close()


def test_a_partial_answer_is_counted_in_the_record_and_logged_once(tmp_path: Path, querier: ScriptedHTTPServer) -> None:
    config = {
        "prometheus": {"url": querier.url, "retries": 0, "scrape_interval_s": 1.0},
        "metrics": [{"name": "vllm:num_requests_running", "type": "gauge", "stats": ["last"]}],
        "run": {"name": "partial", "dir": str(tmp_path)},
    }
    with LogRecords("otel_bridge") as logged, Bridge.from_config(config) as bridge:
        for step in range(3):
            with bridge.step(step):
                bridge.log({"actor/loss": 1.0}, step=step)
        records = [bridge.collect(step) for step in range(3)]
    assert [r["rollout/vllm/num_requests_running/last"] for r in records] == [3.0, 3.0, 3.0]  # kept, not dropped
    assert [r["otel_bridge/query_warnings"] for r in records] == [1.0, 2.0, 3.0]  # one partial answer per step
    warned = [r.getMessage() for r in logged.records if r.levelno == logging.WARNING and PARTIAL in r.getMessage()]
    assert len(warned) == 1, warned  # rate-limited
    assert "otel_bridge/query_warnings" in warned[0]
