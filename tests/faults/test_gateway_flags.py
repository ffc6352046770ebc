"""A real Prometheus behind a gateway that answers ``/flags`` with 200 (issue 37 finding 4).

Before: a ``text/plain`` answer at ``/flags`` was taken for VictoriaMetrics' flag list, so the store was read with
MetricsQL's ``increase()`` (Prometheus' extrapolating one): the run summed 200 of 1,002, 9 of 10 steps read 0, on
both 2.42 and 3.16. Now what a path answers is confirmed by behaviour: VictoriaMetrics is the store that evaluates
MetricsQL; a store that does not is taken for what its behaviour says (Prometheus), with a start-up WARNING and a
note ``doctor`` prints.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from otel_bridge.config import PrometheusConfig
from otel_bridge.producers.promql import client_for
from otel_bridge.producers.promql._internal.store import detect_store
from tests.faults.support import count_logs
from tests.helpers.http_servers import Forward, RecordedRequest, Response, forwarding_proxy
from tests.helpers.prometheus_server import PrometheusServer

pytestmark = pytest.mark.integration


def answers_flags(request: RecordedRequest, forward: Forward) -> Response:
    """A gateway with a ``/flags`` of its own (a plain-text page of flags, as VictoriaMetrics writes them)."""
    if request.path.split("?")[0] == "/flags":
        return Response(body=b'-search.maxQueryLen="16384"\n', headers={"Content-Type": "text/plain; charset=utf-8"})
    return forward()


def test_a_prometheus_behind_a_gateway_answering_flags_is_still_prometheus(
    tmp_path: Path, prometheus_version: str, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        PrometheusServer(tmp_path, version=prometheus_version) as prometheus,
        forwarding_proxy(prometheus.url, answers_flags) as gateway,
    ):
        client = client_for(PrometheusConfig(url=gateway.url))
        assert client.flags() is not None  # what the path alone says
        with caplog.at_level(logging.WARNING, logger="otel_bridge"):
            store = detect_store(client)
        client.close()
    assert store.product == "Prometheus"
    assert store.increase == ("anchored" if prometheus_version == "3.16" else None)
    assert store.max_query_bytes is None
    assert ("nocache", "1") not in store.query_params
    assert count_logs(caplog, "/flags") == 1
    assert any("/flags" in note for note in store.notes)  # doctor prints a store's notes
