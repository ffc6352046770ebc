"""An application that already configured OpenTelemetry keeps its MeterProvider: ``Bridge.from_config(...,
meter_provider=provider)`` adds the step reader to it. The user's periodic OTLP export (to a real OTLP/HTTP receiver
on 127.0.0.1, decoded from protobuf) and the bridge's per-step records receive the same instruments.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

from otel_bridge import Bridge, ConfigError
from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer


def otlp_receiver() -> ScriptedHTTPServer:
    def receive(request: RecordedRequest) -> Response:
        body = ExportMetricsServiceResponse().SerializeToString()
        return Response(200, body, {"Content-Type": "application/x-protobuf"})

    return ScriptedHTTPServer(receive)


def decoded(receiver: ScriptedHTTPServer) -> list[ExportMetricsServiceRequest]:
    out = []
    for request in receiver.requests:
        if request.method == "POST" and request.path == "/v1/metrics":
            message = ExportMetricsServiceRequest()
            message.ParseFromString(request.body)
            out.append(message)
    return out


def points(message: ExportMetricsServiceRequest) -> dict[str, list[tuple[dict[str, str], Any]]]:
    """metric name -> [(attributes, data point)] of the last export."""
    found: dict[str, list[tuple[dict[str, str], Any]]] = {}
    for rm in message.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                kind = metric.WhichOneof("data")
                for point in getattr(metric, kind).data_points:
                    attributes = {a.key: a.value.string_value for a in point.attributes}
                    found.setdefault(metric.name, []).append((attributes, point))
    return found


def config(tmp_path: Path) -> dict[str, Any]:
    return {"trackers": [{"type": "jsonl"}], "run": {"name": "own", "dir": str(tmp_path)}}


def test_users_periodic_otlp_export_and_step_records_receive_the_same_instruments(tmp_path: Path) -> None:
    with otlp_receiver() as receiver:
        exporter = OTLPMetricExporter(endpoint=f"{receiver.url}/v1/metrics", timeout=10)
        periodic = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
        provider = MeterProvider(metric_readers=[periodic], resource=Resource.create({"service.name": "user-app"}))
        meter = provider.get_meter("user.code")  # the user's own meter, not bridge.meter()
        samples = meter.create_counter("user.samples")
        latency = meter.create_histogram("user.latency", unit="s")

        bridge = Bridge.from_config(config(tmp_path), meter_provider=provider)
        assert bridge.meter_provider is provider
        for step in range(3):
            with bridge.step(step):
                samples.add(5, {"split": "train"})
                latency.record(0.5 * (step + 1))
                latency.record(1.0)
        records = [bridge.collect(step) for step in range(3)]
        assert provider.force_flush()  # the user's periodic reader exports now; the step reader does not collect
        report = bridge.close()

        # the bridge left the user's provider working: its reader still exports after the bridge closed
        samples.add(1, {"split": "train"})
        assert provider.force_flush()
        exports = decoded(receiver)
        provider.shutdown()

    assert report.complete
    assert [r["user/samples/split.train"] for r in records] == [5.0, 10.0, 15.0]
    assert [r["user/latency/count"] for r in records] == [2.0, 2.0, 2.0]
    assert [r["user/latency/sum"] for r in records] == [1.5, 2.0, 2.5]

    assert len(exports) == 2
    first = points(exports[0])
    [(attributes, counter)] = first["user.samples"]
    assert attributes == {"split": "train"}
    assert counter.as_int == 15
    [(_, histogram)] = first["user.latency"]
    assert histogram.count == 6
    assert histogram.sum == pytest.approx(6.0)
    resource = {a.key: a.value.string_value for a in exports[0].resource_metrics[0].resource.attributes}
    assert resource["service.name"] == "user-app"
    assert "otel_bridge/nonfinite_values" in first, "the bridge's health is on the user's provider too"
    [(_, after_close)] = points(exports[1])["user.samples"]
    assert after_close.as_int == 16


def test_step_boundaries_do_not_disturb_the_users_cumulative_export(tmp_path: Path) -> None:
    with otlp_receiver() as receiver:
        periodic = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=f"{receiver.url}/v1/metrics", timeout=10), export_interval_millis=3_600_000
        )
        provider = MeterProvider(metric_readers=[periodic])
        latency = provider.get_meter("user.code").create_histogram("user.latency")
        with Bridge.from_config(config(tmp_path), meter_provider=provider) as bridge:
            for step in range(4):
                with bridge.step(step):
                    latency.record(2.0)
                provider.force_flush()
        exports = decoded(receiver)
        provider.shutdown()
    counts = [points(message)["user.latency"][0][1].count for message in exports]
    assert counts == [1, 2, 3, 4], "the user's reader keeps its own (cumulative) temporality"


def test_a_provider_that_cannot_take_readers_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="meter_provider must be an OpenTelemetry SDK MeterProvider"):
        Bridge.from_config(config(tmp_path), meter_provider=NoOpMeterProvider())  # type: ignore[arg-type]
    assert not (tmp_path / "own").exists(), "a refused start leaves no run behind"
