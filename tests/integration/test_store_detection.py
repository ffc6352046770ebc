"""Feature detection against the real stores (issue 24 point 5): the PromQL path reads what it talks to once at
start-up, from the store's own API and probe queries, never from a version string alone (VictoriaMetrics answers
``/api/v1/status/buildinfo`` with a Prometheus version of its own choosing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_bridge.config import PrometheusConfig
from otel_bridge.producers.promql.connect import client_for
from otel_bridge.producers.promql.store import VICTORIAMETRICS_MAX_QUERY_BYTES, detect_store
from tests.helpers.prometheus_server import PrometheusServer
from tests.helpers.victoriametrics import VictoriaMetricsServer

pytestmark = pytest.mark.integration


def test_prometheus_2_has_neither_anchored_increases_nor_utf8_names(tmp_path: Path) -> None:
    with PrometheusServer(tmp_path, version="2.42") as prometheus:
        store = detect_store(client_for(PrometheusConfig(url=prometheus.url)))
    assert (store.product, store.version) == ("Prometheus", "2.42.0+ds")  # Debian's build
    assert store.increase is None  # the bridge sums each boundary's samples and re-reads what reset
    assert not store.utf8_names
    assert (store.query_params, store.max_query_bytes, store.storing_delay_s) == ((), None, 0.0)


def test_prometheus_3_has_anchored_increases_and_utf8_names(tmp_path: Path) -> None:
    with PrometheusServer(tmp_path, version="3.16") as prometheus:
        store = detect_store(client_for(PrometheusConfig(url=prometheus.url)))
    assert (store.product, store.version) == ("Prometheus", "3.16.0")
    assert (store.increase, store.utf8_names) == ("anchored", True)
    assert store.exact_increase("x", "30s", "12.000") == "increase(x[30s] anchored @ 12.000)"


@pytest.mark.parametrize(("flag", "limit"), [(None, VICTORIAMETRICS_MAX_QUERY_BYTES), ("4096", 4096)])
def test_victoria_metrics_is_told_by_its_flags_not_by_the_version_it_reports(
    tmp_path: Path, flag: str | None, limit: int
) -> None:
    with VictoriaMetricsServer(tmp_path, max_query_len=flag) as victoria:
        client = client_for(PrometheusConfig(url=victoria.url))
        assert client.buildinfo()["version"].startswith("2.")  # what it claims to be
        store = detect_store(client)
        assert store.product == "VictoriaMetrics"
        assert store.increase == "metricsql"  # its increase() starts from the last sample before the range
        assert store.max_query_bytes == limit
        assert ("nocache", "1") in store.query_params
        assert store.storing_delay_s > 0
        assert client.query("vector(1)").series  # the query parameters it needs go with every query
