"""PrometheusClient against real local HTTP servers: parsing, retries, faults, auth, TLS."""

from __future__ import annotations

import base64
import logging
import math
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3

from otel_bridge.config import BridgeConfig, PrometheusConfig
from otel_bridge.errors import (
    ConfigError,
    PrometheusAPIError,
    PrometheusError,
    PrometheusResponseError,
    PrometheusUnreachableError,
    ResponseTooLargeError,
)
from otel_bridge.producers.promql import client_for
from otel_bridge.prometheus.answers import PromSeries, QueryResult
from otel_bridge.prometheus.client import PrometheusClient
from tests.helpers.http_servers import (
    DEFAULT_TS,
    Handler,
    RecordedRequest,
    Response,
    ScriptedHTTPServer,
    TLSFiles,
    free_port,
    html_response,
    json_response,
    make_self_signed_cert,
    prom_error,
    prom_matrix,
    prom_scalar,
    prom_string,
    prom_success,
    prom_vector,
    redirect_response,
    sequence,
    server_ssl_context,
)

TOKEN = "s3cr3t-t0ken-value"
PASSWORD = "hunter2-password"

ServeFn = Callable[..., ScriptedHTTPServer]
ClientFn = Callable[..., PrometheusClient]


@pytest.fixture
def serve() -> Iterator[ServeFn]:
    """Start ScriptedHTTPServers; all are closed at teardown, even when the test fails."""
    servers: list[ScriptedHTTPServer] = []

    def start(handler: Handler, **kwargs: Any) -> ScriptedHTTPServer:
        server = ScriptedHTTPServer(handler, **kwargs)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


TLS_KEYS = ("verify", "ca_file", "cert_file", "key_file")


def prometheus_config(
    monkeypatch: pytest.MonkeyPatch,
    *,
    bearer_token: str | None = None,
    basic_auth: tuple[str, str] | None = None,
    **options: Any,
) -> PrometheusConfig:
    """The ``prometheus`` section for ``options`` (its keys, ``tls`` keys at the top), secrets given through env."""
    auth: dict[str, str] = {}
    if bearer_token is not None:
        monkeypatch.setenv("TEST_PROMETHEUS_TOKEN", bearer_token)
        auth = {"bearer_token_env": "TEST_PROMETHEUS_TOKEN"}
    if basic_auth is not None:
        monkeypatch.setenv("TEST_PROMETHEUS_PASSWORD", basic_auth[1])
        auth = {"username": basic_auth[0], "password_env": "TEST_PROMETHEUS_PASSWORD"}
    tls = {key: options.pop(key) for key in TLS_KEYS if key in options}
    return PrometheusConfig.model_validate({**options, "auth": auth, "tls": tls})


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> Iterator[ClientFn]:
    """Build PrometheusClients with fast test defaults; all are closed at teardown."""
    clients: list[PrometheusClient] = []

    def build(url: str, *, user_agent: str = "otel-bridge", **kwargs: Any) -> PrometheusClient:
        options: dict[str, Any] = {"timeout_s": 2.0, "retries": 2, "backoff_s": 0.01}
        options.update(kwargs)
        made = client_for(prometheus_config(monkeypatch, **options), url, user_agent=user_agent)
        clients.append(made)
        return made

    yield build
    for made in clients:
        made.close()


def always(response: Response) -> Handler:
    return lambda _request: response


# --- transport failures ----------------------------------------------------------------------------


def test_closed_port_is_unreachable_with_actionable_message(client: ClientFn) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    prom = client(url)
    with pytest.raises(PrometheusUnreachableError) as caught:
        prom.query("up")
    message = str(caught.value)
    assert f"cannot reach Prometheus at {url}/api/v1/query" in message
    assert "connection refused" in message
    assert "3 attempts" in message
    assert "check prometheus.url and that Prometheus is running" in message
    assert caught.value.url == f"{url}/api/v1/query"


def test_hanging_server_is_retried_then_unreachable(serve: ServeFn, client: ClientFn) -> None:
    server = serve(always(Response(hang=True)))
    prom = client(server.url, timeout_s=0.2, retries=2)
    with pytest.raises(PrometheusUnreachableError) as caught:
        prom.query("up")
    assert "read timeout" in str(caught.value)
    assert "raise prometheus.timeout_s" in str(caught.value)
    assert len(server.requests) == 3


def test_dropped_connection_is_retried_and_recovers(serve: ServeFn, client: ClientFn) -> None:
    server = serve(sequence(Response(drop_connection=True), prom_vector([({}, 7.0)])))
    prom = client(server.url)
    result = prom.query("up")
    assert result.series[0].samples[0][1] == 7.0
    assert len(server.requests) == 2  # the dropped request had been received


def test_dropped_connection_every_time_is_unreachable(serve: ServeFn, client: ClientFn) -> None:
    server = serve(always(Response(drop_connection=True)))
    with pytest.raises(PrometheusUnreachableError, match="closed before a complete answer"):
        client(server.url, retries=1).query("up")
    assert len(server.requests) == 2


def test_retries_zero_disables_retrying(serve: ServeFn, client: ClientFn) -> None:
    server = serve(always(Response(hang=True)))
    with pytest.raises(PrometheusUnreachableError, match="retries disabled"):
        client(server.url, timeout_s=0.2, retries=0).query("up")
    assert len(server.requests) == 1


# --- answers that are not the Prometheus API -------------------------------------------------------


def test_non_json_body(serve: ServeFn, client: ClientFn) -> None:
    server = serve(always(Response(body=b"hello\n\tworld", headers={"Content-Type": "text/plain"})))
    with pytest.raises(PrometheusResponseError) as caught:
        client(server.url).query("up")
    message = str(caught.value)
    assert "not JSON" in message
    assert "HTTP 200, text/plain" in message
    assert "'hello world'" in message  # control characters collapsed
    assert "Prometheus' HTTP API" in message
    assert caught.value.status_code == 200


def test_html_error_page_is_reported_and_not_retried(serve: ServeFn, client: ClientFn) -> None:
    page = "<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>" + "x" * 500
    server = serve(always(html_response(page, status=502)))
    with pytest.raises(PrometheusResponseError) as caught:
        client(server.url).query("up")
    message = str(caught.value)
    assert "HTML page" in message
    assert "HTTP 502, text/html" in message
    assert "502 Bad Gateway" in message
    assert "x" * 200 not in message  # the snippet is short
    assert "not at a proxy/Grafana login page" in message
    assert caught.value.status_code == 502
    assert len(server.requests) == 1


def test_json_label_values_that_look_like_html_are_not_html(serve: ServeFn, client: ClientFn) -> None:
    server = serve(always(prom_vector([({"page": "<html><body>"}, 1.0)])))
    assert client(server.url).query("up").series[0].labels == {"page": "<html><body>"}


@pytest.mark.parametrize(
    ("status", "hint"),
    [
        (404, "include the path prefix"),
        (401, "check prometheus.auth.bearer_token_env / prometheus.auth.bearer_token_file"),
        (403, "refused the credentials"),
    ],
)
def test_error_statuses_without_api_body_get_a_hint(serve: ServeFn, client: ClientFn, status: int, hint: str) -> None:
    server = serve(always(Response(status=status, body=b"nope", headers={"Content-Type": "text/plain"})))
    with pytest.raises(PrometheusResponseError) as caught:
        client(server.url).query("up")
    assert f"HTTP {status}, text/plain" in str(caught.value)
    assert hint in str(caught.value)
    assert caught.value.status_code == status


def test_retry_after_is_capped() -> None:
    from otel_bridge.http.transport import RETRY_AFTER_CAP_S, _RetryPolicy

    response = urllib3.HTTPResponse(status=503, headers={"Retry-After": "3600"})
    assert _RetryPolicy(total=1).get_retry_after(response) == RETRY_AFTER_CAP_S
    short = urllib3.HTTPResponse(status=503, headers={"Retry-After": "2"})
    assert _RetryPolicy(total=1).get_retry_after(short) == 2


def test_json_that_is_not_the_prometheus_api(serve: ServeFn, client: ClientFn) -> None:
    server = serve(always(json_response({"hello": "world"})))
    with pytest.raises(PrometheusResponseError, match="not a Prometheus API response"):
        client(server.url).query("up")


def test_json_cut_short_is_reported_as_truncated(serve: ServeFn, client: ClientFn) -> None:
    server = serve(always(Response(body=b'{"status":"success","da', headers={"Content-Type": "application/json"})))
    with pytest.raises(PrometheusResponseError, match=r"ends early \(truncated\)"):
        client(server.url).query("up")


def test_body_truncated_by_the_connection(serve: ServeFn, client: ClientFn) -> None:
    full = prom_vector([({"job": str(i)}, float(i)) for i in range(50)])
    full.truncate_after = 100
    server = serve(always(full))
    with pytest.raises(PrometheusResponseError) as caught:
        client(server.url).query("up")
    assert f"cut off after 100 of the {len(full.body)} announced bytes" in str(caught.value)
    assert len(server.requests) == 1


def test_wrongly_shaped_vector_is_reported(serve: ServeFn, client: ClientFn) -> None:
    data = {"resultType": "vector", "result": [{"metric": {}, "value": [1.0, 2.0]}]}  # value not a string
    server = serve(always(prom_success(data)))
    with pytest.raises(PrometheusResponseError, match='not a \\[timestamp, "value"\\] pair'):
        client(server.url).query("up")


def test_native_histogram_samples_are_rejected_with_a_fix(serve: ServeFn, client: ClientFn) -> None:
    data = {"resultType": "vector", "result": [{"metric": {}, "histogram": [1.0, {"count": "1"}]}]}
    server = serve(always(prom_success(data)))
    with pytest.raises(PrometheusResponseError, match="histogram_quantile"):
        client(server.url).query("h")


# --- Prometheus API errors and which statuses are retried ------------------------------------------


@pytest.mark.parametrize(
    ("status", "error_type", "hint"),
    [(400, "bad_data", "fix the PromQL expression"), (422, "execution", "narrow or fix it")],
)
def test_api_error(serve: ServeFn, client: ClientFn, status: int, error_type: str, hint: str) -> None:
    error = 'parse error: unexpected "}" in label matching'
    server = serve(always(prom_error(error_type, error, status=status)))
    query = "sum(rate(vllm:generation_tokens_total[5m])) " + "+ 0 " * 200
    with pytest.raises(PrometheusAPIError) as caught:
        client(server.url).query(query)
    exc = caught.value
    assert (exc.status_code, exc.error_type, exc.error) == (status, error_type, error)
    message = str(exc)
    assert error_type in message
    assert error in message
    assert hint in message
    assert query[:199] + "…" in message
    assert query not in message  # truncated to 200 characters
    assert exc.url == f"{server.url}/api/v1/query"
    assert len(server.requests) == 1


def test_http_500_is_not_retried(serve: ServeFn, client: ClientFn) -> None:
    server = serve(always(prom_error("internal", "boom", status=500)))
    prom = client(server.url, retries=3)
    with pytest.raises(PrometheusAPIError, match="check the Prometheus server logs"):
        prom.query("up")
    assert len(server.requests) == 1


def test_429_with_retry_after_is_not_retried(serve: ServeFn, client: ClientFn) -> None:
    busy = Response(status=429, body=b"Too Many Requests", headers={"Retry-After": "0"})
    server = serve(always(busy))
    with pytest.raises(PrometheusResponseError, match="HTTP 429"):
        client(server.url, retries=3).query("up")
    assert len(server.requests) == 1


def test_503_is_retried_then_succeeds(serve: ServeFn, client: ClientFn) -> None:
    unavailable = prom_error("unavailable", "not ready", status=503)
    unavailable.headers["Retry-After"] = "0"
    server = serve(sequence(unavailable, prom_vector([({"job": "vllm"}, 3.0)])))
    prom = client(server.url)
    result = prom.query("up")
    assert result.series == (PromSeries(labels={"job": "vllm"}, samples=((DEFAULT_TS, 3.0),)),)
    assert len(server.requests) == 2


def test_503_retried_for_post_too(serve: ServeFn, client: ClientFn) -> None:
    server = serve(sequence(Response(status=503), prom_scalar("1")))
    client(server.url, post_threshold_bytes=1).query("up")
    assert [r.method for r in server.requests] == ["POST", "POST"]
    assert [r.param("query") for r in server.requests] == ["up", "up"]


def test_503_until_retries_run_out_is_an_api_error(serve: ServeFn, client: ClientFn) -> None:
    server = serve(always(prom_error("timeout", "query timed out in expression evaluation", status=503)))
    prom = client(server.url, retries=2)
    with pytest.raises(PrometheusAPIError) as caught:
        prom.query("up")
    assert caught.value.error_type == "timeout"
    assert "--query.timeout" in str(caught.value)
    assert len(server.requests) == 3


# --- size cap --------------------------------------------------------------------------------------


def test_oversized_body_with_content_length(serve: ServeFn, client: ClientFn) -> None:
    big = prom_vector([({"pod": f"p{i}"}, float(i)) for i in range(100)])
    server = serve(always(big))
    with pytest.raises(ResponseTooLargeError) as caught:
        client(server.url, max_response_bytes=1000).query("up")
    message = str(caught.value)
    assert "prometheus.max_response_bytes=1000" in message
    assert f"announced {len(big.body)} bytes" in message
    assert "raise prometheus.max_response_bytes or narrow the query" in message
    assert caught.value.limit_bytes == 1000


def test_oversized_chunked_body_without_content_length(serve: ServeFn, client: ClientFn) -> None:
    big = prom_vector([({"pod": f"p{i}"}, float(i)) for i in range(2000)])
    big.chunked = True
    assert len(big.body) > 50_000
    server = serve(always(big))
    with pytest.raises(ResponseTooLargeError, match="more than 1000 bytes arrived"):
        client(server.url, max_response_bytes=1000).query("up")


def test_body_exactly_at_the_cap_is_accepted(serve: ServeFn, client: ClientFn) -> None:
    answer = prom_scalar("1")
    server = serve(always(answer))
    result = client(server.url, max_response_bytes=len(answer.body)).query("1")
    assert result.result_type == "scalar"


# --- result parsing --------------------------------------------------------------------------------


def test_vector_with_special_float_values(serve: ServeFn, client: ClientFn) -> None:
    samples: list[tuple[dict[str, str], float | str]] = [
        ({"__name__": "m", "v": "nan"}, "NaN"),
        ({"__name__": "m", "v": "inf"}, "+Inf"),
        ({"__name__": "m", "v": "-inf"}, "-Inf"),
        ({"__name__": "m", "v": "num"}, "1.5e3"),
    ]
    server = serve(always(prom_vector(samples)))
    result = client(server.url).query("m")
    assert result.result_type == "vector"
    values = {s.labels["v"]: s.samples for s in result.series}
    assert math.isnan(values["nan"][0][1])
    assert values["inf"] == ((DEFAULT_TS, math.inf),)
    assert values["-inf"] == ((DEFAULT_TS, -math.inf),)
    assert values["num"] == ((DEFAULT_TS, 1500.0),)
    assert all(s.labels["__name__"] == "m" for s in result.series)


def test_empty_vector(serve: ServeFn, client: ClientFn) -> None:
    server = serve(always(prom_vector([])))
    assert client(server.url).query("absent_metric") == QueryResult(result_type="vector", series=())


def test_scalar(serve: ServeFn, client: ClientFn) -> None:
    server = serve(always(prom_scalar("-Inf", ts=12.5)))
    result = client(server.url).query("-1/0")
    assert result == QueryResult("scalar", (PromSeries(labels={}, samples=((12.5, -math.inf),)),))


def test_matrix(serve: ServeFn, client: ClientFn) -> None:
    server = serve(always(prom_matrix([({"pod": "a"}, [(1.0, "1"), (2.0, "NaN"), (3.0, "+Inf")])])))
    result = client(server.url).query("m[3s]")
    assert result.result_type == "matrix"
    (series,) = result.series
    assert series.labels == {"pod": "a"}
    assert [t for t, _ in series.samples] == [1.0, 2.0, 3.0]
    assert series.samples[0][1] == 1.0
    assert math.isnan(series.samples[1][1])
    assert series.samples[2][1] == math.inf


def test_numeric_string_result(serve: ServeFn, client: ClientFn) -> None:
    server = serve(always(prom_string("42", ts=5.0)))
    assert client(server.url).query('"42"') == QueryResult("string", (PromSeries({}, ((5.0, 42.0),)),))


def test_non_numeric_string_result_is_an_error(serve: ServeFn, client: ClientFn) -> None:
    server = serve(always(prom_string("hello")))
    with pytest.raises(PrometheusResponseError, match="returned the string 'hello', which is not a number"):
        client(server.url).query('"hello"')


def test_warnings_are_returned(serve: ServeFn, client: ClientFn) -> None:
    server = serve(always(prom_success({"resultType": "vector", "result": []}, warnings=["partial data"])))
    assert client(server.url).query("up").warnings == ("partial data",)


# --- request shape ---------------------------------------------------------------------------------


def test_short_query_is_a_get_with_ms_precision_time(serve: ServeFn, client: ClientFn) -> None:
    server = serve(always(prom_vector([])))
    client(server.url).query('up{job="a b"}', time=1717171717.1234567)
    (request,) = server.requests
    assert request.method == "GET"
    assert request.path == "/api/v1/query"
    assert request.query == {"query": ['up{job="a b"}'], "time": ["1717171717.123"]}
    assert request.body == b""


def test_integer_time_is_sent_with_three_decimals(serve: ServeFn, client: ClientFn) -> None:
    server = serve(always(prom_vector([])))
    client(server.url).query("up", time=1700000000)
    assert server.requests[0].param("time") == "1700000000.000"


def test_long_query_switches_to_form_post(serve: ServeFn, client: ClientFn) -> None:
    server = serve(always(prom_vector([])))
    prom = client(server.url, post_threshold_bytes=64)
    short, long = "up", "sum(" + " + ".join(f'm{{i="{i}"}}' for i in range(20)) + ")"
    prom.query(short, time=10.0)
    prom.query(long, time=10.0)
    first, second = server.requests
    assert first.method == "GET"
    assert second.method == "POST"
    assert second.query == {}
    assert second.headers["content-type"] == "application/x-www-form-urlencoded"
    assert second.form == {"query": [long], "time": ["10.000"]}


def test_headers_and_path_prefix(serve: ServeFn, client: ClientFn) -> None:
    server = serve(always(prom_vector([])))
    prom = client(server.url + "/prom/", user_agent="bridge-test/1")
    assert prom.url == server.url + "/prom"
    prom.query("up")
    (request,) = server.requests
    assert request.path == "/prom/api/v1/query"
    assert request.headers["user-agent"] == "bridge-test/1"
    assert request.headers["accept"] == "application/json"
    assert "authorization" not in request.headers


def test_metadata_buildinfo_targets(serve: ServeFn, client: ClientFn) -> None:
    answers = {
        "/api/v1/metadata": prom_success(
            {"vllm:num_requests_running": [{"type": "gauge", "help": "Running.", "unit": ""}]}
        ),
        "/api/v1/status/buildinfo": prom_success({"version": "2.53.0", "revision": "abc"}),
        "/api/v1/targets": prom_success(
            {"activeTargets": [{"scrapeUrl": "http://a/metrics", "health": "up"}], "droppedTargets": []}
        ),
    }
    server = serve(lambda request: answers[request.path])
    prom = client(server.url)
    assert prom.metadata("vllm:num_requests_running") == {
        "vllm:num_requests_running": [{"type": "gauge", "help": "Running.", "unit": ""}]
    }
    assert prom.buildinfo() == {"version": "2.53.0", "revision": "abc"}
    assert prom.targets() == [{"scrapeUrl": "http://a/metrics", "health": "up"}]
    metadata, _, targets = server.requests
    assert metadata.query == {"metric": ["vllm:num_requests_running"]}
    assert targets.query == {"state": ["active"]}


def test_one_client_serves_several_threads_at_once(serve: ServeFn, client: ClientFn) -> None:
    server = serve(lambda request: prom_vector([({"q": request.param("query") or ""}, 1.0)]))
    prom = client(server.url)
    answers: dict[int, list[str]] = {}

    def work(worker: int) -> None:
        answers[worker] = [prom.query(f"up{worker}_{i}").series[0].labels["q"] for i in range(10)]

    workers = [threading.Thread(target=work, args=(w,)) for w in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert answers == {w: [f"up{w}_{i}" for i in range(10)] for w in range(3)}  # every answer went to its asker
    assert len(server.requests) == 30


def test_closed_client_refuses_queries(serve: ServeFn) -> None:
    server = serve(always(prom_vector([])))
    with client_for(PrometheusConfig(), server.url) as prom:
        prom.query("up")
    with pytest.raises(PrometheusError, match="is closed; create a new one"):
        prom.query("up")


# --- credentials -----------------------------------------------------------------------------------


def test_bearer_token_is_sent_but_never_shown(
    serve: ServeFn, client: ClientFn, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    echo = html_response(f"<html>debug page: Authorization: Bearer {TOKEN}</html>", status=401)
    server = serve(sequence(prom_vector([]), Response(status=503), echo))
    prom = client(server.url, bearer_token=TOKEN, retries=1)
    prom.query("up")
    with pytest.raises(PrometheusResponseError) as caught:
        prom.query("up")
    assert [r.headers["authorization"] for r in server.requests] == [f"Bearer {TOKEN}"] * 3
    assert "***" in str(caught.value)  # the echoed token is masked
    for text in (repr(prom), str(prom), str(caught.value), repr(caught.value), caplog.text):
        assert TOKEN not in text
    assert "auth=bearer" in repr(prom)
    assert caplog.records  # the retry and the failure were logged


def test_basic_auth_is_sent_but_never_shown(serve: ServeFn, client: ClientFn, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    server = serve(always(prom_error("bad_data", "nope")))
    prom = client(server.url, basic_auth=("alice", PASSWORD))
    with pytest.raises(PrometheusAPIError) as caught:
        prom.query("up")
    expected = "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    assert server.requests[0].headers["authorization"] == expected
    for text in (repr(prom), str(caught.value), caplog.text):
        assert PASSWORD not in text
    assert "auth=basic" in repr(prom)


@pytest.mark.parametrize(
    "credentials", [{"bearer_token": TOKEN}, {"basic_auth": ("alice", PASSWORD)}], ids=["bearer", "basic"]
)
def test_redirect_to_another_host_drops_authorization(
    serve: ServeFn, client: ClientFn, credentials: dict[str, Any]
) -> None:
    target = serve(always(prom_vector([({"job": "moved"}, 1.0)])))
    other_host = target.url.replace("127.0.0.1", "localhost")

    def redirect(request: RecordedRequest) -> Response:
        return redirect_response(f"{other_host}{request.path}?query=up")

    origin = serve(redirect)
    result = client(origin.url, **credentials).query("up")
    assert result.series[0].labels == {"job": "moved"}
    assert "authorization" in origin.requests[0].headers
    (moved,) = target.requests
    assert moved.headers["host"].startswith("localhost:")
    assert "authorization" not in moved.headers


def test_redirect_on_the_same_server_keeps_working(serve: ServeFn, client: ClientFn) -> None:
    def handler(request: RecordedRequest) -> Response:
        if request.path == "/old/api/v1/query":
            return redirect_response(f"/new/api/v1/query?query={request.param('query')}", status=307)
        return prom_vector([({}, 2.0)])

    server = serve(handler)
    result = client(server.url + "/old", bearer_token=TOKEN).query("up")
    assert result.series[0].samples[0][1] == 2.0
    assert [r.headers["authorization"] for r in server.requests] == [f"Bearer {TOKEN}"] * 2


def test_redirect_loop_is_reported(serve: ServeFn, client: ClientFn) -> None:
    server = serve(lambda request: redirect_response(request.path))
    with pytest.raises(PrometheusResponseError, match="redirected more than 5 times"):
        client(server.url).query("up")


# --- configuration ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["ftp://prometheus:21", "localhost:9090", "127.0.0.1:9090", "", "unix:///var/run/prom.sock"]
)
def test_non_http_url_is_rejected(url: str) -> None:
    with pytest.raises(ConfigError, match=r"prometheus.url must start with http:// or https://"):
        client_for(PrometheusConfig(), url)


def test_credentials_in_url_are_rejected_without_echoing_them() -> None:
    with pytest.raises(ConfigError) as caught:
        client_for(PrometheusConfig(), f"http://alice:{PASSWORD}@prometheus:9090")
    assert "prometheus.auth.username with prometheus.auth.password_env" in str(caught.value)
    assert PASSWORD not in str(caught.value)


def test_auto_url_needs_resolving_first() -> None:
    with pytest.raises(ConfigError, match="connect"):
        client_for(PrometheusConfig(url="auto"))


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"timeout_s": 0}, "'prometheus.timeout_s' = 0: Input should be greater than 0"),
        ({"retries": -1}, "'prometheus.retries' = -1"),
        ({"backoff_s": float("nan")}, "'prometheus.backoff_s'"),
        ({"max_response_bytes": 0}, "'prometheus.max_response_bytes' = 0"),
        ({"auth": {"bearer_token_env": "T", "username": "a", "password_env": "P"}}, "not both"),
        ({"tls": {"key_file": "/nonexistent/key.pem"}}, "'prometheus.tls': key_file needs cert_file"),
    ],
)
def test_invalid_settings_are_rejected_by_the_config(section: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BridgeConfig.from_dict({"prometheus": section})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bearer_token": TOKEN + "\nX-Injected: 1"}, "contains control characters"),
        ({"basic_auth": ("al:ice", PASSWORD)}, "prometheus.auth.username must be non-empty and must not contain ':'"),
        ({"ca_file": "/nonexistent/ca.pem"}, "prometheus.tls.ca_file '/nonexistent/ca.pem' does not exist"),
        ({"cert_file": "/nonexistent/cert.pem"}, "prometheus.tls.cert_file '/nonexistent/cert.pem' does not exist"),
        ({"ca_file": __file__, "verify": False}, "prometheus.tls.ca_file is set but prometheus.tls.verify is false"),
    ],
)
def test_settings_the_client_cannot_use_are_rejected(
    monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        client_for(prometheus_config(monkeypatch, **kwargs), "http://127.0.0.1:9090")
    assert TOKEN not in str(caught.value)
    assert PASSWORD not in str(caught.value)


def test_query_time_must_be_finite() -> None:
    with (
        client_for(PrometheusConfig(), "http://127.0.0.1:9090") as prom,
        pytest.raises(ConfigError, match="finite"),
    ):
        prom.query("up", time=float("inf"))


# --- TLS -------------------------------------------------------------------------------------------


@pytest.fixture
def tls_files(tmp_path: Path) -> TLSFiles:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command line tool is needed to make test certificates")
    return make_self_signed_cert(tmp_path)


def test_tls_self_signed_needs_ca_file(serve: ServeFn, client: ClientFn, tls_files: TLSFiles) -> None:
    server = serve(always(prom_scalar("1")), ssl_context=server_ssl_context(tls_files))
    assert server.url.startswith("https://")
    with pytest.raises(PrometheusUnreachableError) as caught:
        client(server.url).query("1")
    assert "certificate verification failed" in str(caught.value)
    assert "set prometheus.tls.ca_file" in str(caught.value)
    assert client(server.url, ca_file=tls_files.cert).query("1").result_type == "scalar"


def test_tls_verify_false_warns_once(
    serve: ServeFn, client: ClientFn, tls_files: TLSFiles, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="otel_bridge")
    server = serve(always(prom_scalar("1")), ssl_context=server_ssl_context(tls_files))
    prom = client(server.url, verify=False)
    for _ in range(2):
        with pytest.warns(Warning, match="Unverified HTTPS request"):  # urllib3's own warning
            prom.query("1")
    ours = [r for r in caplog.records if r.name.startswith("otel_bridge")]
    assert len(ours) == 1
    assert "TLS certificate verification is disabled" in ours[0].getMessage()


def test_mutual_tls_client_certificate(serve: ServeFn, client: ClientFn, tls_files: TLSFiles, tmp_path: Path) -> None:
    client_files = make_self_signed_cert(tmp_path, name="client")
    context = server_ssl_context(tls_files, client_ca=client_files.cert)
    server = serve(always(prom_scalar("1")), ssl_context=context)
    prom = client(server.url, ca_file=tls_files.cert, cert_file=client_files.cert, key_file=client_files.key)
    assert prom.query("1").result_type == "scalar"
    assert server.requests[0].path == "/api/v1/query"
