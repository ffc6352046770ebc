"""The PromQL path reads a family under the name the store holds it by (docs/compatibility.md, "Metric names").

A real Prometheus scrapes an exporter served by prometheus_client's own handler (tests/helpers/client_exporter.py).
Prometheus 2.42 asks for OpenMetrics and prometheus_client (0.23 and later) escapes the colons of its sample names, so
the store holds ``vllm_generation_tokens_total``; Prometheus 3.16 with its defaults asks for UTF-8 names and keeps
``vllm:generation_tokens_total``; 3.16 with ``metric_name_validation_scheme: legacy`` (its ``global`` section,
``config/config.go``) asks for escaped names again. Vllm's ``RayPrometheusStatLogger`` through Ray's metrics agent gives
``ray_vllm_generation_tokens_total``. The bridge is configured with vLLM's own names (the preset's) in every case, and
each step's numbers, the run's sum and the record keys must be the same; the start-up log names the form it found.

The workload is quiet around every boundary (each step's requests complete after its start and are stored before its
end), so each step's truth is exactly what the exporter counted in it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
import requests as http
from opentelemetry.sdk.metrics.export import NumberDataPoint

from otel_bridge.config import MetricConfig, PrometheusConfig
from otel_bridge.producers.base import metrics_of
from otel_bridge.producers.metric_set import resolve_metrics
from otel_bridge.producers.promql import client_for
from otel_bridge.producers.promql._internal.store import detect_store
from otel_bridge.producers.promql.producer import PromQLProducer
from otel_bridge.producers.scrape import ScrapeProducer
from otel_bridge.schema import STAT_ATTRIBUTE
from otel_bridge.window import StepWindow
from tests.helpers.client_exporter import ClientExporter
from tests.helpers.prometheus_server import PrometheusServer

pytestmark = pytest.mark.integration

INTERVAL_S = 0.5
# per step: (tokens, time to first token) of each request completed in it, and the running requests set in it
STEPS: list[tuple[list[tuple[float, float]], float]] = [
    ([(40.0, 0.02), (41.0, 0.2)], 2.0),
    ([(7.0, 0.7)], 5.0),
    ([(100.0, 0.03), (3.0, 0.04), (9.0, 0.3)], 1.0),
]
CONFIGS = [
    {"name": "vllm:generation_tokens_total", "type": "counter", "stats": ["delta"]},
    {"name": "vllm:time_to_first_token_seconds", "type": "histogram", "stats": ["count", "mean"]},
    {"name": "vllm:num_requests_running", "type": "gauge", "stats": ["max"], "agg": "sum"},
]
# (Prometheus version, metric_name_validation_scheme) -> the form the store holds vllm:generation_tokens_total under
STORES = {
    ("2.42", None): "vllm_generation_tokens_total",
    ("3.16", None): "vllm:generation_tokens_total",
    ("3.16", "legacy"): "vllm_generation_tokens_total",
}


def prometheus(workdir: Path, targets: list[str], version: str, validation: str | None) -> PrometheusServer:
    server = PrometheusServer(workdir, targets, scrape_interval_s=INTERVAL_S, version=version)
    if validation is not None:
        config = server.config()
        config["global"]["metric_name_validation_scheme"] = validation
        server.config_override = config
    return server


@pytest.fixture(params=list(STORES), ids=[f"{v}-{s or 'default'}" for v, s in STORES])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[ClientExporter, PrometheusServer, str]]:
    version, validation = request.param
    with ClientExporter() as exporter:
        server = prometheus(tmp_path / "prometheus", [exporter.hostport], version, validation)
        with server:
            exporter.complete(1.0, 0.01)  # the families exist before the run, as on a server that ran before
            exporter.set_running(0.0)
            server.wait_for_samples("up", count=2)
            yield exporter, server, STORES[request.param]


def record_of(producer: PromQLProducer | ScrapeProducer, window: StepWindow) -> dict[str, float]:
    """``window`` read by ``producer``: ``{key/stat: value}``."""
    record = {}
    for metric in metrics_of(producer.produce(window=window)):
        for point in metric.data.data_points:
            assert isinstance(point, NumberDataPoint)
            record[f"{metric.name}/{point.attributes.get(STAT_ATTRIBUTE, '')}"] = point.value
    return record


def run_steps(
    exporters: list[ClientExporter],
    server: PrometheusServer,
    producer: PromQLProducer,
    midway: dict[int, Callable[[], None]] | None = None,
) -> list[dict[str, float]]:
    """Drive :data:`STEPS` on every exporter (quiet around each boundary) and read each window: ``{key/stat: value}``
    per step. ``midway[step]`` runs after the step's first request and before its others."""
    records = []
    start = time.time()
    producer.on_boundary(start)
    server.wait_for_scrapes_after(start)
    for step, (requests, running) in enumerate(STEPS):
        for position, (tokens, ttft) in enumerate(requests):
            if position == 1 and midway and step in midway:
                server.wait_for_scrapes_after(time.time())
                midway[step]()
            for exporter in exporters:
                exporter.complete(tokens, ttft)
        for exporter in exporters:
            exporter.set_running(running)
        server.wait_for_scrapes_after(time.time())
        end = time.time()
        producer.on_boundary(end)
        server.wait_for_scrapes_after(end)
        records.append(record_of(producer, StepWindow(step, start, end)))
        start = end
    return records


def started_run(
    caplog: pytest.LogCaptureFixture,
    exporters: list[ClientExporter],
    server: PrometheusServer,
    producer: PromQLProducer,
    midway: dict[int, Callable[[], None]] | None = None,
) -> list[dict[str, float]]:
    """``producer`` started (its start-up log captured at INFO), :func:`run_steps`, and closed."""
    with caplog.at_level(logging.INFO, logger="otel_bridge"):
        producer.start()
    try:
        return run_steps(exporters, server, producer, midway)
    finally:
        producer.close()


def truth(servers: int = 1, observed: Callable[[float], float] = float) -> list[dict[str, float]]:
    """Each step's numbers over ``servers`` exporters driven alike: the gauge held the previous step's value at the
    step's start (0 before the run); ``observed`` is what the exporter makes of an observation (its own value)."""
    before = [0.0, *(running for _, running in STEPS)]
    return [
        {
            "vllm:generation_tokens_total/delta": servers * sum(t for t, _ in requests),
            "vllm:time_to_first_token_seconds/count": servers * float(len(requests)),
            "vllm:time_to_first_token_seconds/sum": servers * sum(observed(s) for _, s in requests),
            "vllm:time_to_first_token_seconds/mean": sum(observed(s) for _, s in requests) / len(requests),
            "vllm:num_requests_running/max": servers * max(before[step], running),
        }
        for step, (requests, running) in enumerate(STEPS)
    ]


def producer_for(
    server: PrometheusServer, plan: str = "store's own", configs: Sequence[dict[str, object]] = CONFIGS
) -> PromQLProducer:
    """The PromQL producer reading ``configs`` from ``server``, by the store's own increase where it has one, or
    by the samples around each boundary (``plan="boundary sums"``)."""
    client = client_for(PrometheusConfig(url=server.url))
    store = detect_store(client)
    return PromQLProducer(
        client,
        resolve_metrics([MetricConfig.model_validate(c) for c in configs]),
        scrape_interval_s=INTERVAL_S,
        recording_rules="off",
        store=store if plan == "store's own" else replace(store, increase=None),
    )


def assert_truth(records: list[dict[str, float]], servers: int = 1, observed: Callable[[float], float] = float) -> None:
    """Every step's numbers and keys, and the run's sum (:func:`truth`; a histogram's sum where it is configured)."""
    expected = truth(servers, observed)
    if not records or "vllm:time_to_first_token_seconds/sum" not in records[0]:
        expected = [{k: v for k, v in want.items() if k != "vllm:time_to_first_token_seconds/sum"} for want in expected]
    for step, (got, want) in enumerate(zip(records, expected, strict=True)):
        assert set(got) == set(want), f"step {step}: keys {sorted(got)}"
        for key, value in want.items():
            assert got[key] == pytest.approx(value), f"step {step} {key}: {got[key]} != {value}"
    run_sum = sum(r["vllm:generation_tokens_total/delta"] for r in records)
    assert run_sum == servers * sum(t for requests, _ in STEPS for t, _ in requests)


def test_each_step_reads_the_family_under_the_form_the_store_holds(
    store: tuple[ClientExporter, PrometheusServer, str], caplog: pytest.LogCaptureFixture
) -> None:
    exporter, server, stored = store
    held = {row["metric"]["__name__"] for row in server.query('{__name__=~".*generation_tokens_total"}')}
    assert held == {stored}, f"Prometheus {server.version} holds {held}"  # the setup is what the issue measured
    producer = producer_for(server)
    records = started_run(caplog, [exporter], server, producer)
    assert_truth(records)
    if stored != "vllm:generation_tokens_total":
        assert f"vllm:generation_tokens_total (metrics[0]) is stored as {stored}" in caplog.text


def test_servers_reached_two_ways_are_summed_under_both_names(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """One vLLM scraped directly (``vllm:x`` on Prometheus 3.16), one through Ray's exporter (``ray_vllm_x``): each
    step sums both servers, under the configured keys."""
    with ClientExporter() as direct, ClientExporter(prefix="ray_vllm_") as ray:
        server = prometheus(tmp_path / "prometheus", [direct.hostport, ray.hostport], "3.16", None)
        with server:
            for exporter in (direct, ray):
                exporter.complete(1.0, 0.01)
                exporter.set_running(0.0)
            server.wait_for_samples("up", count=2)
            server.wait_for_samples("ray_vllm_num_requests_running", count=1)
            producer = producer_for(server)
            records = started_run(caplog, [direct, ray], server, producer)
    assert_truth(records, servers=2)
    assert (
        "vllm:generation_tokens_total (metrics[0]) is stored under 2 names at once "
        "(vllm:generation_tokens_total, ray_vllm_generation_tokens_total)"
    ) in caplog.text


def validation(server: PrometheusServer, scheme: str | None) -> None:
    """Reload ``server`` with ``metric_name_validation_scheme: scheme`` (its default when ``None``) and wait until
    its scrapes store the form that scheme gives."""
    config = server.config()
    config.pop("global")
    config["global"] = {"scrape_interval": f"{int(INTERVAL_S * 1000)}ms", "evaluation_interval": "1s"}
    if scheme is not None:
        config["global"]["metric_name_validation_scheme"] = scheme
    server.config_override = config
    server.prepare()
    http.post(f"{server.url}/-/reload", timeout=10).raise_for_status()
    server.wait_for_scrapes_after(time.time())
    server.wait_for_scrapes_after(time.time())


@pytest.mark.parametrize("plan", ["store's own", "boundary sums"])
def test_a_server_whose_name_changes_is_counted_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, plan: str
) -> None:
    """Prometheus 3.16 switched to ``metric_name_validation_scheme: legacy`` (a reload) just before the run, so the
    store holds the server's family under ``vllm:x`` and ``vllm_x``; in the middle of step 2 it switches back. The
    same server's counter, under either name, is counted once: every step is exact, the run's sum too, read by the
    store's exact increase or by the samples around each boundary."""
    with ClientExporter() as exporter:
        server = PrometheusServer(
            tmp_path / "prometheus",
            [exporter.hostport],
            scrape_interval_s=INTERVAL_S,
            version="3.16",
            enable_lifecycle=True,
        )
        with server:
            exporter.complete(1.0, 0.01)
            exporter.set_running(0.0)
            server.wait_for_samples("vllm:generation_tokens_total", count=2)
            validation(server, "legacy")
            exporter.complete(5.0, 0.02)  # before the run, under the escaped name
            server.wait_for_scrapes_after(time.time())
            producer = producer_for(server, plan)
            records = started_run(caplog, [exporter], server, producer, {2: lambda: validation(server, None)})
            held = {r["metric"]["__name__"] for r in server.query('{__name__=~".*generation_tokens_total"}[1m]')}
    assert held == {"vllm:generation_tokens_total", "vllm_generation_tokens_total"}
    assert_truth(records)
    assert "vllm:generation_tokens_total (metrics[0]) is stored under 2 names at once" in caplog.text


@pytest.mark.parametrize("prefix", ["vllm:", "ray_vllm_"], ids=["prometheus_client", "ray-agent-names"])
def test_the_scrape_path_reads_the_family_under_the_name_the_page_serves(prefix: str) -> None:
    """The scrape path asks for ``text/plain; version=0.0.4``: prometheus_client answers it with the names as
    registered (``vllm:x``, not the OpenMetrics escaping a Prometheus 2.x gets); a page serving Ray's agent names
    (``ray_vllm_x``) is read under the configured names too. Each step's numbers and keys are the PromQL path's."""
    queries = resolve_metrics([MetricConfig.model_validate(c) for c in CONFIGS])
    with ClientExporter(prefix=prefix) as exporter:
        exporter.complete(1.0, 0.01)
        exporter.set_running(0.0)
        producer = ScrapeProducer([exporter.hostport], queries, sample_interval_s=0.05)
        producer.start()
        try:
            records = []
            start = time.time()
            producer.on_boundary(start)
            producer.produce(window=StepWindow(step=-1, start=None, end=start))  # the run's first boundary, read
            for step, (requests, running) in enumerate(STEPS):
                exporter.wait_for_scrapes()  # the gauge's value at the start is read inside the step, as Prometheus'
                for tokens, ttft in requests:
                    exporter.complete(tokens, ttft)
                exporter.set_running(running)
                exporter.wait_for_scrapes()
                end = time.time()
                producer.on_boundary(end)
                records.append(record_of(producer, StepWindow(step, start, end)))
                start = end
        finally:
            producer.close()
    assert_truth(records)


# How Prometheus 3.16 with convert_classic_histograms_to_nhcb stores vllm:time_to_first_token_seconds, by exporter
# and validation: (exporter prefix, metric_name_validation_scheme) -> (the name it is stored under, native or classic).
CONVERTED = {
    "ray-names": (("ray_vllm_", None), ("ray_vllm_time_to_first_token_seconds", "native")),
    "legacy": (("vllm:", "legacy"), ("vllm_time_to_first_token_seconds", "classic")),
}


@pytest.mark.parametrize("plan", ["store's own", "boundary sums"])
@pytest.mark.parametrize("case", list(CONVERTED))
def test_a_converted_histogram_is_read_under_the_form_the_store_holds(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, plan: str, case: str
) -> None:
    """Prometheus 3.16 with ``convert_classic_histograms_to_nhcb``, the bridge configured with vLLM's names.

    ``ray-names``: an exporter serving Ray's agent names (``ray_vllm_x``, classic names, kept whatever the validation)
    is stored as one native series ``ray_vllm_time_to_first_token_seconds`` and no ``_count``: the bridge finds the
    form from the native series, asks how the histogram is stored under that form, and reads it natively under that
    name. ``legacy``: with ``metric_name_validation_scheme: legacy``, prometheus_client 0.26 answers OpenMetrics with
    escaped sample names (``vllm_x_count``) under an unescaped ``# TYPE vllm:x histogram`` line
    (prometheus/client_python#1177), so Prometheus does not see them as a histogram's and does not convert them: the
    store holds classic ``vllm_x_*`` series, read as such. Either way the count and sum are exact every step, by the
    store's exact increase and by the samples around each boundary, under the configured keys."""
    (prefix, scheme), (stored, storage) = CONVERTED[case]
    with ClientExporter(prefix=prefix) as exporter:
        server = PrometheusServer(
            tmp_path / "prometheus",
            [exporter.hostport],
            scrape_interval_s=INTERVAL_S,
            version="3.16",
            scrape_options={"convert_classic_histograms_to_nhcb": True},
        )
        if scheme is not None:
            config = server.config()
            config["global"]["metric_name_validation_scheme"] = scheme
            server.config_override = config
        with server:
            exporter.complete(1.0, 0.01)
            exporter.set_running(0.0)
            server.wait_for_samples("up", count=2)
            server.wait_for_samples(f"{stored}_sum" if storage == "classic" else stored, count=1)
            held = {r["metric"]["__name__"] for r in server.query(f'{{__name__=~"{stored}(_count|_bucket)?"}}')}
            native = server.query(f"histogram_count({stored})")
            # the setup is what was measured: a change of prometheus_client's escaping would change it
            assert (held, bool(native)) == (
                ({stored}, True) if storage == "native" else ({f"{stored}_count", f"{stored}_bucket"}, False)
            )
            configs = [*CONFIGS[:1], {**CONFIGS[1], "stats": ["count", "sum", "mean"]}, *CONFIGS[2:]]
            producer = producer_for(server, plan, configs)
            records = started_run(caplog, [exporter], server, producer)
    assert_truth(records)
    assert f"vllm:time_to_first_token_seconds (metrics[1]) is stored as {stored}:" in caplog.text
    said_native = "vllm:time_to_first_token_seconds (metrics[1]) is stored at"
    assert (said_native in caplog.text) == (storage == "native")
