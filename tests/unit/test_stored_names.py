"""The names a store holds a configured family under, and how the bridge reads a family under several
(otel_bridge/prometheus_names.py ``stored_name``; plan.py ``roled`` and ``as_served``; the scrape path's
page_names.py). The escaped form is checked against prometheus_client's own OpenMetrics exposition, not restated."""

from __future__ import annotations

from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_page

from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.promql._internal.plan import FORM_LABEL, as_served, native_only, roled
from otel_bridge.producers.scrape._internal.page_names import as_configured, page_forms
from otel_bridge.producers.statistics import RawSeries
from otel_bridge.prometheus import parse_exposition
from otel_bridge.prometheus_names import NAME_FORMS, name_forms, stored_name


def test_prometheus_clients_openmetrics_sample_names_are_the_escaped_form() -> None:
    registry = CollectorRegistry()
    Counter("vllm:generation_tokens", "tokens", registry=registry).inc(3)
    Histogram("vllm:time_to_first_token_seconds", "ttft", buckets=(0.1,), registry=registry).observe(0.05)
    page = openmetrics_page(registry).decode()
    samples = {line.split("{")[0].split(" ")[0] for line in page.splitlines() if line and not line.startswith("#")}
    served = {
        "vllm:generation_tokens_total",
        "vllm:generation_tokens_created",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:time_to_first_token_seconds_count",
        "vllm:time_to_first_token_seconds_sum",
        "vllm:time_to_first_token_seconds_created",
    }
    assert samples == {stored_name(name, "escaped") for name in served}


@pytest.mark.parametrize(
    ("name", "forms"),
    [
        (
            "vllm:generation_tokens_total",
            ("vllm:generation_tokens_total", "vllm_generation_tokens_total", "ray_vllm_generation_tokens_total"),
        ),
        ("sglang:token_usage", ("sglang:token_usage", "sglang_token_usage", "ray_sglang_token_usage")),
        ("node_load1", ("node_load1",)),
        ("ray_node_cpu_utilization", ("ray_node_cpu_utilization",)),
    ],
)
def test_a_name_has_a_form_per_way_it_reaches_a_store(name: str, forms: tuple[str, ...]) -> None:
    assert tuple(stored_name(name, form) for form in name_forms(name)) == forms


def test_a_query_reads_every_sample_name_under_its_forms_and_maps_them_back() -> None:
    query = MetricQuery("vllm:ttft", name="vllm:ttft", kind="histogram", forms=("served", "ray"))
    assert query.candidate_forms == NAME_FORMS
    assert query.stored("vllm:ttft_bucket") == ("vllm:ttft_bucket", "ray_vllm_ttft_bucket")
    assert query.served_name("ray_vllm_ttft_count") == "vllm:ttft_count"
    assert query.served_name("vllm_ttft_count") is None  # not a form it reads
    ratio = MetricQuery("rate", ratio=("vllm:hits_total", "vllm:queries_total"), kind="counter")
    assert ratio.candidate_forms == NAME_FORMS
    assert MetricQuery("q", promql="sum(vllm:x)").candidate_forms == ("served",)
    assert MetricQuery("a.b", name="a.b", kind="gauge", utf8=True).candidate_forms == ("served",)


def test_one_form_reads_as_before_and_several_keep_each_servers_series_apart_per_form() -> None:
    query = MetricQuery("vllm:x", name="vllm:x", kind="counter")
    assert roled(query, "vllm:x", lambda sel: f"f({sel})", "max") == "f(vllm:x)"
    escaped = replace(query, forms=("escaped",))
    assert roled(escaped, "vllm:x", lambda sel: f"f({sel})", "max") == "f(vllm_x)"
    both = replace(query, forms=("served", "escaped"))
    assert roled(both, "vllm:x", lambda sel: f"f({sel})") == "(f(vllm:x)) or (f(vllm_x))"
    assert roled(both, "vllm:x", lambda sel: f"f({sel})", "max") == (
        f'max without ({FORM_LABEL}) ((label_replace(f(vllm:x), "{FORM_LABEL}", "0", "", "")) or '
        f'(label_replace(f(vllm_x), "{FORM_LABEL}", "1", "", "")))'
    )


def test_raw_series_under_two_forms_are_one_series_per_server_in_time_order() -> None:
    query = MetricQuery("vllm:x", name="vllm:x", kind="counter", forms=("served", "escaped"))
    server = {"instance": "a:1", "job": "rollout"}
    raw = [
        RawSeries("vllm_x", server, [(3.0, 12.0), (4.0, 15.0)]),
        RawSeries("vllm:x", server, [(1.0, 10.0), (2.0, 11.0)]),
        RawSeries("vllm_x", {"instance": "b:1", "job": "rollout"}, [(3.0, 1.0)]),
        RawSeries("other", server, [(1.0, 1.0)]),
    ]
    merged = {(s.name, s.labels["instance"]): list(s.samples) for s in as_served([query], raw)}
    assert merged == {
        ("vllm:x", "a:1"): [(1.0, 10.0), (2.0, 11.0), (3.0, 12.0), (4.0, 15.0)],
        ("vllm:x", "b:1"): [(3.0, 1.0)],
        ("other", "a:1"): [(1.0, 1.0)],
    }


RAY_PAGE = """# TYPE ray_vllm_generation_tokens_total counter
ray_vllm_generation_tokens_total{model_name="m"} 7
# TYPE ray_vllm_ttft_seconds histogram
ray_vllm_ttft_seconds_bucket{le="0.1",model_name="m"} 1
ray_vllm_ttft_seconds_bucket{le="+Inf",model_name="m"} 2
ray_vllm_ttft_seconds_sum{model_name="m"} 0.3
ray_vllm_ttft_seconds_count{model_name="m"} 2
"""


def test_a_page_serving_another_form_is_read_under_the_configured_names() -> None:
    forms = page_forms(["vllm:generation_tokens_total", "vllm:ttft_seconds"])
    families = as_configured(parse_exposition(RAY_PAGE, frozenset(forms)), forms)
    assert sorted(families) == ["vllm:generation_tokens_total", "vllm:ttft_seconds"]
    assert [s.name for s in families["vllm:ttft_seconds"].samples] == [
        "vllm:ttft_seconds_bucket",
        "vllm:ttft_seconds_bucket",
        "vllm:ttft_seconds_sum",
        "vllm:ttft_seconds_count",
    ]
    assert [(s.name, s.value) for s in families["vllm:generation_tokens_total"].samples] == [
        ("vllm:generation_tokens_total", 7.0)
    ]


def test_a_page_serving_the_configured_name_is_read_under_it_alone() -> None:
    page = RAY_PAGE + '# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{model_name="m"} 3\n'
    forms = page_forms(["vllm:generation_tokens_total"])
    families = as_configured(parse_exposition(page, frozenset(forms)), forms)
    assert [(s.name, s.value) for s in families["vllm:generation_tokens_total"].samples] == [
        ("vllm:generation_tokens_total", 3.0)
    ]


def test_a_native_histogram_under_another_form_is_read_under_its_stored_name() -> None:
    """A histogram the store holds natively under Ray's form: its native series is selected as ``ray_vllm_ttft``
    (never as a classic ``_count``'s rival of another form), combined across forms by ``or`` (PromQL's ``max`` drops
    histogram samples), and its raw parts (:func:`native_series`) are named as served, still native."""
    query = MetricQuery("vllm:ttft", name="vllm:ttft", kind="histogram", forms=("served", "ray"), stored_as="both")
    assert query.stored(query.native_name or "") == ("vllm:ttft", "ray_vllm_ttft")
    assert query.served_name("ray_vllm_ttft") == "vllm:ttft"
    only = native_only(query, "vllm:ttft", lambda sel: f"f({sel})")
    assert roled(query, "vllm:ttft", only, "max") == (
        "((f(vllm:ttft) unless f(vllm:ttft_count))) or ((f(ray_vllm_ttft) unless f(ray_vllm_ttft_count)))"
    )
    raw = [
        RawSeries("ray_vllm_ttft_count", {"instance": "a"}, [(1.0, 2.0)], [0.0], native=True),
        RawSeries("ray_vllm_ttft", {"instance": "a", "le": "0.1"}, [(1.0, 2.0)], [0.0], native=True),
    ]
    assert [(s.name, s.native, s.starts) for s in as_served([query], raw)] == [
        ("vllm:ttft_count", True, [0.0]),
        ("vllm:ttft", True, [0.0]),
    ]
