"""The bridge's own health (``otel_bridge/*``) is OpenTelemetry instruments on the bridge's meter: counters and gauges
with attributes, on the ``/metrics`` endpoint (``otel.prometheus``) and over OTLP (``otel.otlp``, decoded from protobuf
by a real OTLP/HTTP receiver on 127.0.0.1), and still in every step record under the same keys.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import requests
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import Gauge, InMemoryMetricReader, Sum

from otel_bridge import Bridge
from otel_bridge.health import BACKEND_ERRORS, INFRA_UNAVAILABLE, NONFINITE_VALUES, SCRAPE_ERRORS, Health
from tests.helpers.backends import BackendDouble
from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer


def test_health_reaches_metrics_endpoint_otlp_and_every_record(tmp_path: Path) -> None:
    def receive(request: RecordedRequest) -> Response:
        body = ExportMetricsServiceResponse().SerializeToString()
        return Response(200, body, {"Content-Type": "application/x-protobuf"})

    with ScriptedHTTPServer(receive) as receiver:
        config: dict[str, Any] = {
            "trackers": [{"type": "jsonl"}],
            "run": {"name": "health", "dir": str(tmp_path)},
            "delivery": {"backend_retries": 1, "backend_backoff_s": 0.01},
            "otel": {
                "prometheus": {"enabled": True, "port": 0},
                "otlp": {"enabled": True, "endpoint": f"{receiver.url}/v1/metrics", "interval_s": 3600},
            },
        }
        bridge = Bridge.from_config(config, backends=[BackendDouble("failing", error=OSError("disk on fire"))])
        records = []
        for step in range(2):
            bridge.log({"loss": float(step), "reward": math.nan}, step=step)
            records.append(bridge.collect(step))
        bridge.exporter.force_flush()  # the failing tracker has tried (and counted) both records
        exposition = requests.get(str(bridge.metrics_url), timeout=10).text
        last = bridge.collect(1)
        bridge.close()  # the OTLP reader's last export
        pushes = [r for r in receiver.requests if r.method == "POST" and r.path == "/v1/metrics"]  # not /v1/traces

    health_keys = {key for key in records[0] if key.startswith("otel_bridge/")}
    assert health_keys == {
        "otel_bridge/backend_errors/backend.failing",
        "otel_bridge/backend_errors/backend.jsonl",
        "otel_bridge/nonfinite_values",
        "otel_bridge/infra_unavailable",
    }
    assert [r["otel_bridge/nonfinite_values"] for r in records] == [1.0, 2.0]
    assert last["otel_bridge/infra_unavailable"] == 0.0
    assert not [key for key in records[1] if "otel_bridge" in key and key not in health_keys], records[1]

    lines = {line.split(" ")[0]: float(line.split(" ")[-1]) for line in exposition.splitlines() if line[:1] != "#"}
    failing = [v for k, v in lines.items() if k.startswith("otel_bridge_backend_errors_total{") and "failing" in k]
    assert failing == [4.0], exposition  # 2 records x (1 try + 1 retry)
    assert [v for k, v in lines.items() if k.startswith("otel_bridge_nonfinite_values_total")] == [2.0]
    assert [v for k, v in lines.items() if k.startswith("otel_bridge_infra_unavailable{")] == [0.0]

    assert pushes, "close() flushes the OTLP reader"
    request = ExportMetricsServiceRequest()
    request.ParseFromString(pushes[-1].body)
    metrics = {m.name: m for rm in request.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    errors = metrics[BACKEND_ERRORS]
    assert errors.sum.is_monotonic
    by_backend = {p.attributes[0].value.string_value: p.as_double for p in errors.sum.data_points}
    assert by_backend == {"failing": 4.0, "jsonl": 0.0}
    assert [p.as_double for p in metrics[NONFINITE_VALUES].sum.data_points] == [2.0]
    assert [p.as_double for p in metrics[INFRA_UNAVAILABLE].gauge.data_points] == [0.0]


def test_health_keeps_its_api_on_top_of_instruments() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    health = Health(provider.get_meter("otel_bridge.health"))
    health.count(SCRAPE_ERRORS, 0.0, labels={"instance": "a:1"})
    health.count(SCRAPE_ERRORS, 2.0, labels={"instance": "b:1"})
    health.set("otel_bridge/targets_down", 1.0)

    def observed() -> dict[str, dict[tuple[tuple[str, Any], ...], tuple[type, float]]]:
        data = reader.get_metrics_data()
        assert data is not None
        return {
            m.name: {tuple(sorted((p.attributes or {}).items())): (type(m.data), p.value) for p in m.data.data_points}
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
        }

    first = observed()
    assert first[SCRAPE_ERRORS] == {(("instance", "a:1"),): (Sum, 0.0), (("instance", "b:1"),): (Sum, 2.0)}
    assert first["otel_bridge/targets_down"] == {(): (Gauge, 1.0)}
    assert health.counter(SCRAPE_ERRORS, {"instance": "b:1"}) == 2.0
    health.forget(SCRAPE_ERRORS, {"instance": "a:1"})
    health.count(SCRAPE_ERRORS, labels={"instance": "b:1"})
    assert (SCRAPE_ERRORS, (("instance", "b:1"),), 3.0) in health.snapshot()
    assert not [s for s in health.snapshot() if s[1] == (("instance", "a:1"),)]
    assert observed()[SCRAPE_ERRORS][(("instance", "b:1"),)] == (Sum, 3.0)
    provider.shutdown()
