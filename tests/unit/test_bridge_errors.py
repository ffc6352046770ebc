"""Bad input at start-up: a typed error whose message names the cause, and nothing left running."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otel_bridge import (
    Bridge,
    ConfigError,
    PrometheusResponseError,
    PrometheusUnreachableError,
    ResponseTooLargeError,
)
from tests.helpers.http_servers import (
    Response,
    ScriptedHTTPServer,
    free_port,
    html_response,
    prom_error,
    prom_vector,
)


def config_for(url: str, tmp_path: Path, **prometheus: Any) -> dict[str, Any]:
    return {
        "prometheus": {"url": url, "retries": 0, "timeout_s": 2, **prometheus},
        "metrics": [{"name": "vllm:num_requests_running", "type": "gauge"}],
        "run": {"name": "errors", "dir": str(tmp_path)},
    }


# The HTTP deadline watchdog is one daemon thread per process, started by the first request and kept for the next
# (otel_bridge/http/attempt_deadline.py): not a leftover of a failed start.
PROCESS_WIDE = {"otel-bridge-http-deadlines"}


@pytest.fixture(autouse=True)
def no_threads_left_behind() -> Iterator[None]:
    before = {t.ident for t in threading.enumerate()}
    yield
    leftover = [
        t.name
        for t in threading.enumerate()
        if t.ident not in before and t.name.startswith("otel-bridge") and t.name not in PROCESS_WIDE
    ]
    assert not leftover, f"threads left running after a failed start: {leftover}"


def test_unreachable_url(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(PrometheusUnreachableError) as info:
        Bridge.from_config(config_for(url, tmp_path))
    message = str(info.value)
    assert "cannot reach Prometheus" in message
    assert url in message


def test_non_json_body(tmp_path: Path) -> None:
    with (
        ScriptedHTTPServer(lambda r: Response(200, b"this is not json", {"Content-Type": "text/plain"})) as server,
        pytest.raises(PrometheusResponseError) as info,
    ):
        Bridge.from_config(config_for(server.url, tmp_path))
    message = str(info.value)
    assert "not JSON" in message or "not valid JSON" in message, message
    assert "this is not json" in message


def test_html_error_page(tmp_path: Path) -> None:
    page = "<html><body><h1>502 Bad Gateway</h1></body></html>"
    with (
        ScriptedHTTPServer(lambda r: html_response(page, status=502)) as server,
        pytest.raises(PrometheusResponseError) as info,
    ):
        Bridge.from_config(config_for(server.url, tmp_path))
    message = str(info.value)
    assert "HTML" in message
    assert "502" in message


def test_bad_data_error_names_prometheus_error(tmp_path: Path) -> None:
    def handler(request: Any) -> Response:
        return prom_error("bad_data", 'parse error at char 7: unexpected "}"', status=400)

    with ScriptedHTTPServer(handler) as server, pytest.raises(ConfigError) as info:
        Bridge.from_config(config_for(server.url, tmp_path))
    message = str(info.value)
    assert "bad_data" in message
    assert 'parse error at char 7: unexpected "}"' in message


def test_oversized_body(tmp_path: Path) -> None:
    big = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}, "pad": "x" * 5000})
    with (
        ScriptedHTTPServer(lambda r: Response(200, big.encode(), {"Content-Type": "application/json"})) as server,
        pytest.raises(ResponseTooLargeError) as info,
    ):
        Bridge.from_config(config_for(server.url, tmp_path, max_response_bytes=1000))
    assert "1000" in str(info.value)
    assert "max_response_bytes" in str(info.value)


def test_unknown_config_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        Bridge.from_config({"prometheus": {"url": "http://127.0.0.1:9090", "timout_s": 3}})
    message = str(info.value)
    assert "unknown key 'prometheus.timout_s'" in message
    assert "timeout_s" in message.split("allowed keys here:")[1]


def test_a_valid_answer_starts(tmp_path: Path) -> None:
    with ScriptedHTTPServer(lambda r: prom_vector([])) as server:
        bridge = Bridge.from_config(config_for(server.url, tmp_path))
        bridge.close()
    assert server.requests, "start-up must validate the configured queries against Prometheus"


def test_prometheus_down_is_one_clear_traceback_with_the_cause_kept(tmp_path: Path) -> None:
    """Issue 26: ``Bridge.from_config`` with Prometheus down ends in one traceback with the clear message, not an
    80-line chain urllib3 -> requests -> transport; the lower-level exceptions stay available as ``cause``."""
    import requests

    from otel_bridge.http.transport import TransportError

    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(PrometheusUnreachableError) as caught:
        Bridge.from_config(config_for(url, tmp_path))
    error = caught.value
    assert error.__cause__ is None
    assert error.__suppress_context__
    assert isinstance(error.cause, TransportError)
    assert error.cause.__cause__ is None
    assert error.cause.__suppress_context__
    assert isinstance(error.cause.cause, requests.ConnectionError)

    script = f"from otel_bridge import Bridge\nBridge.from_config({config_for(url, tmp_path)!r})\n"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path
    )
    assert done.returncode == 1
    assert done.stderr.count("Traceback (most recent call last)") == 1, done.stderr
    assert "During handling of the above exception" not in done.stderr
    assert "direct cause" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    # The first request at start-up asks the store what it is (buildinfo); the line names it and what to check.
    assert last.startswith(f"otel_bridge.errors.PrometheusUnreachableError: cannot reach Prometheus at {url}/api/v1/")
    assert last.endswith("check prometheus.url and that Prometheus is running"), last
