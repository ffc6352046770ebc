"""One Prometheus matrix within the byte and series caps but with millions of samples (issue 14, finding 20): refused
at ``prometheus.max_samples`` before it is decoded, from a fake Prometheus API on a real local socket."""

from __future__ import annotations

import tracemalloc

import pytest

from otel_bridge import BridgeConfig
from otel_bridge.errors import ResponseTooLargeError
from otel_bridge.producers.promql import client_for
from otel_bridge.prometheus.client import PrometheusClient
from tests.helpers.http_servers import Response, ScriptedHTTPServer

pytestmark = pytest.mark.integration


def matrix(series: int, samples_per_series: int) -> bytes:
    values = b",".join([b'[1,"1"]'] * samples_per_series)
    items = b",".join(b'{"metric":{"i":"%d"},"values":[%s]}' % (i, values) for i in range(series))
    return b'{"status":"success","data":{"resultType":"matrix","result":[' + items + b"]}}"


def client(port: int, **caps: int) -> PrometheusClient:
    config = BridgeConfig.from_dict({"prometheus": {"url": f"http://127.0.0.1:{port}", "retries": 0, **caps}})
    return client_for(config.prometheus)


def serve(body: bytes) -> ScriptedHTTPServer:
    return ScriptedHTTPServer(lambda _r: Response(body=body, headers={"Content-Type": "application/json"}))


def test_a_matrix_of_six_million_samples_is_refused_before_it_is_decoded() -> None:
    body = matrix(series=10, samples_per_series=610_000)  # 6.1 M samples
    assert len(body) < 50_000_000  # under prometheus.max_response_bytes' default, and 10 series
    with serve(body) as server, client(server.port) as prometheus:
        tracemalloc.start()
        try:
            with pytest.raises(ResponseTooLargeError, match=r"prometheus\.max_samples=1000000"):
                prometheus.query("up[1h]")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 4 * len(body), f"peak {peak / 1e6:.0f} MB for a {len(body) / 1e6:.0f} MB body"


def test_a_matrix_within_the_sample_cap_is_read() -> None:
    with serve(matrix(series=4, samples_per_series=250)) as server, client(server.port, max_samples=1000) as prom:
        result = prom.query("up[1h]")
    assert sum(len(s.samples) for s in result.series) == 1000


def test_one_sample_over_the_cap_is_refused() -> None:
    server = serve(matrix(series=4, samples_per_series=251))
    with (
        server,
        client(server.port, max_samples=1000) as prom,
        pytest.raises(ResponseTooLargeError, match=r"max_samples"),
    ):
        prom.query("up[1h]")
