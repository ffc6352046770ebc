"""Prometheus remote write from a test, as the collector's ``prometheus_remote_write`` exporter sends it.

A remote-write 1.0 request is a protobuf ``prometheus.WriteRequest`` (``timeseries``: labels and samples, no metadata
unless sent) compressed with snappy's block format. Both are encoded here by hand, in the few lines the format needs:
protobuf's length-delimited, fixed64 and varint fields, and snappy literals only (a valid, uncompressed stream). Needs a
Prometheus started with ``--web.enable-remote-write-receiver`` (``PrometheusServer(..., remote_write=True)``)::

    push(prometheus.url, [({"__name__": "trainer_tokens_total", "otel_bridge_rank": "0"}, 150.0)])
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Mapping

import requests

__all__ = ["push", "snappy_block", "write_request"]


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def write_request(series: Iterable[tuple[Mapping[str, str], float]], timestamp_ms: int) -> bytes:
    """``WriteRequest{timeseries: [{labels: sorted, samples: [{value, timestamp}]}]}`` as protobuf bytes."""
    out = bytearray()
    for labels, value in series:
        body = bytearray()
        for name in sorted(labels):
            body += _field(1, _field(1, name.encode()) + _field(2, labels[name].encode()))
        sample = _varint(1 << 3 | 1) + struct.pack("<d", value) + _varint(2 << 3 | 0) + _varint(timestamp_ms)
        body += _field(2, sample)
        out += _field(1, bytes(body))
    return bytes(out)


def snappy_block(data: bytes) -> bytes:
    """``data`` in snappy's block format as literals only: the length, then chunks tagged 61 (two length bytes)."""
    out = bytearray(_varint(len(data)))
    for start in range(0, len(data), 65536):
        chunk = data[start : start + 65536]
        out.append(61 << 2)
        out += struct.pack("<H", len(chunk) - 1)
        out += chunk
    return bytes(out)


def push(
    prometheus_url: str,
    series: Iterable[tuple[Mapping[str, str], float]],
    at: float | None = None,
    session: requests.Session | None = None,
) -> None:
    """Send one sample per series, stamped ``at`` (default now), to ``<prometheus_url>/api/v1/write`` (on ``session``'s
    kept connection when given: a writer that pushes without pause)."""
    stamp = int((time.time() if at is None else at) * 1000)
    response = (session or requests).post(
        f"{prometheus_url}/api/v1/write",
        data=snappy_block(write_request(series, stamp)),
        headers={
            "Content-Encoding": "snappy",
            "Content-Type": "application/x-protobuf",
            "X-Prometheus-Remote-Write-Version": "0.1.0",
        },
        timeout=5,
    )
    if response.status_code // 100 != 2:
        raise RuntimeError(f"remote write answered {response.status_code}: {response.text[:300]}")
