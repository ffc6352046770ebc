"""What a real Prometheus stores from each simulated exporter, by the way it serves ``/metrics`` (issue 35, point 2).

One Prometheus per case scrapes four simulated servers: vLLM through its own text route, vLLM through
prometheus_client's negotiation, a data-parallel vLLM (two API server processes in prometheus_client's multiprocess
mode, vLLM's text route) and SGLang (prometheus_client's ``make_asgi_app``: negotiation, multiprocess mode). The stored
names are asked of Prometheus itself. Cases: Debian's 2.42 (asks for OpenMetrics without ``escaping``: a negotiating
exporter's colons become underscores), 3.16 with its defaults (asks with ``escaping=allow-utf-8``: names as served)
and 3.16 with ``metric_name_validation_scheme: legacy`` (escapes them again).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from otel_bridge.tools.simulation.data_parallel import DataParallelVLLM
from otel_bridge.tools.simulation.sglang import SGLangSimulator
from otel_bridge.tools.simulation.vllm import VLLMServer, VLLMSimulator
from tests.helpers.prometheus_server import PrometheusServer

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Store:
    version: str
    legacy: bool = False

    @property
    def escapes(self) -> bool:
        """Whether this Prometheus asks a negotiating exporter for names with the colon escaped."""
        return self.version == "2.42" or self.legacy


STORES = [Store("2.42"), Store("3.16"), Store("3.16", legacy=True)]


@dataclass
class Exporters:
    text: VLLMServer
    negotiate: VLLMServer
    data_parallel: VLLMServer
    sglang: VLLMServer


@pytest.fixture(scope="module")
def exporters() -> Iterator[Exporters]:
    """The four servers, each with one request counted, shared by the module's cases (they are only read)."""
    with DataParallelVLLM(api_servers=2) as dp:
        single, negotiating, sglang = VLLMSimulator(), VLLMSimulator(), SGLangSimulator()
        servers = [
            VLLMServer(single, route="text"),
            VLLMServer(negotiating, route="negotiate"),
            VLLMServer(dp, route="text"),
            VLLMServer(sglang, route="negotiate"),
        ]
        try:
            for server in servers:
                server.start()
            request: dict[str, Any] = {"prompt_tokens": 7, "generation_tokens": 5, "ttft_s": 0.1, "e2e_s": 0.5}
            request["itl_s"] = 0.1
            for engine in (single, negotiating, dp):
                engine.complete_request(**request, queue_s=0.01)
            sglang.complete_request(**request)
            yield Exporters(*servers)
        finally:
            for server in servers:
                server.stop()


def _prometheus(workdir: Path, store: Store, targets: list[str]) -> PrometheusServer:
    if not store.legacy:
        return PrometheusServer(workdir, targets, version=store.version)
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "metric_name_validation_scheme": "legacy"},
        "scrape_configs": [{"job_name": "rollout", "scrape_timeout": "1s", "static_configs": [{"targets": targets}]}],
    }
    return PrometheusServer(workdir, version=store.version, config_override=config)


def _stored_names(prometheus: PrometheusServer, pattern: str) -> dict[str, set[str]]:
    """Instance -> the names stored for it that match ``pattern`` (a regular expression on ``__name__``)."""
    names: dict[str, set[str]] = {}
    for series in prometheus.query(f'{{__name__=~"{pattern}"}}'):
        names.setdefault(series["metric"]["instance"], set()).add(series["metric"]["__name__"])
    return names


@pytest.mark.parametrize("store", STORES, ids=lambda s: f"prometheus-{s.version}{'-legacy' if s.legacy else ''}")
def test_prometheus_stores_what_each_exporter_serves(store: Store, exporters: Exporters, tmp_path: Path) -> None:
    servers = [exporters.text, exporters.negotiate, exporters.data_parallel, exporters.sglang]
    with _prometheus(tmp_path, store, [s.hostport for s in servers]) as prometheus:
        prometheus.wait_for_samples('up{job="rollout"}', count=2 * len(servers))
        prometheus.wait_for_scrapes_after(max(s.sim.started for s in servers))
        tokens = _stored_names(prometheus, "(vllm|sglang).generation_tokens_total")
        starts = _stored_names(prometheus, "process_start_time_seconds")
        created = _stored_names(prometheus, "(vllm|sglang).generation_tokens_created")
        kv = _stored_names(prometheus, "vllm.kv_cache_usage_perc")
    negotiated = "_" if store.escapes else ":"
    assert tokens == {
        exporters.text.hostport: {"vllm:generation_tokens_total"},
        exporters.negotiate.hostport: {f"vllm{negotiated}generation_tokens_total"},
        exporters.data_parallel.hostport: {"vllm:generation_tokens_total"},
        exporters.sglang.hostport: {f"sglang{negotiated}generation_tokens_total"},
    }
    assert kv[exporters.negotiate.hostport] == {f"vllm{negotiated}kv_cache_usage_perc"}
    # Multiprocess mode (data-parallel vLLM, SGLang): no process start time, no _created series.
    assert set(starts) == {exporters.text.hostport, exporters.negotiate.hostport}
    # Both single-process pages' _created series are stored (the OpenMetrics _created lines too, under the stored
    # form), a multiprocess page has none.
    assert set(created) == {exporters.text.hostport, exporters.negotiate.hostport}
