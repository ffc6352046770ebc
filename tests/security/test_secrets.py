"""Credentials come only from env or files, and never appear in logs, error messages, reprs or records.

A hostile server echoes the Authorization header back in its error bodies; everything the bridge says about that
failure (exception texts with their causes and tracebacks, every log record at DEBUG, reprs of config, client and
bridge, the JSONL records) is searched for the secret in every form it takes on the wire.
(``otel-bridge doctor`` is built by another engineer and not covered here.)
"""

from __future__ import annotations

import base64
import logging
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otel_bridge import Bridge, BridgeConfig, ConfigError
from otel_bridge.errors import OtelBridgeError
from otel_bridge.producers.promql import client_for
from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer

TOKEN = "tok-3f9a-SECRET-bearer"
PASSWORD = "pw-77c1-SECRET-basic"
USER = "bridge"


def echo(request: RecordedRequest) -> Response:
    """A broken proxy that echoes the credentials it got (as some do in their error pages)."""
    auth = request.headers.get("authorization", "")
    return Response(
        status=500, body=f"upstream rejected {auth} for {auth}".encode(), headers={"Content-Type": "text/plain"}
    )


@pytest.fixture
def echo_server() -> Iterator[ScriptedHTTPServer]:
    with ScriptedHTTPServer(echo) as server:
        yield server


def forms() -> list[str]:
    basic = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    return [TOKEN, PASSWORD, basic]


def exception_texts(exc: BaseException) -> list[str]:
    return [str(exc), repr(exc), "".join(traceback.format_exception(exc))]


def assert_secret_free(texts: list[str]) -> None:
    for text in texts:
        for secret in forms():
            assert secret not in text, f"secret leaked in: {text[:300]}"


def configs(tmp_path: Path, url: str, startup: str) -> list[tuple[str, dict[str, Any]]]:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    password_file = tmp_path / "password"
    password_file.write_text(PASSWORD)
    base = {
        "startup": startup,
        "metrics": [{"name": "vllm:num_requests_running", "type": "gauge", "stats": ["last"]}],
    }
    auths = {
        "bearer-env": {"bearer_token_env": "FAULT_TEST_TOKEN"},
        "bearer-file": {"bearer_token_file": str(token_file)},
        "basic-env": {"username": USER, "password_env": "FAULT_TEST_PASSWORD"},
        "basic-file": {"username": USER, "password_file": str(password_file)},
    }
    return [
        (
            name,
            {
                **base,
                "prometheus": {"url": url, "retries": 1, "backoff_s": 0, "timeout_s": 2, "auth": auth},
                "run": {"name": f"{name}-{startup}", "dir": str(tmp_path)},
            },
        )
        for name, auth in auths.items()
    ]


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAULT_TEST_TOKEN", TOKEN)
    monkeypatch.setenv("FAULT_TEST_PASSWORD", PASSWORD)


@pytest.mark.usefixtures("secret_env")
def test_secrets_never_leak_when_requests_fail(
    tmp_path: Path, echo_server: ScriptedHTTPServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    texts: list[str] = []
    for name, config in configs(tmp_path, echo_server.url, "strict"):
        loaded = BridgeConfig.load(config)
        texts += [repr(loaded), str(loaded), loaded.model_dump_json()]
        with pytest.raises(OtelBridgeError) as caught:
            Bridge.from_config(loaded)
        texts += exception_texts(caught.value)
        client = client_for(loaded.prometheus, echo_server.url)
        texts.append(repr(client))
        with client, pytest.raises(OtelBridgeError) as caught_client:
            client.query("up")
        texts += exception_texts(caught_client.value)
        assert name
    for name, config in configs(tmp_path, echo_server.url, "degrade"):
        with Bridge.from_config(config) as bridge:
            for step in range(3):
                with bridge.step(step):
                    bridge.log({"actor/loss": 1.0}, step=step)
            texts.append(repr(bridge))
            texts.append(repr(bridge.collect(2)))
        texts.append((tmp_path / f"{name}-degrade" / "metrics.jsonl").read_text())
    # the server did receive the credentials: they were sent, just never shown
    sent = {r.headers.get("authorization", "") for r in echo_server.requests}
    assert f"Bearer {TOKEN}" in sent
    assert any(h.startswith("Basic ") for h in sent)
    texts += [record.getMessage() for record in caplog.records]
    texts += ["".join(traceback.format_exception(*r.exc_info)) for r in caplog.records if r.exc_info]
    assert any("500" in t for t in texts)  # the failure itself is reported
    assert_secret_free(texts)


@pytest.mark.parametrize("key", ["bearer_token", "password", "token", "authorization"])
def test_inline_secrets_are_refused_without_echoing_them(tmp_path: Path, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        BridgeConfig.from_dict({"prometheus": {"url": "http://127.0.0.1:9", "auth": {key: TOKEN}}})
    assert key in str(caught.value)
    assert TOKEN not in str(caught.value)


def test_missing_secret_sources_name_the_source_not_a_value(tmp_path: Path) -> None:
    config = BridgeConfig.from_dict(
        {"prometheus": {"url": "http://127.0.0.1:9", "auth": {"bearer_token_env": "FAULT_TEST_UNSET_TOKEN"}}}
    )
    with pytest.raises(ConfigError, match="FAULT_TEST_UNSET_TOKEN"):
        config.prometheus.auth.bearer_token(environ={})
    empty = tmp_path / "empty"
    empty.write_text("")
    config = BridgeConfig.from_dict(
        {"prometheus": {"url": "http://127.0.0.1:9", "auth": {"username": USER, "password_file": str(empty)}}}
    )
    with pytest.raises(ConfigError, match="empty"):
        config.prometheus.auth.basic_auth()
