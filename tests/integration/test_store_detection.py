"""Feature detection against the real stores (issue 24 point 5): the PromQL path reads what it talks to once at
start-up, from the store's own API and probe queries, never from a version string alone (VictoriaMetrics answers
``/api/v1/status/buildinfo`` with a Prometheus version of its own choosing)."""

from __future__ import annotations

import itertools
import time
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from otel_bridge.config import PrometheusConfig
from otel_bridge.producers.promql import client_for
from otel_bridge.producers.promql._internal.store import VICTORIAMETRICS_MAX_QUERY_BYTES, detect_store
from otel_bridge.prometheus.client import PrometheusClient
from tests.conftest import Replica
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


def _stores(
    tmp_path: Path, which: str, replica: Replica
) -> AbstractContextManager[PrometheusServer | VictoriaMetricsServer]:
    if which == "victoria-metrics":
        return VictoriaMetricsServer(tmp_path, [replica.hostport], scrape_interval_s=3.0)
    return PrometheusServer(tmp_path, [replica.hostport], scrape_interval_s=3.0, version="3.16")


@pytest.mark.parametrize("which", ["prometheus-3.16", "victoria-metrics"])
def test_a_window_without_a_sample_has_an_exact_increase_of_zero(tmp_path: Path, which: str) -> None:
    """A step shorter than the scrape interval can fall between two samples: ``increase()`` answers nothing for the
    series there (in both stores), and the window must still read 0 for it rather than lose its key (found by the
    boundary-truth short steps against 3.16). The window that holds the next sample reads its whole change."""
    replica = Replica()
    try:
        with _stores(tmp_path, which, replica) as server:
            client = client_for(PrometheusConfig(url=server.url))
            store = detect_store(client)
            name = "vllm:generation_tokens_total"
            t0, v0, t1, v1 = _samples_around_a_change(client, name, replica)
            between = t0 + (t1 - t0) / 2
            assert not client.query(store.exact_increase(name, "500ms", f"{between:.3f}")).series  # increase() alone
            empty = client.query(store.exact_increase(name, "500ms", f"{between:.3f}", present="6s")).series
            assert [s.samples[-1][1] for s in empty] == [0.0]
            whole = client.query(store.exact_increase(name, f"{round((t1 - between) * 1000)}ms", f"{t1:.3f}"))
            assert [s.samples[-1][1] for s in whole.series] == [v1 - v0]
    finally:
        replica.stop()


def _samples_around_a_change(
    client: PrometheusClient, name: str, replica: Replica
) -> tuple[float, float, float, float]:
    """Two adjacent samples of ``name`` (``t0, v0, t1, v1``) between which the counter moved."""
    deadline = time.monotonic() + 30.0
    moved = False
    while time.monotonic() < deadline:
        found = client.query(f"{name}[1m]").series
        samples = list(found[0].samples) if found else []
        for (t0, v0), (t1, v1) in itertools.pairwise(samples):
            if v1 > v0:
                return t0, v0, t1, v1
        if samples and not moved:
            replica.sim.complete_request(3, 5, ttft_s=0.1, e2e_s=0.2, queue_s=0.0, itl_s=0.01)
            moved = True
        time.sleep(0.5)
    raise AssertionError(f"no two samples of {name} around a change within 30 s")
