"""``otel-bridge doctor`` and config errors never echo a secret (issue 14, finding 17).

doctor runs as a subprocess against a real local server that echoes the ``Authorization`` header it receives (in a
Prometheus JSON error and in a 401 body); its text and JSON output must hold neither the token, nor the password, nor
the base64 basic-auth credential. A secret written inline in the wrong shape is named by key and type only.
"""

from __future__ import annotations

import base64
import json
import traceback
from pathlib import Path
from typing import Any

import pytest

from otel_bridge import BridgeConfig, ConfigError
from tests.cli.support import run_cli, write_config
from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer, json_response

pytestmark = pytest.mark.integration

TOKEN = "tok-d0c7-SECRET-doctor"
PASSWORD = "pw-d0c7-SECRET-doctor"
USER = "doctor"
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
SECRETS = (TOKEN, PASSWORD, BASIC)


def echoing(request: RecordedRequest) -> Response:
    """A Prometheus (or proxy) that quotes the Authorization header back: JSON errors for the API, 401 otherwise."""
    auth = request.headers.get("authorization", "")
    if request.path.startswith("/api/v1/"):
        return json_response({"status": "error", "errorType": "bad_data", "error": f"bad header {auth}"}, status=400)
    return Response(status=401, body=f"denied: {auth}".encode(), headers={"Content-Type": "text/plain"})


def assert_secret_free(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} leaked in: {text[:2000]}"


@pytest.mark.parametrize("scheme", ["basic", "bearer"])
def test_doctor_output_holds_no_form_of_the_secret(tmp_path: Path, scheme: str) -> None:
    password_file = tmp_path / "password"
    password_file.write_text(PASSWORD)
    auth = (
        {"username": USER, "password_file": str(password_file)}
        if scheme == "basic"
        else {"bearer_token_env": "DOCTOR_TOKEN"}
    )
    with ScriptedHTTPServer(echoing) as server:
        url = f"http://127.0.0.1:{server.port}"
        config: dict[str, Any] = {
            "prometheus": {"url": url, "retries": 0, "auth": auth},
            "metrics": [{"name": "vllm:num_requests_running", "type": "gauge"}],
        }
        path = write_config(tmp_path / "otel-bridge.yaml", config)
        env = {"DOCTOR_TOKEN": TOKEN}
        text = run_cli(["doctor", "--config", str(path)], cwd=tmp_path, env=env)
        as_json = run_cli(["doctor", "--config", str(path), "--json"], cwd=tmp_path, env=env)
        seen = {r.headers.get("authorization") for r in server.requests}
    assert seen == {f"Basic {BASIC}" if scheme == "basic" else f"Bearer {TOKEN}"}  # the server did get the secret
    assert text.returncode == 1
    assert as_json.returncode == 1
    json.loads(as_json.stdout)
    for output in (text.stdout, text.stderr, as_json.stdout, as_json.stderr):
        assert_secret_free(output)


INLINE_SHAPES: list[dict[str, Any]] = [
    {"auth": f"Bearer {TOKEN}"},
    {"auth": {"bearer_token_env": [TOKEN]}},
    {"auth": {"bearer_token_file": {"token": TOKEN}}},
    {"auth": {"username": [USER, PASSWORD]}},
    {"auth": {"password_env": 7, "username": PASSWORD}},  # a wrong type beside an inline password
    {"auth": [f"{USER}:{PASSWORD}"]},
]


@pytest.mark.parametrize("shape", INLINE_SHAPES)
@pytest.mark.parametrize("section", ["prometheus", "scrape"])
def test_an_inline_secret_in_the_wrong_shape_is_not_echoed(section: str, shape: dict[str, Any]) -> None:
    base = {"url": "http://127.0.0.1:9090"} if section == "prometheus" else {"targets": ["127.0.0.1:8000"]}
    with pytest.raises(ConfigError) as caught:
        BridgeConfig.from_dict({section: {**base, **shape}})
    message = str(caught.value)
    assert f"{section}.auth" in message
    assert_secret_free(message + repr(caught.value) + "".join(traceback.format_exception(caught.value)))


def test_doctor_config_check_does_not_echo_an_inline_secret(tmp_path: Path) -> None:
    path = write_config(
        tmp_path / "otel-bridge.yaml", {"prometheus": {"url": "http://127.0.0.1:9", "auth": f"Bearer {TOKEN}"}}
    )
    done = run_cli(["doctor", "--config", str(path), "--json"], cwd=tmp_path)
    assert done.returncode == 1
    assert "prometheus.auth" in done.stdout
    assert_secret_free(done.stdout + done.stderr)
