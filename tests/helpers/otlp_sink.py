"""An OTLP/HTTP trace receiver for tests: what a trace store (Tempo, Jaeger) would receive from the collector.

It listens on 127.0.0.1 (a free port), answers every ``POST /v1/traces`` with an empty
``ExportTraceServiceResponse`` and keeps the requests; :meth:`OTLPTraceSink.spans` decodes them
(``ExportTraceServiceRequest`` of the ``opentelemetry-proto`` package, gzip or not) into :class:`Span` values::

    with OTLPTraceSink() as sink:
        ...  # the collector's otlp_http exporter sends to sink.url (it appends /v1/traces)
        spans = sink.wait_for_spans(lambda spans: len(spans) >= 6, timeout_s=30)
"""

from __future__ import annotations

import gzip
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer

__all__ = ["OTLPTraceSink", "Span"]

PROTOBUF = "application/x-protobuf"


@dataclass(frozen=True)
class Span:
    """One received span, flattened: ids as hex, times in seconds, attributes and its resource's as dicts."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    start: float
    end: float
    attributes: Mapping[str, Any]
    resource: Mapping[str, Any]
    scope: str


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


def _attributes(pairs: list[KeyValue]) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


def _body(request: RecordedRequest) -> bytes:
    encoding = request.headers.get("content-encoding", "")
    if encoding == "gzip":
        return gzip.decompress(request.body)
    if encoding == "deflate":
        return zlib.decompress(request.body)
    if encoding:
        raise AssertionError(f"the OTLP sink cannot read Content-Encoding {encoding!r}")
    return request.body


def _answer(request: RecordedRequest) -> Response:
    if request.method != "POST" or request.path != "/v1/traces":
        return Response(status=404, body=b"only POST /v1/traces")
    if not request.headers.get("content-type", "").startswith(PROTOBUF):
        return Response(status=415, body=b"protobuf only")
    return Response(body=ExportTraceServiceResponse().SerializeToString(), headers={"Content-Type": PROTOBUF})


class OTLPTraceSink:
    """The receiving end of an OTLP/HTTP traces exporter (see the module docstring)."""

    def __init__(self) -> None:
        self._server = ScriptedHTTPServer(_answer)
        self.url = self._server.url

    def spans(self) -> list[Span]:
        """Every span received so far, in arrival order."""
        out: list[Span] = []
        for request in self._server.requests:
            if request.method != "POST" or request.path != "/v1/traces":
                continue
            message = ExportTraceServiceRequest()
            message.ParseFromString(_body(request))
            for resource_spans in message.resource_spans:
                resource = _attributes(list(resource_spans.resource.attributes))
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        out.append(
                            Span(
                                name=span.name,
                                trace_id=span.trace_id.hex(),
                                span_id=span.span_id.hex(),
                                parent_span_id=span.parent_span_id.hex(),
                                start=span.start_time_unix_nano / 1e9,
                                end=span.end_time_unix_nano / 1e9,
                                attributes=_attributes(list(span.attributes)),
                                resource=resource,
                                scope=scope_spans.scope.name,
                            )
                        )
        return out

    def wait_for_spans(self, done: Callable[[list[Span]], bool], timeout_s: float) -> list[Span]:
        """Poll until ``done(spans)`` holds; the spans so far either way (the caller asserts on them)."""
        deadline = time.monotonic() + timeout_s
        spans = self.spans()
        while not done(spans) and time.monotonic() < deadline:
            time.sleep(0.2)
            spans = self.spans()
        return spans

    @property
    def rejected(self) -> list[str]:
        """Requests the sink refused (wrong path or content type) and handler failures."""
        bad = [f"{r.method} {r.path} {r.headers.get('content-type')}" for r in self._server.requests]
        bad = [line for line in bad if not line.startswith("POST /v1/traces application/x-protobuf")]
        return bad + self._server.handler_errors

    def close(self) -> None:
        self._server.close()

    def __enter__(self) -> OTLPTraceSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
