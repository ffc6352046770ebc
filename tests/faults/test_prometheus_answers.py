"""Prometheus answers no client expects (issue 14, finding 10), from a fake Prometheus API on a real local socket:
every one becomes a typed error, ``startup: degrade`` rides each out, and only a query Prometheus rejects as
``bad_data`` is a configuration error."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from otel_bridge import Bridge, ConfigError
from otel_bridge.errors import PrometheusAPIError, PrometheusError, PrometheusResponseError
from otel_bridge.health import INFRA_UNAVAILABLE
from tests.faults.support import base_config
from tests.helpers.backends import BackendDouble
from tests.helpers.http_servers import Response, ScriptedHTTPServer, prom_error

pytestmark = pytest.mark.integration

METRICS = [{"name": "vllm:num_requests_running", "type": "gauge", "stats": ["last"]}]
DEEP = 100_000


def deep_json() -> Response:
    body = ('{"status":"success","data":' + "[" * DEEP + "]" * DEEP + "}").encode()
    return Response(body=body, headers={"Content-Type": "application/json"})


def huge_timestamp() -> Response:
    ts = "9" * 400
    body = f'{{"status":"success","data":{{"resultType":"vector","result":[{{"metric":{{}},"value":[{ts},"1"]}}]}}}}'
    return Response(body=body.encode(), headers={"Content-Type": "application/json"})


ANSWERS = {
    "deep_json": deep_json,
    "huge_timestamp": huge_timestamp,
    "unauthorized_json": lambda: prom_error("unauthorized", "missing or bad credentials", status=401),
    "unavailable": lambda: prom_error("unavailable", "TSDB not ready", status=503),
    "execution": lambda: prom_error("execution", "query processing would load too many samples", status=422),
}


def config(tmp_path: Path, name: str, port: int, startup: str) -> dict[str, object]:
    prometheus = {"url": f"http://127.0.0.1:{port}", "retries": 0, "timeout_s": 5, "boundary": "samples"}
    return base_config(tmp_path, name, prometheus=prometheus, metrics=METRICS, startup=startup)


@pytest.mark.parametrize("answer", sorted(ANSWERS))
def test_degrade_rides_out_every_broken_answer(tmp_path: Path, answer: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    collecting = BackendDouble()
    server = ScriptedHTTPServer(lambda _r: ANSWERS[answer]())
    try:
        with Bridge.from_config(config(tmp_path, answer, server.port, "degrade"), backends=[collecting]) as bridge:
            for step in range(2):
                bridge.log({"actor/loss": float(step)}, step=step)
                bridge.collect(step)
    finally:
        server.close()
    records = collecting.by_step()
    assert [records[s]["actor/loss"] for s in (0, 1)] == [0.0, 1.0]
    assert records[1][INFRA_UNAVAILABLE] == 1
    assert not any("Traceback" in (r.exc_text or "") and "Recursion" in (r.exc_text or "") for r in caplog.records)


@pytest.mark.parametrize("answer", sorted(ANSWERS))
def test_strict_raises_a_typed_error_that_is_not_a_config_error(tmp_path: Path, answer: str) -> None:
    with ScriptedHTTPServer(lambda _r: ANSWERS[answer]()) as server, pytest.raises(PrometheusError) as caught:
        Bridge.from_config(config(tmp_path, answer, server.port, "strict"))
    assert not isinstance(caught.value, ConfigError)
    if answer in ("deep_json", "huge_timestamp"):
        assert isinstance(caught.value, PrometheusResponseError)
    else:
        assert isinstance(caught.value, PrometheusAPIError)


def test_only_bad_data_is_a_config_error_even_in_degrade(tmp_path: Path) -> None:
    rejecting = ScriptedHTTPServer(lambda _r: prom_error("bad_data", "1:1: parse error: unexpected character"))
    with rejecting as server, pytest.raises(ConfigError, match="Prometheus rejects"):
        Bridge.from_config(config(tmp_path, "bad_data", server.port, "degrade"))
