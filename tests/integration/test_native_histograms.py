"""Histograms stored as native histograms (Prometheus 3's ``convert_classic_histograms_to_nhcb``) read with the same
statistics as classic ones, on every window source of the PromQL path (docs/compatibility.md, native histograms).

Two simulated vLLM replicas serve classic histograms; three Prometheus 3.16 scrape them at once, every 0.5 s: one
stores them classic (``_bucket``, ``_sum``, ``_count``), one converts each into one native series with custom buckets
(NHCB: no classic series), one stores both (``always_scrape_classic_histograms`` beside the conversion: read one, never
count twice). Live traffic (tests/helpers/traffic.py) runs across the steps, a replica restarts in the middle of one;
each boundary is quiet for more than two scrape intervals, so Prometheus' samples stand for it exactly and every step's
count and sum equal the truth. The windows are read after the run from each store through the samples around the
boundaries and through the store's exact increase (``increase(x[w] anchored)``, which takes native histograms too),
the run's last window (closed by the first sample after its end) included: every statistic, quantiles and their bounds
included, must be the classic store's. The recording rules (``otel-bridge prometheus-rules``) sum classic series: on
the native store the rule source says it cannot read the histograms, and they are read beside the rules.

Prometheus 2.42 has no custom-bucket native histograms: ``convert_classic_histograms_to_nhcb`` is a 3.x key, and
2.42 refuses to start with it (the last test), so the reading runs on 3.16 only.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics.export import NumberDataPoint

from otel_bridge import Bridge
from otel_bridge.config import MetricConfig, PrometheusConfig
from otel_bridge.errors import ConfigError
from otel_bridge.producers.base import metrics_of
from otel_bridge.producers.metric_set import MetricQuery, resolve_metrics
from otel_bridge.producers.promql import client_for
from otel_bridge.producers.promql._internal.rules import rules_document
from otel_bridge.producers.promql._internal.store import detect_store
from otel_bridge.producers.promql.producer import PromQLProducer
from otel_bridge.schema import STAT_ATTRIBUTE
from otel_bridge.window import StepWindow
from tests.conftest import Replica
from tests.helpers.prometheus_server import PrometheusServer
from tests.helpers.traffic import Traffic

pytestmark = [
    pytest.mark.integration,
    pytest.mark.sleeps(
        30, reason="live traffic for each step, and a quiet spell of two scrape intervals at each boundary"
    ),
]

INTERVAL_S = 0.5
QUIET_S = 1.2  # more than two scrape intervals: the last sample before each boundary holds everything before it
SCRAPE_LAG_S = 0.3  # quiet after a boundary too: a scrape stamped at or before it may reach a replica just after it
STEPS = 4
TRAFFIC_S = 1.5
RESTART_STEP = 2
FORMS = {
    "classic": {},
    "native": {"convert_classic_histograms_to_nhcb": True},
    "both": {"convert_classic_histograms_to_nhcb": True, "always_scrape_classic_histograms": True},
}
TOKENS = "vllm:request_generation_tokens"  # observes each request's generated tokens: sum = tokens, count = requests
QUEUE = "vllm:request_queue_time_seconds"  # every queue time (0.5-5 ms) lies in the lowest bucket, le=0.3
COUNTER = "vllm:generation_tokens_total"
METRICS = [
    {"name": TOKENS, "type": "histogram", "stats": ["count", "sum", "mean", "p50", "p90", "p99"]},
    {"name": QUEUE, "type": "histogram", "stats": ["count", "sum", "p50", "p99"]},
    {"name": COUNTER, "type": "counter", "stats": ["delta"]},
]

Values = dict[tuple[str, str], float]


@dataclasses.dataclass
class Run:
    """The servers, the step windows and the truth of one run of traffic."""

    servers: dict[str, PrometheusServer]
    windows: list[StepWindow]
    truth: list[tuple[int, int]]  # (tokens, requests) per window
    scraped: list[dict[str, float]]  # the records of a bridge reading the native store with boundary scrapes


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    root = tmp_path_factory.mktemp("native-histograms")
    replicas = [Replica(), Replica()]
    servers: dict[str, PrometheusServer] = {}
    rules = rules_document(queries(), INTERVAL_S)
    try:
        for form, options in FORMS.items():
            servers[form] = PrometheusServer(
                root / form,
                [r.hostport for r in replicas],
                scrape_interval_s=INTERVAL_S,
                version="3.16",
                scrape_options=options,
                rules=rules,
            ).start()
        for server in servers.values():
            server.wait_for_samples("vllm:generation_tokens_total", count=2)
        yield drive(replicas, servers, root)
    finally:
        for server in servers.values():
            server.stop()
        for replica in replicas:
            replica.stop()


def drive(replicas: Sequence[Replica], servers: dict[str, PrometheusServer], root: Path) -> Run:
    boundaries: list[float] = []
    # A bridge reading the native store with its own boundary scrapes, live: the targets serve classic text.
    scraping = Bridge.from_config(
        {
            "metrics": METRICS,
            "run": {"name": "boundary-scrapes", "dir": str(root)},
            "prometheus": {"url": servers["native"].url, "scrape_interval_s": INTERVAL_S, "boundary": "scrape"},
        }
    )
    with scraping, Traffic([r.sim for r in replicas], seed=35, max_tokens=60) as traffic:
        for step in range(STEPS + 1):
            with traffic.quiet(after_s=SCRAPE_LAG_S):
                time.sleep(QUIET_S)
                boundaries.append(time.time())
                if step:
                    scraping.end_step(step - 1)
                if step < STEPS:
                    scraping.begin_step(step)
            if step == STEPS:
                break
            time.sleep(TRAFFIC_S / 2)
            if step == RESTART_STEP:
                traffic.restart(0, quiet_before_s=QUIET_S)  # counters and histograms from zero, seen by every store
            time.sleep(TRAFFIC_S / 2)
        traffic.stop()
        truth = [traffic.truth(a, b) for a, b in itertools.pairwise(boundaries)]
    for server in servers.values():  # the run's last window is closed by each series' first sample after its end
        server.wait_for_scrapes_after(boundaries[-1] + INTERVAL_S)
    windows = [
        StepWindow(step, start, end, final=step == STEPS - 1)
        for step, (start, end) in enumerate(itertools.pairwise(boundaries))
    ]
    records = [scraping.record(step) for step in range(STEPS)]
    scraped = [dict(record.values) if record is not None else {} for record in records]
    return Run(servers, windows, [(t.tokens, t.requests) for t in truth], scraped)


def queries() -> list[MetricQuery]:
    return resolve_metrics([MetricConfig.model_validate(m) for m in METRICS])


def read(server: PrometheusServer, windows: Sequence[StepWindow], plan: str, rules: str = "off") -> list[Values]:
    """Every window's statistics from ``server`` through ``plan``: the store's exact increase, or the samples around
    the boundaries (the run's last window of a native histogram closed by its first sample after the end, or on a
    store without ``first_over_time`` by its last one up to a scrape interval after it)."""
    client = client_for(PrometheusConfig(url=server.url))
    store = detect_store(client)
    assert store.increase == "anchored"
    assert store.first_over_time
    if plan != "exact increase":
        store = dataclasses.replace(store, increase=None)
    if plan == "samples, no first_over_time":  # Prometheus 3.0 to 3.13 without promql-experimental-functions
        store = dataclasses.replace(store, first_over_time=False)
    producer = PromQLProducer(
        client,
        queries(),
        scrape_interval_s=INTERVAL_S,
        recording_rules=rules,
        store=store,  # type: ignore[arg-type]
    )
    producer.start()
    try:
        out = []
        for window in windows:
            values: Values = {}
            for metric in metrics_of(producer.produce(window=window)):
                for point in metric.data.data_points:
                    assert isinstance(point, NumberDataPoint)
                    values[(metric.name, str((point.attributes or {}).get(STAT_ATTRIBUTE)))] = float(point.value)
            out.append(values)
        return out
    finally:
        producer.close()


def test_classic_store_reads_the_truth(run: Run) -> None:
    """The baseline: every step's count and sum of the classic store are the traffic's (quiet boundaries)."""
    for plan in ("samples", "exact increase"):
        for step, values in enumerate(read(run.servers["classic"], run.windows, plan)):
            tokens, requests = run.truth[step]
            assert values[(TOKENS, "count")] == requests, (plan, step)
            assert values[(TOKENS, "sum")] == tokens, (plan, step)
            assert values[(COUNTER, "delta")] == tokens, (plan, step)


@pytest.mark.parametrize("plan", ["samples", "exact increase", "samples, no first_over_time"])
@pytest.mark.parametrize("form", ["native", "both"])
def test_native_histograms_give_the_classic_statistics(run: Run, form: str, plan: str) -> None:
    classic = read(run.servers["classic"], run.windows, plan)
    stored = read(run.servers[form], run.windows, plan)
    for step, (want, got) in enumerate(zip(classic, stored, strict=True)):
        tokens, requests = run.truth[step]
        assert got[(TOKENS, "count")] == requests, (form, plan, step)
        assert got[(TOKENS, "sum")] == tokens, (form, plan, step)
        assert set(got) == set(want), (form, plan, step)
        for key, value in want.items():
            assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-15), (form, plan, step, key)
        # Every queue time is below the lowest bound (0.3 s): Prometheus' p99 reads 0.297 s, the sum bounds it far
        # below; the native histogram's buckets prove the same bound as the classic ones.
        assert got[(QUEUE, "p99")] < 0.29, (form, plan, step)


def test_the_rules_say_they_cannot_read_native_histograms(run: Run, caplog: pytest.LogCaptureFixture) -> None:
    """The rules file sums classic series: on the native store, ``required`` is refused naming the histograms;
    ``auto`` reads them beside the rules, with the classic store's figures."""
    client = client_for(PrometheusConfig(url=run.servers["native"].url))
    producer = PromQLProducer(client, queries(), scrape_interval_s=INTERVAL_S, recording_rules="required")
    with pytest.raises(ConfigError, match="native histogram"):
        producer.start()
    producer.close()
    classic = read(run.servers["classic"], run.windows, "exact increase")
    with caplog.at_level(logging.INFO, logger="otel_bridge"):
        ruled = read(run.servers["native"], run.windows, "exact increase", rules="auto")
    assert "native histogram" in caplog.text
    for want, got in zip(classic, ruled, strict=True):
        for key, value in want.items():
            if key[0] != COUNTER:  # read at the rule evaluations, lagging by up to one
                assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-15), key


def test_boundary_scrapes_read_the_targets_whatever_the_store_keeps(run: Run) -> None:
    """The bridge's own boundary scrapes read the classic text the targets serve: the native store changes nothing."""
    for step, record in enumerate(run.scraped):
        tokens, requests = run.truth[step]
        assert record["rollout/vllm/request_generation_tokens/count"] == requests, step
        assert record["rollout/vllm/request_generation_tokens/sum"] == tokens, step
        assert record["rollout/vllm/generation_tokens_total/delta"] == tokens, step


def test_a_histogram_whose_server_comes_up_after_the_bridge_is_read_natively_from_the_next_window(
    tmp_path: Path,
) -> None:
    """Nothing stored at start-up (the rollout server is not up yet): the histogram is read as classic, a window finds
    no series of it and says so, and asking again finds it native: the next window reads it."""
    replica = Replica()
    replica.process.go_down()
    server = PrometheusServer(
        tmp_path / "prometheus",
        [replica.hostport],
        scrape_interval_s=INTERVAL_S,
        version="3.16",
        scrape_options=FORMS["native"],
    )
    producer = None
    try:
        server.start()
        client = client_for(PrometheusConfig(url=server.url))
        producer = PromQLProducer(client, queries(), scrape_interval_s=INTERVAL_S, recording_rules="off")
        producer.start()
        replica.process.come_up()
        server.wait_for_samples("vllm:generation_tokens_total", count=2)
        boundaries: list[float] = []
        with Traffic([replica.sim], seed=36, max_tokens=60) as traffic:
            for step in range(3):
                with traffic.quiet(after_s=SCRAPE_LAG_S):
                    time.sleep(QUIET_S)
                    boundaries.append(time.time())
                if step < 2:
                    time.sleep(TRAFFIC_S)
            traffic.stop()
            truth = [traffic.truth(a, b) for a, b in itertools.pairwise(boundaries)]
        server.wait_for_scrapes_after(boundaries[-1])
        read = []
        for step, (start, end) in enumerate(itertools.pairwise(boundaries)):
            metrics = metrics_of(producer.produce(window=StepWindow(step, start, end)))
            read.append({metric.name: metric for metric in metrics})
        assert TOKENS not in read[0]  # read as classic: no series (the record names it missing)
        points = {
            str((p.attributes or {}).get(STAT_ATTRIBUTE)): float(p.value)  # type: ignore[attr-defined]
            for p in read[1][TOKENS].data.data_points
        }
        assert points["count"] == truth[1].requests
        assert points["sum"] == truth[1].tokens
    finally:
        if producer is not None:
            producer.close()
        server.stop()
        replica.stop()


def test_prometheus_2_42_refuses_the_conversion(tmp_path: Path) -> None:
    """2.42 has no custom-bucket native histograms: it does not start with the key (what docs/compatibility.md says)."""
    server = PrometheusServer(tmp_path / "prometheus", ["127.0.0.1:9"], version="2.42", scrape_options=FORMS["native"])
    with pytest.raises(RuntimeError, match="convert_classic_histograms_to_nhcb"):
        server.start(timeout_s=10.0)
    server.stop()
