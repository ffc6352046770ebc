"""The scrape path's credentials (issue 14, finding 16): ``scrape.auth`` (env or file, as ``prometheus.auth``)
authenticates every scrape of a real local ``/metrics`` server, and credentials written into a target URL are refused
without being echoed: not in the ConfigError, not in logs, not in tracker keys."""

from __future__ import annotations

import base64
import logging
import time
import traceback
from pathlib import Path
from typing import Any

import pytest

from otel_bridge import Bridge, BridgeConfig, ConfigError
from tests.faults.support import base_config
from tests.helpers.backends import BackendDouble
from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer

pytestmark = pytest.mark.integration

USER = "scraper"
PASSWORD = "pw-5be1-SECRET-scrape"
TOKEN = "tok-90ad-SECRET-scrape"
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
METRICS = [{"name": "vllm:generation_tokens_total", "type": "counter", "stats": ["delta"]}]
DELTA = "rollout/vllm/generation_tokens_total/delta"


class GuardedMetrics:
    """A /metrics server that answers only requests carrying ``expected`` as their Authorization header (``None``:
    none at all)."""

    def __init__(self, expected: str | None) -> None:
        self.expected = expected
        self.value = 0.0
        self.server = ScriptedHTTPServer(self._answer)

    def _answer(self, request: RecordedRequest) -> Response:
        if request.headers.get("authorization") != self.expected:
            return Response(status=401, body=b"unauthorized", headers={"Content-Type": "text/plain"})
        self.value += 10.0
        body = f'# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{{m="a"}} {self.value}\n'
        return Response(body=body.encode(), headers={"Content-Type": "text/plain; version=0.0.4"})


def assert_secret_free(texts: list[str]) -> None:
    for text in texts:
        for secret in (PASSWORD, TOKEN, BASIC, f"{USER}:"):
            assert secret not in text, f"secret leaked in: {text[:300]}"


@pytest.mark.parametrize(
    "target",
    [
        f"http://{USER}:{PASSWORD}@127.0.0.1:9100/metrics",
        f"https://{USER}:{PASSWORD}@127.0.0.1:9100",
        f"{USER}:{PASSWORD}@127.0.0.1:9100",
        f"http://{USER}:{PASSWORD}@127.0.0.1:99999/metrics",  # a bad port too: the credentials are named first
        f"http://{TOKEN}@127.0.0.1:9100/metrics",
    ],
)
def test_credentials_in_a_scrape_target_url_are_refused_without_echo(target: str) -> None:
    with pytest.raises(ConfigError) as caught:
        BridgeConfig.from_dict({"scrape": {"targets": ["127.0.0.1:9200", target]}})
    message = str(caught.value)
    assert "scrape.targets[1] contains credentials" in message
    assert "scrape.auth.password_env" in message
    assert_secret_free([message, repr(caught.value), "".join(traceback.format_exception(caught.value))])


def _scrape_run(tmp_path: Path, name: str, server: GuardedMetrics, auth: dict[str, Any]) -> dict[int, dict[str, float]]:
    collecting = BackendDouble()
    scrape = {"targets": [f"127.0.0.1:{server.server.port}"], "sample_interval_s": 0, "timeout_s": 2, "auth": auth}
    with Bridge.from_config(base_config(tmp_path, name, scrape=scrape, metrics=METRICS), backends=[collecting]) as b:
        for step in range(3):
            before = server.value
            with b.step(step):  # the step ends after its start boundary's scrape: one authorised answer each
                deadline = time.monotonic() + 10
                while server.value == before and time.monotonic() < deadline:
                    time.sleep(0.01)
            b.collect(step)
    return collecting.by_step()


def test_scrape_auth_bearer_token_from_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("SCRAPE_TOKEN", TOKEN)
    server = GuardedMetrics(f"Bearer {TOKEN}")
    try:
        records = _scrape_run(tmp_path, "bearer", server, {"bearer_token_env": "SCRAPE_TOKEN"})
    finally:
        server.server.close()
    assert [records[step][DELTA] for step in (0, 1, 2)] == [10.0, 10.0, 10.0]
    assert_secret_free([r.getMessage() for r in caplog.records] + [k for v in records.values() for k in v])


def test_scrape_auth_basic_with_password_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    password_file = tmp_path / "password"
    password_file.write_text(PASSWORD + "\n")
    server = GuardedMetrics(f"Basic {BASIC}")
    try:
        records = _scrape_run(tmp_path, "basic", server, {"username": USER, "password_file": str(password_file)})
    finally:
        server.server.close()
    assert [records[step][DELTA] for step in (0, 1, 2)] == [10.0, 10.0, 10.0]
    assert_secret_free([r.getMessage() for r in caplog.records] + [k for v in records.values() for k in v])


def test_a_rollout_server_registered_with_credentials_is_refused_without_echo(tmp_path: Path) -> None:
    scrape = {"targets": ["127.0.0.1:9200"], "sample_interval_s": 0, "timeout_s": 2}
    config = base_config(tmp_path, "registered", scrape=scrape, metrics=METRICS)
    with pytest.raises(ConfigError, match="contains credentials") as caught:
        Bridge.from_config(config, rollout_servers=[f"{USER}:{PASSWORD}@127.0.0.1:9300"])
    assert_secret_free([str(caught.value), "".join(traceback.format_exception(caught.value))])


def test_a_discovered_target_with_credentials_is_not_scraped_nor_echoed(caplog: pytest.LogCaptureFixture) -> None:
    """A target that reaches the scrape producer at run time as ``user:pw@host:port`` (a discovery source that
    does not check) is refused by host only; the healthy target is scraped as before."""
    from otel_bridge.http.transport import TransportOptions
    from otel_bridge.producers.metric_set import resolve_metrics
    from otel_bridge.producers.scrape import ScrapeProducer

    caplog.set_level(logging.DEBUG)
    healthy = GuardedMetrics(None)
    queries = resolve_metrics(BridgeConfig.from_dict({"metrics": METRICS}).metrics)
    leaky = f"http://{USER}:{PASSWORD}@127.0.0.1:{healthy.server.port + 1}/metrics"
    producer = ScrapeProducer(
        [f"127.0.0.1:{healthy.server.port}"],
        queries,
        sample_interval_s=0,
        transport=TransportOptions(timeout_s=2, max_response_bytes=20_000_000),
    )
    try:
        producer.start()
        producer.set_targets([f"127.0.0.1:{healthy.server.port}", leaky])
        producer.close()
    finally:
        healthy.server.close()
    texts = [r.getMessage() for r in caplog.records]
    assert any("given with credentials in its URL" in t for t in texts)
    assert len(healthy.server.requests) >= 1
    assert_secret_free(texts)
