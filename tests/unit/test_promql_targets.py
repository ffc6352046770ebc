"""PromQLProducer's start-up reads Prometheus' targets list once (issue 13 leftover), counted at a scripted server."""

from __future__ import annotations

from otel_bridge.config import MetricConfig, PrometheusConfig
from otel_bridge.producers.metric_set import resolve_metrics
from otel_bridge.producers.promql import PromQLProducer, connect
from otel_bridge.producers.promql._internal.targets import Schedule, schedule_of
from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer, prom_success, prom_vector

COUNTER, GAUGE = "vllm:generation_tokens_total", "vllm:num_requests_running"
TARGET = {"job": "rollout", "instance": "127.0.0.1:8000"}


def fake_prometheus(request: RecordedRequest) -> Response:
    """One target serving both metrics every second; the start-up union check answers nothing."""
    if request.path == "/api/v1/targets":
        target = {"labels": TARGET, "scrapeUrl": "http://127.0.0.1:8000/metrics", "scrapeInterval": "1s"}
        return prom_success({"activeTargets": [{**target, "scrapeTimeout": "1s", "lastScrapeDuration": 0.01}]})
    if request.path == "/api/v1/rules":
        return prom_success({"groups": []})
    query = (request.query.get("query") or request.form.get("query") or [""])[0]
    return prom_vector([(TARGET, 1.0)] if query.startswith("group by (job, instance)") else [])


def test_start_up_asks_for_the_targets_once() -> None:
    metrics = [MetricConfig(name=COUNTER, type="counter"), MetricConfig(name=GAUGE, type="gauge")]
    with ScriptedHTTPServer(fake_prometheus) as server:
        producer = PromQLProducer(connect(PrometheusConfig(url=server.url)), resolve_metrics(metrics))
        producer.start()
        producer.close()
        paths = [r.path for r in server.requests]
    assert paths.count("/api/v1/targets") == 1
    assert producer.boundary == "samples"


def test_victoria_metrics_targets_give_their_schedule_in_discovered_labels() -> None:
    """VictoriaMetrics' ``/api/v1/targets`` entries (``lib/promscrape/targetstatus.go``, v1.151.0) have no
    ``scrapeInterval``/``scrapeTimeout``: the discovered labels carry them, and they win over the configured default."""
    entry: dict[str, object] = {
        "discoveredLabels": {"__address__": "127.0.0.1:8000", "__scrape_interval__": "30s", "__scrape_timeout__": "5s"},
        "labels": TARGET,
        "scrapeUrl": "http://127.0.0.1:8000/metrics",
        "lastScrapeDuration": 0.01,
        "health": "up",
    }
    assert schedule_of([entry], 15.0) == Schedule(30.0, 0.02, True)
    assert schedule_of([{**entry, "lastScrapeDuration": 9.0}], 15.0).storing_delay_s == 5.0  # at most the timeout
