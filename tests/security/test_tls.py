"""TLS to Prometheus: verification on by default, a custom CA, client certificates (mutual TLS).

A local HTTPS proxy (certificates made in the test with ``openssl``) forwards every request to a real Prometheus
scraping two simulated vLLM replicas, so the records carry real query results.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from otel_bridge import Bridge, PrometheusUnreachableError
from tests.conftest import Replica
from tests.helpers.http_servers import (
    RecordedRequest,
    Response,
    ScriptedHTTPServer,
    make_self_signed_cert,
    server_ssl_context,
)
from tests.helpers.prometheus_server import PrometheusServer, either_name

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command line tool"),
]

KEY = "rollout/vllm/num_requests_running/last"


def forward_to(upstream: str) -> Callable[[RecordedRequest], Response]:
    """A handler that replays the request on ``upstream`` and answers with its response."""

    def handler(request: RecordedRequest) -> Response:
        headers = {k: v for k, v in request.headers.items() if k in ("content-type", "accept")}
        answer = requests.request(
            request.method,
            upstream + request.path,
            params=request.query,
            data=request.body,
            headers=headers,
            timeout=10,
        )
        return Response(
            status=answer.status_code,
            body=answer.content,
            headers={"Content-Type": answer.headers.get("Content-Type", "application/json")},
        )

    return handler


def tls_config(tmp_path: Path, url: str, name: str, **tls: Any) -> dict[str, Any]:
    return {
        "prometheus": {"url": url, "retries": 0, "timeout_s": 5, "scrape_interval_s": 1, "tls": tls},
        "metrics": [{"name": "vllm:num_requests_running", "type": "gauge", "stats": ["last"]}],
        "run": {"name": name, "dir": str(tmp_path)},
    }


def one_record(bridge: Bridge) -> dict[str, float]:
    bridge.log({"actor/loss": 1.0}, step=0)
    return bridge.collect(0)


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_verification_is_on_by_default_and_a_custom_ca_works(
    tmp_path: Path, replicas: list[Replica], prometheus: PrometheusServer, caplog: pytest.LogCaptureFixture
) -> None:
    replicas[0].sim.set_running(1)
    replicas[1].sim.set_running(2)
    deadline = time.monotonic() + 30
    while (
        not (result := prometheus.query(f"sum({either_name('vllm:num_requests_running')})"))
        or result[0]["value"][1] != "3"
    ):
        assert time.monotonic() < deadline, "Prometheus did not scrape the new gauge values"
        time.sleep(0.2)
    server = make_self_signed_cert(tmp_path, "server")
    with ScriptedHTTPServer(forward_to(prometheus.url), ssl_context=server_ssl_context(server)) as proxy:
        assert proxy.url.startswith("https://")
        with pytest.raises(PrometheusUnreachableError, match="ca_file"):
            Bridge.from_config(tls_config(tmp_path, proxy.url, "default"))
        with Bridge.from_config(tls_config(tmp_path, proxy.url, "ca", ca_file=server.cert)) as bridge:
            assert one_record(bridge)[KEY] == 3.0
        caplog.set_level(logging.WARNING)
        with Bridge.from_config(tls_config(tmp_path, proxy.url, "noverify", verify=False)) as bridge:
            assert one_record(bridge)[KEY] == 3.0
        assert sum("verification is disabled" in r.getMessage() for r in caplog.records) == 1


def test_client_certificate_mutual_tls(tmp_path: Path, prometheus: PrometheusServer) -> None:
    server = make_self_signed_cert(tmp_path, "server")
    client = make_self_signed_cert(tmp_path, "client")
    context = server_ssl_context(server, client_ca=client.cert)
    with ScriptedHTTPServer(forward_to(prometheus.url), ssl_context=context) as proxy:
        with pytest.raises(PrometheusUnreachableError):
            Bridge.from_config(tls_config(tmp_path, proxy.url, "nocert", ca_file=server.cert))
        config = tls_config(
            tmp_path, proxy.url, "mtls", ca_file=server.cert, cert_file=client.cert, key_file=client.key
        )
        with Bridge.from_config(config) as bridge:
            assert KEY in one_record(bridge)
