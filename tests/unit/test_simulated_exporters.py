"""How the simulated exporters serve ``/metrics`` (issue 35, point 2): vLLM's text route, prometheus_client's
content negotiation, a data-parallel vLLM in prometheus_client's multiprocess mode, SGLang. What a real Prometheus
stores from each is tests/integration/test_negotiation.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from otel_bridge.producers.scrape._internal.endpoint import ACCEPT
from otel_bridge.prometheus.exposition import parse_exposition
from otel_bridge.tools.simulation.data_parallel import DataParallelVLLM
from otel_bridge.tools.simulation.http import MetricsRoute
from otel_bridge.tools.simulation.sglang import SGLangSimulator
from otel_bridge.tools.simulation.vllm import VLLMServer, VLLMSimulator

SGLANG_CAPTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sglang" / "metrics-after.txt"
PROMETHEUS_2_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
"""What Prometheus 2.x asks for (scrape/scrape.go, ``scrapeAcceptHeader``)."""
PROMETHEUS_3_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
    "application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,"
    "text/plain;version=0.0.4;q=0.2,*/*;q=0.1"
)
"""What Prometheus 3 asks for with its default (UTF-8) name validation."""
REQUEST: dict[str, Any] = {"prompt_tokens": 7, "generation_tokens": 5, "ttft_s": 0.1, "e2e_s": 0.5, "itl_s": 0.1}


def get(server: VLLMServer, accept: str) -> tuple[str, str]:
    response = requests.get(server.url, headers={"Accept": accept}, timeout=10)
    response.raise_for_status()
    return response.headers["Content-Type"], response.text


@pytest.fixture
def served(request: pytest.FixtureRequest) -> Iterator[VLLMServer]:
    route: MetricsRoute = request.param
    sim = VLLMSimulator()
    sim.complete_request(**REQUEST, queue_s=0.01)
    with VLLMServer(sim, route=route) as server:
        yield server


@pytest.mark.parametrize("served", ["text"], indirect=True)
@pytest.mark.parametrize("accept", [PROMETHEUS_2_ACCEPT, PROMETHEUS_3_ACCEPT, ACCEPT, ""])
def test_vllms_text_route_answers_text_whatever_is_asked(served: VLLMServer, accept: str) -> None:
    content_type, body = get(served, accept)
    assert content_type == "text/plain; version=1.0.0; charset=utf-8"
    assert 'vllm:generation_tokens_total{engine="0",model_name="tiny"} 5.0' in body.splitlines()


@pytest.mark.parametrize("served", ["negotiate"], indirect=True)
def test_negotiating_route_escapes_the_colon_on_openmetrics_sample_lines_for_a_prometheus_2(
    served: VLLMServer,
) -> None:
    content_type, body = get(served, PROMETHEUS_2_ACCEPT)
    assert content_type.startswith("application/openmetrics-text; version=1.0.0")
    lines = body.splitlines()
    # prometheus/client_python#1177: HELP/TYPE keep the colon, the samples do not.
    assert "# TYPE vllm:generation_tokens counter" in lines
    assert 'vllm_generation_tokens_total{engine="0",model_name="tiny"} 5.0' in lines
    assert lines[-1] == "# EOF"


@pytest.mark.parametrize("served", ["negotiate"], indirect=True)
def test_negotiating_route_keeps_the_colon_for_a_prometheus_3_and_the_scrape_path(served: VLLMServer) -> None:
    content_type, body = get(served, PROMETHEUS_3_ACCEPT)
    assert content_type.startswith("application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=allow-utf-8")
    assert 'vllm:generation_tokens_total{engine="0",model_name="tiny"} 5.0' in body.splitlines()
    # The scrape path asks for the text format 0.0.4: what it reads from a negotiating exporter is vLLM's own names.
    content_type, body = get(served, ACCEPT)
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert parse_exposition(body)["vllm:generation_tokens_total"].samples[0].value == 5.0


def families(text: str) -> dict[str, tuple[str, set[str]]]:
    """Family name -> (type, label names) of a text page."""
    found: dict[str, tuple[str, set[str]]] = {}
    for family in text_string_to_metric_families(text):
        labels = {name for sample in family.samples for name in sample.labels} - {"le"}
        found[family.name] = (family.type, labels)
    return found


@pytest.fixture(scope="module")
def data_parallel() -> Iterator[DataParallelVLLM]:
    with DataParallelVLLM(api_servers=2, gauge_modes={"vllm:kv_cache_usage_perc": "all"}) as dp:
        yield dp


def test_data_parallel_vllm_has_the_families_of_one_process_less_process_and_created_ones() -> None:
    single = families(VLLMSimulator().exposition().decode())
    with DataParallelVLLM(api_servers=2, gauge_modes={"vllm:kv_cache_usage_perc": "all"}) as dp:
        multi = families(dp.exposition().decode())
    expected = {name: v for name, v in single.items() if name.startswith("vllm:") and not name.endswith("_created")}
    assert multi.keys() == expected.keys()
    assert not [name for name in multi if name.startswith(("process_", "python_"))]
    # A mostrecent gauge no process has set yet has no series (prometheus_client keeps only values with a timestamp);
    # a gauge of mode "all" has one per process, by pid.
    unset = {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:num_requests_waiting_by_reason"}
    assert {name for name, (_, labels) in multi.items() if not labels} == unset
    assert multi["vllm:kv_cache_usage_perc"] == ("gauge", {"engine", "model_name", "pid"})
    assert {n: v for n, v in multi.items() if n not in unset | {"vllm:kv_cache_usage_perc"}} == {
        n: v for n, v in expected.items() if n not in unset | {"vllm:kv_cache_usage_perc"}
    }


def test_data_parallel_vllm_sums_counters_over_its_processes_and_labels_unmoded_gauges_by_pid(
    data_parallel: DataParallelVLLM,
) -> None:
    before = data_parallel.totals()
    for _ in range(3):  # in turn over the two API servers: 2 + 1 requests
        data_parallel.complete_request(**REQUEST, queue_s=0.01)
    data_parallel.set_running(4)  # mostrecent: one series
    first, second = data_parallel.pids
    data_parallel.set_kv_cache_usage_in(0, 0.25)
    data_parallel.set_kv_cache_usage_in(1, 0.5)
    after = data_parallel.totals()
    assert after["vllm:generation_tokens_total"] - before.get("vllm:generation_tokens_total", 0.0) == 15.0
    assert after["vllm:request_success_total"] - before.get("vllm:request_success_total", 0.0) == 3.0
    page = parse_exposition(data_parallel.exposition().decode())
    assert [s.value for s in page["vllm:num_requests_running"].samples] == [4.0]
    usage = {s.labels["pid"]: s.value for s in page["vllm:kv_cache_usage_perc"].samples}
    assert usage == {str(first): 0.25, str(second): 0.5}


def test_data_parallel_vllm_restarts_with_new_processes_counting_from_zero() -> None:
    with DataParallelVLLM(api_servers=2) as dp:
        dp.complete_request(**REQUEST, queue_s=0.01)
        old = dp.pids
        dp.restart()
        assert set(dp.pids).isdisjoint(old)
        assert dp.totals().get("vllm:generation_tokens_total", 0.0) == 0.0


def test_sglang_has_the_captured_families_without_created_ones_and_negotiates() -> None:
    sim = SGLangSimulator()
    for streaming in (True, False):
        sim.complete_request(**REQUEST, streaming=streaming)
    captured = {
        name: kind_labels
        for name, kind_labels in families(SGLANG_CAPTURE.read_text(encoding="utf-8")).items()
        if not name.endswith("_created")
    }
    with VLLMServer(sim, route="negotiate") as server:
        assert families(get(server, ACCEPT)[1]) == captured
        content_type, body = get(server, PROMETHEUS_2_ACCEPT)
    assert content_type.startswith("application/openmetrics-text")
    assert 'sglang_generation_tokens_total{engine_type="unified",is_streaming="true",model_name="tiny"} 5.0' in body
    assert sim.totals()["sglang:generation_tokens_total"] == 10.0
