"""Prometheus 3's OTLP receiver as the alternative to remote write: the trainer's OTLP metrics pushed straight to a
real Prometheus 3.16 (``--web.enable-otlp-receiver``, ``/api/v1/otlp/v1/metrics``), or through the built collector's
``otlp_http`` exporter, and read back per step by ``metrics[].otlp`` entries, under each translation strategy.

Two trainer ranks push ``trainer.tokens`` (a ``Counter`` of ``{token}``), ``trainer.step.duration`` (a ``Histogram``
in ``s``) and ``trainer.gpu.utilization`` (a ``Gauge`` of unit ``1``) every 0.25 s: rank 0 through the bridge's own
meter provider (``otel.otlp``), rank 1 through a meter provider built from the same pieces
(:func:`otel_bridge.pipeline.meter_provider.build_extra_readers`, :func:`~otel_bridge.pipeline.meter_provider.
build_resource`) with ``otel.rank: 1``. Prometheus' ``otlp:`` section sets the strategy and promotes the
``otel_bridge.rank`` resource attribute to a label (without it both ranks would write one series: the receiver makes
only ``job`` and ``instance`` of the resource, from ``service.name`` and ``service.instance.id``).

For each strategy of Prometheus 3.16's ``config/config.go`` (all four of otlptranslator v1.0.0's ``strategy.go``):

- the names Prometheus stores are exactly the ones written out in :data:`NAMES` (not computed by the module under
  test);
- entries with the same ``translation_strategy`` read, per step, both ranks' counter delta, histogram count and sum,
  and the busiest rank's gauge, exactly; the UTF-8 strategies' names reach the store quoted
  (``{"trainer.tokens_total"}``).

Each step is quiet for longer than the push interval around its changes, so the last push before a boundary holds the
state at the boundary (as in ``test_otlp_names_promql.py``).

On Prometheus 2.42 the documented behaviour: no OTLP receiver (404), and an entry with a UTF-8 strategy refused at
start-up with a :class:`ConfigError` naming ``metrics[i].otlp.translation_strategy``.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import requests
from opentelemetry.metrics import Meter
from opentelemetry.sdk.metrics import MeterProvider

from otel_bridge import Bridge
from otel_bridge.config.model import OTelConfig
from otel_bridge.errors import ConfigError
from otel_bridge.pipeline.meter_provider import build_extra_readers, build_resource
from tests.helpers.collector import CollectorProcess
from tests.helpers.http_servers import free_port
from tests.helpers.prometheus_server import PrometheusServer

pytestmark = [
    pytest.mark.integration,
    pytest.mark.sleeps(12, reason="QUIET_S of quiet (longer than the push interval) around each step's pushes"),
]

QUIET_S = 1.5
STEPS = 3
PUSH_INTERVAL_S = 0.25
BOUNDS = (0.1, 0.5, 1.0)

# strategy -> the names Prometheus 3.16 stores: (counter, histogram base, gauge).
NAMES: dict[str, tuple[str, str, str]] = {
    "UnderscoreEscapingWithSuffixes": (
        "trainer_tokens_total",
        "trainer_step_duration_seconds",
        "trainer_gpu_utilization_ratio",
    ),
    "UnderscoreEscapingWithoutSuffixes": ("trainer_tokens", "trainer_step_duration", "trainer_gpu_utilization"),
    "NoUTF8EscapingWithSuffixes": (
        "trainer.tokens_total",
        "trainer.step.duration_seconds",
        "trainer.gpu.utilization_ratio",
    ),
    "NoTranslation": ("trainer.tokens", "trainer.step.duration", "trainer.gpu.utilization"),
}
# strategy -> the label the promoted otel_bridge.rank resource attribute becomes.
RANK_LABEL = {
    "UnderscoreEscapingWithSuffixes": "otel_bridge_rank",
    "UnderscoreEscapingWithoutSuffixes": "otel_bridge_rank",
    "NoUTF8EscapingWithSuffixes": "otel_bridge.rank",
    "NoTranslation": "otel_bridge.rank",
}


def entries(strategy: str | None) -> list[dict[str, Any]]:
    """The ``metrics[].otlp`` entries of the trainer's three instruments, with ``strategy`` (``None``: unset)."""
    extra = {} if strategy is None else {"translation_strategy": strategy}
    return [
        {"otlp": {"name": "trainer.tokens", "unit": "{token}", "instrument": "counter", **extra}, "alias": "tokens"},
        {
            "otlp": {"name": "trainer.step.duration", "unit": "s", "instrument": "histogram", **extra},
            "stats": ["count", "sum"],
            "alias": "step_duration",
        },
        {
            "otlp": {"name": "trainer.gpu.utilization", "unit": "1", "instrument": "gauge", **extra},
            "stats": ["last"],
            "agg": "max",
            "alias": "busiest_gpu",
        },
    ]


def otlp_section(strategy: str) -> dict[str, Any]:
    """Prometheus' ``otlp:`` config section for ``strategy``, the rank promoted to a label."""
    return {"translation_strategy": strategy, "promote_resource_attributes": ["otel_bridge.rank"]}


class Rank:
    """One trainer rank's instruments on ``meter``."""

    def __init__(self, meter: Meter, rank: int) -> None:
        self.rank = rank
        self.tokens = meter.create_counter("trainer.tokens", unit="{token}")
        self.duration = meter.create_histogram(
            "trainer.step.duration", unit="s", explicit_bucket_boundaries_advisory=list(BOUNDS)
        )
        self.utilization = meter.create_gauge("trainer.gpu.utilization", unit="1")
        # The series exist before the first boundary, as after a warm-up step: an SDK histogram exports nothing before
        # its first observation, so the warm-up observes 0.0 (count 1, sum 0) before step 0.
        self.tokens.add(0)
        self.utilization.set(0.0)
        self.duration.record(0.0)

    def step(self, step: int) -> None:
        """This rank's work of one step, all at once."""
        if self.rank == 0:
            self.tokens.add(100 * (step + 1))
            self.utilization.set(0.5 + 0.1 * step)
            self.duration.record(0.3)
        else:
            self.tokens.add(50 * (step + 1))
            self.utilization.set(0.25)
            self.duration.record(0.05)
            self.duration.record(0.8)


def other_rank(endpoint: str, run_name: str) -> MeterProvider:
    """Rank 1: a meter provider built from the bridge's own pieces, pushing to ``endpoint`` every PUSH_INTERVAL_S."""
    config = OTelConfig.model_validate(
        {"rank": 1, "otlp": {"enabled": True, "endpoint": endpoint, "interval_s": PUSH_INTERVAL_S, "traces": False}}
    )
    extra = build_extra_readers(config, environ={})
    return MeterProvider(resource=build_resource(config, run_name, environ={}), metric_readers=extra.readers)


def wait_for(prometheus: PrometheusServer, expr: str, timeout_s: float = 30.0) -> None:
    """Until ``expr`` has a result (the trainer's pushes arrived)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if prometheus.query(expr):
            return
        time.sleep(0.1)
    raise AssertionError(f"nothing for {expr} after {timeout_s}s: {prometheus.log_tail()}")


def stored_names(prometheus: PrometheusServer) -> set[str]:
    """The trainer's metric names Prometheus holds."""
    result = prometheus.query('group by (__name__) ({__name__=~"trainer.+"})')
    return {series["metric"]["__name__"] for series in result}


def run_trainer(
    tmp_path: Path,
    endpoint: str,
    prometheus: PrometheusServer,
    metrics: list[dict[str, Any]],
    names: tuple[str, str, str],
) -> list[dict[str, Any]]:
    """Both ranks push to ``endpoint`` while the bridge (rank 0) reads ``metrics`` from ``prometheus`` per step; the
    records it wrote."""
    run_name = f"otlp-receiver-{tmp_path.name}"
    config: dict[str, Any] = {
        "prometheus": {"url": prometheus.url, "scrape_interval_s": 1.0},
        "metrics": metrics,
        "otel": {
            "rank": 0,
            "otlp": {"enabled": True, "endpoint": endpoint, "interval_s": PUSH_INTERVAL_S, "traces": False},
        },
        "trackers": [{"type": "jsonl"}],
        "run": {"name": run_name, "dir": str(tmp_path / "runs")},
    }
    with ExitStack() as stack:
        provider = other_rank(endpoint, run_name)
        stack.callback(provider.shutdown)
        bridge = Bridge.from_config(config)
        stack.callback(bridge.close)
        ranks = [Rank(bridge.meter("trainer"), 0), Rank(provider.get_meter("trainer"), 1)]
        for name in (names[0], f"{names[1]}_count", names[2]):  # both ranks' series, each pushed at least twice
            wait_for(prometheus, f'count(count_over_time({{__name__="{name}"}}[1m]) >= 2) == 2')
        for step in range(STEPS):
            with bridge.step(step):
                time.sleep(QUIET_S)
                for rank in ranks:
                    rank.step(step)
                time.sleep(QUIET_S)
        bridge.close()
        return [json.loads(line) for line in (bridge.run_dir / "metrics.jsonl").read_text().splitlines()]
    raise AssertionError("unreachable")  # for mypy: the with block returns or raises


def check_records(records: list[dict[str, Any]]) -> None:
    """Every step: both ranks' token delta, histogram count and sum; the busiest rank's gauge; nothing missing."""
    assert [record["step"] for record in records] == list(range(STEPS))
    for step, record in enumerate(records):
        assert record["rollout/tokens/delta"] == pytest.approx(150 * (step + 1)), record
        assert record["rollout/step_duration/count"] == pytest.approx(3), record
        assert record["rollout/step_duration/sum"] == pytest.approx(1.15), record
        assert record["rollout/busiest_gpu/last"] == pytest.approx(0.5 + 0.1 * step), record
        assert record["otel_bridge/missing_metrics"] == 0, record


def expected_names(strategy: str) -> set[str]:
    counter, histogram, gauge = NAMES[strategy]
    return {counter, gauge, *(f"{histogram}_{suffix}" for suffix in ("bucket", "sum", "count"))}


@pytest.mark.parametrize("strategy", list(NAMES))
def test_trainer_pushes_straight_to_prometheus(strategy: str, tmp_path: Path) -> None:
    """The trainer's OTLP exporter pointed at Prometheus' receiver; entries with the store's strategy read it."""
    with PrometheusServer(
        tmp_path / "prometheus", version="3.16", otlp_receiver=True, otlp=otlp_section(strategy)
    ) as prometheus:
        records = run_trainer(
            tmp_path, f"{prometheus.url}/api/v1/otlp/v1/metrics", prometheus, entries(strategy), NAMES[strategy]
        )
        assert stored_names(prometheus) == expected_names(strategy)
        label = RANK_LABEL[strategy]
        ranks = prometheus.query(f'count by ("{label}") ({{__name__="{NAMES[strategy][0]}"}})')
        assert sorted(series["metric"][label] for series in ranks) == ["0", "1"]
    check_records(records)


def collector_config(ports: dict[str, int], prometheus_url: str) -> dict[str, Any]:
    """A collector taking OTLP/HTTP and forwarding it with ``otlp_http`` to Prometheus' OTLP receiver, the exporter
    as docs/opentelemetry.md shows it."""
    return {
        "receivers": {"otlp": {"protocols": {"http": {"endpoint": f"127.0.0.1:{ports['http']}"}}}},
        "processors": {"batch": {"timeout": "200ms"}},
        "exporters": {"otlp_http/prometheus": {"metrics_endpoint": f"{prometheus_url}/api/v1/otlp/v1/metrics"}},
        "extensions": {"health_check": {"endpoint": f"127.0.0.1:{ports['health']}"}},
        "service": {
            "extensions": ["health_check"],
            "telemetry": {"metrics": {"level": "none"}},
            "pipelines": {
                "metrics": {"receivers": ["otlp"], "processors": ["batch"], "exporters": ["otlp_http/prometheus"]}
            },
        },
    }


def test_through_the_collectors_otlp_http_exporter(tmp_path: Path) -> None:
    """The trainer pushes to the collector (the built distribution), whose ``otlp_http`` exporter writes into
    Prometheus' OTLP receiver under ``NoUTF8EscapingWithSuffixes``; the entries read the dotted names per step, and the
    collector logs nothing above info."""
    strategy = "NoUTF8EscapingWithSuffixes"
    with ExitStack() as stack:
        prometheus = stack.enter_context(
            PrometheusServer(tmp_path / "prometheus", version="3.16", otlp_receiver=True, otlp=otlp_section(strategy))
        )
        ports = {"http": free_port(), "health": free_port()}
        env = {"HOME": os.environ.get("HOME", "/")}
        collector = CollectorProcess(
            tmp_path / "otelcol", collector_config(ports, prometheus.url), env, ports["health"]
        )
        stack.callback(collector.stop)
        collector.start()
        endpoint = f"http://127.0.0.1:{ports['http']}/v1/metrics"
        records = run_trainer(tmp_path, endpoint, prometheus, entries(strategy), NAMES[strategy])
        assert stored_names(prometheus) == expected_names(strategy)
        collector.stop()
        assert collector.log_problems() == []
    check_records(records)


def test_prometheus2_has_no_otlp_receiver_and_refuses_utf8_entries(tmp_path: Path) -> None:
    """Prometheus 2.42 answers the receiver's path with 404, and the bridge refuses, at start-up, an entry whose
    strategy keeps dots, saying which keys to change; the escaping strategies' entries start."""
    with PrometheusServer(tmp_path / "prometheus", version="2.42") as prometheus:
        answer = requests.post(
            f"{prometheus.url}/api/v1/otlp/v1/metrics",
            data=b"",
            headers={"Content-Type": "application/x-protobuf"},
            timeout=10,
        )
        assert answer.status_code == 404, answer.text
        config: dict[str, Any] = {
            "prometheus": {"url": prometheus.url, "scrape_interval_s": 1.0},
            "trackers": [{"type": "jsonl"}],
            "run": {"name": "otlp-on-2", "dir": str(tmp_path / "runs")},
        }
        for strategy in ("NoUTF8EscapingWithSuffixes", "NoTranslation"):
            with pytest.raises(ConfigError) as refused:
                Bridge.from_config({**config, "metrics": entries(strategy)}).close()
            message = str(refused.value)
            assert "metrics[0].otlp.translation_strategy" in message, message
            for part in (
                NAMES[strategy][0],
                "Prometheus 2.42",
                "UnderscoreEscapingWithSuffixes",
                "otlp: translation_strategy",
            ):
                assert part in message, message
        Bridge.from_config({**config, "metrics": entries("UnderscoreEscapingWithSuffixes")}).close()
