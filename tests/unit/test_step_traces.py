"""Each step as a trace over OTLP/HTTP: a real local receiver on 127.0.0.1 decodes the protobuf spans the bridge exports
(a ``step`` span per step, one child per phase) and the test checks them against the records and against the traffic
two simulated vLLM replicas served inside each phase."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from otel_bridge import Bridge
from otel_bridge.pipeline.tracing import traces_endpoint
from tests.conftest import Replica
from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer

TOKENS = "rollout/vllm/generation_tokens_total/delta"


def receiver() -> ScriptedHTTPServer:
    def receive(request: RecordedRequest) -> Response:
        return Response(
            200, ExportTraceServiceResponse().SerializeToString(), {"Content-Type": "application/x-protobuf"}
        )

    return ScriptedHTTPServer(receive)


def value(v: AnyValue) -> Any:
    return getattr(v, v.WhichOneof("value"))


def spans(server: ScriptedHTTPServer) -> list[tuple[dict[str, Any], Any]]:
    """(resource attributes, span) of every span the receiver got on /v1/traces."""
    out = []
    for request in server.requests:
        if request.method == "POST" and request.path == "/v1/traces":
            message = ExportTraceServiceRequest()
            message.ParseFromString(request.body)
            for rs in message.resource_spans:
                resource = {a.key: value(a.value) for a in rs.resource.attributes}
                out.extend((resource, span) for ss in rs.scope_spans for span in ss.spans)
    return out


def attributes(span: Any) -> dict[str, Any]:
    return {a.key: value(a.value) for a in span.attributes}


def test_each_step_is_a_span_with_one_child_per_phase_over_otlp_http(tmp_path: Path, replicas: list[Replica]) -> None:
    config = {
        "metrics": [{"name": "vllm:generation_tokens_total", "type": "counter", "stats": ["delta"]}],
        "scrape": {"targets": [r.url for r in replicas], "sample_interval_s": 3600},
        "run": {"name": "traced", "dir": str(tmp_path)},
        "otel": {"rank": 0, "otlp": {"enabled": True, "endpoint": "http://127.0.0.1:1/v1/metrics"}},
    }
    boundaries = 0

    def settle() -> None:  # the boundary's scrape was served: traffic after this lies after the boundary
        nonlocal boundaries
        boundaries += 1
        for replica in replicas:
            replica.wait_for_scrapes(1 + boundaries)

    gen_tokens = {}
    with receiver() as server:
        config["otel"]["otlp"]["endpoint"] = f"{server.url}/v1/metrics"  # type: ignore[index]
        with Bridge.from_config(config) as bridge:
            for step in (1, 2):
                with bridge.step(step):
                    settle()
                    with bridge.phase("gen"):
                        settle()
                        for replica in replicas:
                            replica.sim.complete_request(
                                prompt_tokens=8, generation_tokens=10 * step, ttft_s=0.01, e2e_s=0.1, queue_s=0.0,
                                itl_s=0.001,
                            )  # fmt: skip
                        gen_tokens[step] = 2 * 10 * step
                    settle()
                    with bridge.phase("update_actor"):
                        settle()
                    settle()
                settle()
        records = {step: bridge.record(step) for step in (1, 2)}
        received = spans(server)

    by_step: dict[int, list[Any]] = {}
    for resource, span in received:
        assert resource["otel_bridge.run"] == "traced"
        by_step.setdefault(attributes(span)["otel_bridge.step"], []).append(span)
    assert sorted(by_step) == [1, 2]
    for step, step_spans in by_step.items():
        record = records[step]
        assert record is not None
        assert record.window_start is not None
        (parent,) = [s for s in step_spans if s.name == "step"]
        children = {s.name: s for s in step_spans if s.name != "step"}
        assert sorted(children) == ["gen", "update_actor"]
        assert parent.start_time_unix_nano == round(record.window_start * 1e9)
        assert parent.end_time_unix_nano == round(record.time * 1e9)
        assert attributes(parent)[TOKENS] == gen_tokens[step] == record.values[TOKENS]
        for name, child in children.items():
            assert child.trace_id == parent.trace_id
            assert child.parent_span_id == parent.span_id
            assert parent.start_time_unix_nano <= child.start_time_unix_nano <= child.end_time_unix_nano
            assert child.end_time_unix_nano <= parent.end_time_unix_nano
            figures = attributes(child)
            assert figures["otel_bridge.rank"] == 0
            assert figures["otel_bridge.run"] == "traced"
            assert figures["otel_bridge.phase"] == name
            assert figures["seconds"] == pytest.approx(
                (child.end_time_unix_nano - child.start_time_unix_nano) / 1e9, abs=1e-6
            )
            assert figures["seconds"] == record.values[f"phase/{name}/seconds"]
        assert attributes(children["gen"])[TOKENS] == gen_tokens[step]
        assert attributes(children["update_actor"])[TOKENS] == 0


@pytest.mark.parametrize(
    ("endpoint", "environ", "expected"),
    [
        ("http://collector:4318/v1/metrics", {}, "http://collector:4318/v1/traces"),
        ("http://collector:4318/", {}, "http://collector:4318/v1/traces"),
        (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, None),
        (None, {"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://m:4318/v1/metrics"}, "http://m:4318/v1/traces"),
    ],
)
def test_the_traces_endpoint_follows_the_metrics_configuration(
    endpoint: str | None, environ: dict[str, str], expected: str | None
) -> None:
    assert traces_endpoint(endpoint, environ) == expected
