"""A Prometheus that echoes the Authorization header back on every path of its answer (issue 14, finding 15): a JSON
error, a 401 body (JSON and text), ``warnings``, a sample value, a string result and a label value. Neither the token,
nor the password, nor the base64 basic credential reaches an exception, a log record or a record, in plain or
JSON-escaped form."""

from __future__ import annotations

import base64
import json
import logging
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest

from otel_bridge import BridgeConfig
from otel_bridge.errors import OtelBridgeError
from otel_bridge.producers.promql import client_for
from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer, json_response

pytestmark = pytest.mark.integration

TOKEN = "tok-ec40/SECRET+bearer"
PASSWORD = "pw-ec40/SECRET+basic"
USER = "bridge"
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
FORMS = (TOKEN, PASSWORD, BASIC, TOKEN.replace("/", "\\/"), PASSWORD.replace("/", "\\/"), BASIC.replace("/", "\\/"))


def success(result_type: str, result: object, warnings: list[str] | None = None) -> Response:
    body: dict[str, object] = {"status": "success", "data": {"resultType": result_type, "result": result}}
    if warnings:
        body["warnings"] = warnings
    return json_response(body)


ECHOES: dict[str, Callable[[str], Response]] = {
    "json_error": lambda auth: json_response({"status": "error", "errorType": "bad_data", "error": auth}, 400),
    "json_401": lambda auth: json_response({"status": "error", "errorType": "unauthorized", "error": auth}, 401),
    "text_401": lambda auth: Response(
        status=401, body=f"denied {auth}".encode(), headers={"Content-Type": "text/plain"}
    ),
    "warnings": lambda auth: success("vector", [], warnings=[f"header was {auth}"]),
    "sample_value": lambda auth: success("vector", [{"metric": {}, "value": [1.0, auth]}]),
    "string_result": lambda auth: success("string", [1.0, auth]),
    "label_value": lambda auth: success("vector", [{"metric": {"echo": auth}, "value": [1.0, "1"]}]),
    "escaped_slash": lambda auth: Response(
        status=400,
        body=json.dumps({"status": "error", "errorType": "bad_data", "error": auth}).replace("/", "\\/").encode(),
        headers={"Content-Type": "application/json"},
    ),
}


def echo(kind: str) -> Callable[[RecordedRequest], Response]:
    return lambda request: ECHOES[kind](request.headers.get("authorization", ""))


def assert_secret_free(texts: list[str]) -> None:
    for text in texts:
        for secret in FORMS:
            assert secret not in text, f"{secret!r} leaked in: {text[:400]}"


@pytest.mark.parametrize("scheme", ["bearer", "basic"])
@pytest.mark.parametrize("kind", sorted(ECHOES))
def test_no_echo_path_leaks_the_credential(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, kind: str, scheme: str
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("ECHO_TOKEN", TOKEN)
    (tmp_path / "pw").write_text(PASSWORD)
    auth = (
        {"bearer_token_env": "ECHO_TOKEN"}
        if scheme == "bearer"
        else {"username": USER, "password_file": str(tmp_path / "pw")}
    )
    texts: list[str] = []
    with ScriptedHTTPServer(echo(kind)) as server:
        config = BridgeConfig.from_dict(
            {"prometheus": {"url": f"http://127.0.0.1:{server.port}", "retries": 0, "auth": auth}}
        )
        with client_for(config.prometheus) as client:
            try:
                result = client.query("up")
                texts.append(repr(result))
            except OtelBridgeError as exc:
                texts += [str(exc), repr(exc), "".join(traceback.format_exception(exc)), repr(vars(exc))]
        assert server.requests[0].headers.get("authorization") in (f"Bearer {TOKEN}", f"Basic {BASIC}")
    texts += [r.getMessage() for r in caplog.records] + [r.exc_text or "" for r in caplog.records]
    assert_secret_free(texts)
