"""``scrape.tls`` wins over requests' environment (issue 14, finding 18): with ``REQUESTS_CA_BUNDLE`` or
``CURL_CA_BUNDLE`` pointing at another CA, ``scrape.tls.ca_file`` still verifies a real local HTTPS /metrics server
and ``verify: false`` still skips verification (with one WARNING)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from otel_bridge import Bridge
from tests.faults.support import base_config, count_logs
from tests.helpers.backends import BackendDouble
from tests.helpers.http_servers import (
    RecordedRequest,
    Response,
    ScriptedHTTPServer,
    make_self_signed_cert,
    server_ssl_context,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command line tool"),
]

METRICS = [{"name": "vllm:num_requests_running", "type": "gauge", "stats": ["last"]}]
KEY = "rollout/vllm/num_requests_running/last"


def metrics(_request: RecordedRequest) -> Response:
    body = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 4\n"
    return Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})


@pytest.mark.parametrize("variable", ["REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"])
@pytest.mark.parametrize("tls_mode", ["ca_file", "verify_false"])
def test_scrape_tls_is_applied_whatever_the_environment_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, variable: str, tls_mode: str
) -> None:
    caplog.set_level(logging.WARNING)
    (tmp_path / "server").mkdir()
    (tmp_path / "other").mkdir()
    server_files = make_self_signed_cert(tmp_path / "server", "server")
    other = make_self_signed_cert(tmp_path / "other", "other")  # a CA that did not sign the server's certificate
    monkeypatch.setenv(variable, other.cert)
    tls = {"ca_file": server_files.cert} if tls_mode == "ca_file" else {"verify": False}
    collecting = BackendDouble()
    with ScriptedHTTPServer(metrics, ssl_context=server_ssl_context(server_files)) as server:
        scrape = {"targets": [f"https://127.0.0.1:{server.port}/metrics"], "sample_interval_s": 0, "tls": tls}
        config = base_config(tmp_path, "tls", scrape=scrape, metrics=METRICS)
        with Bridge.from_config(config, backends=[collecting]) as bridge:
            with bridge.step(0):
                pass
            bridge.collect(0)
    assert collecting.by_step()[0][KEY] == 4.0
    assert count_logs(caplog, "verification is disabled") == (1 if tls_mode == "verify_false" else 0)
