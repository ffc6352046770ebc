"""Every HTTP attempt ends by its deadline (``prometheus.timeout_s`` / ``scrape.timeout_s``), even against a server that
trickles its answer one byte every 2 s and so never lets a per-read timeout expire (issue 14, point 1).

Real servers on 127.0.0.1; both callers of the transport: the PromQL client and a ``/metrics`` endpoint.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from otel_bridge.config import PrometheusConfig
from otel_bridge.errors import PrometheusUnreachableError, ScrapeError
from otel_bridge.http.attempt_deadline import GRACE_S
from otel_bridge.http.transport import TransportOptions
from otel_bridge.producers.promql import client_for
from otel_bridge.producers.scrape._internal.endpoint import MetricsEndpoint
from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer, prom_vector, sequence

TRICKLE_S = 2.0  # one byte every 2 s: each read returns well within any read timeout above it
TIMEOUT_S = 3.0
SLACK_S = 1.0  # scheduling on a shared machine


def trickling(body: bytes, *, body_only: bool = False) -> Response:
    return Response(body=body, headers={"Content-Type": "text/plain"}, trickle_s=TRICKLE_S, trickle_body_only=body_only)


@pytest.fixture
def server_for() -> Iterator[list[ScriptedHTTPServer]]:
    servers: list[ScriptedHTTPServer] = []
    yield servers
    for server in servers:
        server.close()


def test_a_trickling_prometheus_is_cut_at_the_deadline_and_the_client_recovers(
    server_for: list[ScriptedHTTPServer],
) -> None:
    answer = prom_vector([({"job": "vllm"}, 1.0)])
    server = ScriptedHTTPServer(sequence(trickling(answer.body), answer))
    server_for.append(server)
    with client_for(PrometheusConfig(timeout_s=TIMEOUT_S, retries=0), server.url) as client:
        started = time.monotonic()
        with pytest.raises(PrometheusUnreachableError) as caught:
            client.query("up")
        elapsed = time.monotonic() - started
        assert TIMEOUT_S - 0.1 <= elapsed < TIMEOUT_S + GRACE_S + SLACK_S
        message = str(caught.value)
        assert f"no complete answer within {TIMEOUT_S:g}s (deadline)" in message
        assert "raise prometheus.timeout_s" in message
        assert len(server.requests) == 1
        # the cut connection is not reused: the next query gets a fresh one and its answer
        assert client.query("up").series[0].labels == {"job": "vllm"}
    assert len(server.requests) == 2


def test_each_retry_gets_a_fresh_deadline(server_for: list[ScriptedHTTPServer]) -> None:
    timeout_s = 1.5
    server = ScriptedHTTPServer(lambda _request: Response(body=b"x" * 100, trickle_s=1.0))
    server_for.append(server)
    config = PrometheusConfig(timeout_s=timeout_s, retries=1, backoff_s=0.01)
    with client_for(config, server.url) as client:
        started = time.monotonic()
        with pytest.raises(PrometheusUnreachableError, match=r"\(2 attempts\): no complete answer within 1.5s"):
            client.query("up")
        elapsed = time.monotonic() - started
    assert 2 * timeout_s - 0.1 <= elapsed < 2 * (timeout_s + GRACE_S) + SLACK_S
    assert len(server.requests) == 2


def test_a_metrics_endpoint_trickling_its_body_is_cut_at_the_deadline(server_for: list[ScriptedHTTPServer]) -> None:
    server = ScriptedHTTPServer(lambda _request: trickling(b"vllm:num_requests_running 1\n" * 10, body_only=True))
    server_for.append(server)
    endpoint = MetricsEndpoint(
        f"{server.url}/metrics", TransportOptions(timeout_s=TIMEOUT_S, max_response_bytes=20_000_000)
    )
    try:
        started = time.monotonic()
        with pytest.raises(ScrapeError) as caught:
            endpoint.fetch()
        elapsed = time.monotonic() - started
    finally:
        endpoint.close()
    assert TIMEOUT_S - 0.1 <= elapsed < TIMEOUT_S + GRACE_S + SLACK_S
    assert f"the answer did not finish within {TIMEOUT_S:g}s (deadline)" in str(caught.value)
    assert "raise scrape.timeout_s" in str(caught.value)


def test_a_slow_answer_that_finishes_in_time_is_read_whole(server_for: list[ScriptedHTTPServer]) -> None:
    body = b"vllm:num_requests_running 7\n"
    server = ScriptedHTTPServer(lambda _request: Response(body=body, trickle_s=0.02, trickle_body_only=True))
    server_for.append(server)
    endpoint = MetricsEndpoint(
        f"{server.url}/metrics", TransportOptions(timeout_s=TIMEOUT_S, max_response_bytes=20_000_000)
    )
    try:
        assert endpoint.fetch() == body.decode()
    finally:
        endpoint.close()


def test_a_finished_request_leaves_its_pooled_connection_alone(server_for: list[ScriptedHTTPServer]) -> None:
    """The first query's deadline passes while the second one waits on the same kept-alive connection."""
    timeout_s = 0.5
    answer = prom_vector([({}, 2.0)])

    def handler(request: RecordedRequest) -> Response:
        return answer if request.param("query") == "first" else Response(**{**vars(answer), "delay_s": 0.4})

    server = ScriptedHTTPServer(handler)
    server_for.append(server)
    with client_for(PrometheusConfig(timeout_s=timeout_s, retries=0), server.url) as client:
        client.query("first")
        time.sleep(timeout_s + GRACE_S - 0.2)  # the first deadline's watchdog fires during the second query
        assert client.query("second").series[0].samples[0][1] == 2.0
    assert [r.param("query") for r in server.requests] == ["first", "second"]
