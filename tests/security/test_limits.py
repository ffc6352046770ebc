"""Where the bridge talks and how much it accepts: http/https only, no credentials across redirects to another
server, response size and series-count caps, and the drop-in provider's /metrics endpoint on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import requests

from otel_bridge import Bridge, BridgeConfig, ConfigError, ResponseTooLargeError
from otel_bridge.config import PrometheusConfig
from otel_bridge.producers.promql import client_for
from tests.conftest import Replica
from tests.helpers.http_servers import (
    RecordedRequest,
    Response,
    ScriptedHTTPServer,
    prom_vector,
    redirect_response,
)
from tests.helpers.prometheus_server import PrometheusServer, either_name

GAUGE = [{"name": "vllm:num_requests_running", "type": "gauge", "stats": ["last"]}]


@pytest.mark.parametrize(
    "url",
    ["file:///etc/passwd", "ftp://127.0.0.1:21/", "gopher://127.0.0.1:70/", "javascript:alert(1)", "127.0.0.1:9090"],
)
def test_only_http_and_https_urls(url: str) -> None:
    with pytest.raises(ConfigError, match="http"):
        BridgeConfig.from_dict({"prometheus": {"url": url}, "metrics": GAUGE})
    with pytest.raises(ConfigError):
        BridgeConfig.from_dict({"scrape": {"targets": [url if "://" in url else "file:///x"]}, "metrics": GAUGE})


@pytest.fixture
def target() -> Iterator[ScriptedHTTPServer]:
    with ScriptedHTTPServer(lambda _r: prom_vector([({"otel_bridge_q": "0/last"}, 2.0)])) as server:
        yield server


def test_redirect_to_another_server_does_not_carry_credentials(
    tmp_path: Path, target: ScriptedHTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REDIRECT_TEST_TOKEN", "tok-redirect-secret")

    def redirect(request: RecordedRequest) -> Response:
        query = "&".join(f"{k}={quote(v[0])}" for k, v in request.query.items())
        return redirect_response(f"{target.url}{request.path}?{query}", status=307)

    with ScriptedHTTPServer(redirect) as origin:
        config = {
            "prometheus": {"url": origin.url, "auth": {"bearer_token_env": "REDIRECT_TEST_TOKEN"}, "retries": 0},
            "metrics": GAUGE,
            "run": {"name": "redirect", "dir": str(tmp_path)},
        }
        with Bridge.from_config(config) as bridge:
            bridge.log({"actor/loss": 1.0}, step=0)
            assert bridge.collect(0)["rollout/vllm/num_requests_running/last"] == 2.0
        assert origin.requests
        assert all(r.headers.get("authorization") == "Bearer tok-redirect-secret" for r in origin.requests)
    assert target.requests
    assert all("authorization" not in r.headers for r in target.requests)


def test_response_size_cap(tmp_path: Path) -> None:
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}, "x": "y" * 4096})
    with ScriptedHTTPServer(lambda _r: Response(body=body.encode(), headers={"Content-Type": "application/json"})) as s:
        config = {"prometheus": {"url": s.url, "max_response_bytes": 1024}, "metrics": GAUGE}
        with pytest.raises(ResponseTooLargeError, match="max_response_bytes"):
            Bridge.from_config({**config, "run": {"dir": str(tmp_path)}})


def test_series_count_cap(tmp_path: Path) -> None:
    many = prom_vector([({"otel_bridge_q": "0/last", "i": str(i)}, 1.0) for i in range(50)])
    with ScriptedHTTPServer(lambda _r: many) as server:
        config = {"prometheus": {"url": server.url, "max_series": 10}, "metrics": GAUGE, "run": {"dir": str(tmp_path)}}
        with pytest.raises(ResponseTooLargeError, match="max_series"):
            Bridge.from_config(config)
    assert BridgeConfig.from_dict({}).prometheus.max_series == 100_000
    with pytest.raises(ConfigError, match="max_series"):
        BridgeConfig.from_dict({"prometheus": {"max_series": 0}})


@pytest.mark.integration
def test_series_count_cap_against_real_prometheus(replicas: list[Replica], prometheus: PrometheusServer) -> None:
    with (
        client_for(PrometheusConfig(max_series=1), prometheus.url) as client,
        pytest.raises(ResponseTooLargeError),
    ):
        client.query(either_name("vllm:num_requests_running"))
    with client_for(PrometheusConfig(max_series=2), prometheus.url) as client:
        assert len(client.query(either_name("vllm:num_requests_running")).series) == 2


def _listen_addresses(port: int) -> list[str]:
    """Local addresses of TCP sockets listening on ``port`` (from /proc/net/tcp and tcp6)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, hex_port = fields[1].rsplit(":", 1)
            if int(hex_port, 16) == port and fields[3] == "0A":  # 0A: LISTEN
                found.append(address)
    return found


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads Linux' socket table")
def test_metrics_endpoint_binds_loopback_by_default(tmp_path: Path) -> None:
    config = {"otel": {"prometheus": {"enabled": True, "port": 0}}, "run": {"dir": str(tmp_path)}}
    with Bridge.from_config(config) as bridge:
        url = bridge.metrics_url
        assert url is not None
        assert url.startswith("http://127.0.0.1:")
        port = int(url.split(":")[2].split("/")[0])
        assert _listen_addresses(port) == ["0100007F"]  # 127.0.0.1 only
        assert requests.get(url, timeout=5).status_code == 200
