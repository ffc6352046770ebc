"""The Prometheus names the collector gives OpenTelemetry instruments (otel_bridge/prometheus_names.py).

The expected names come from the translators' own test tables, never from this module:

- ``metric_namer_test.go`` of github.com/prometheus/otlptranslator at v1.0.0 (``TestMetricNamer_Build``, the
  ``UTF8Allowed: false, WithMetricSuffixes: true`` rows): the namer the collector v0.165's prometheus_remote_write
  exporter calls (contrib v0.165.1 requires otlptranslator v1.0.0; v0.136.0's required v0.0.2, whose
  ``metric_namer.go`` and ``unit_namer.go`` name the same);
- ``pkg/translator/prometheus/normalize_name_test.go`` of open-telemetry/opentelemetry-collector-contrib (``TestByte``
  to ``TestOtelReceivers``, ``TestNamespace``, ``TestBuildPromCompliantNameWithNormalize``): the contrib translator
  otlptranslator was copied from, rows whose behaviour otlptranslator kept (it no longer splits at ``:`` and has no
  ``$`` unit, so ``:foo::bar`` and ``$`` rows are left out).

Without suffixes (an exporter with ``add_metric_suffixes: false``, or the ``prometheus`` exporter's
``translation_strategy: UnderscoreEscapingWithoutSuffixes``) the rows are those of the ``UTF8Allowed = false,
WithMetricSuffixes = false`` block of otlptranslator's ``metric_namer_test.go`` (commit 12673747) and of contrib's
``TestBuildCompliantNameWithoutSuffixes`` (``pkg/translator/prometheus/normalize_name_test.go``, commit 1ba49ba8; the
same rows as ``TestBuildCompliantMetricNameWithoutSuffixes`` in its later versions).
"""

from __future__ import annotations

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import Gauge, Histogram, InMemoryMetricReader, Sum

from otel_bridge.prometheus_names import (
    INSTRUMENT_KINDS,
    Instrument,
    metric_kind,
    prometheus_name,
    prometheus_series,
)

# (name, unit, instrument, expected)
ROWS: list[tuple[str, str, Instrument, str]] = [
    # otlptranslator v1.0.0 metric_namer_test.go
    ("requests", "", "counter", "requests_total"),
    ("cpu_usage", "1", "gauge", "cpu_usage_ratio"),
    ("items", "1", "counter", "items_total"),
    ("response_time", "ms", "gauge", "response_time_milliseconds"),
    ("memory_usage", "By", "gauge", "memory_usage_bytes"),
    ("requests", "1/s", "gauge", "requests_per_second"),
    ("throughput", "By/s", "gauge", "throughput_bytes_per_second"),
    ("custom_metric", "custom_unit", "gauge", "custom_metric_custom_unit"),
    ("custom_metric", "{custom}", "gauge", "custom_metric"),
    ("custom_metric", "By/{custom}", "gauge", "custom_metric_bytes"),
    ("requests_total", "", "counter", "requests_total"),
    ("cpu_usage_ratio", "1", "gauge", "cpu_usage_ratio"),
    ("response_time_seconds", "s", "gauge", "response_time_seconds"),
    ("custom_metric", "unit@with#special/chars", "gauge", "custom_metric_unit_with_special_per_chars"),
    ("active_connections", "", "up_down_counter", "active_connections"),
    ("uptime", "d", "gauge", "uptime_days"),
    ("duration", "h", "gauge", "duration_hours"),
    ("timeout", "min", "gauge", "timeout_minutes"),
    ("latency", "us", "gauge", "latency_microseconds"),
    ("precision_time", "ns", "gauge", "precision_time_nanoseconds"),
    # contrib pkg/translator/prometheus/normalize_name_test.go
    ("system.filesystem.usage", "By", "gauge", "system_filesystem_usage_bytes"),
    ("system.io", "By", "counter", "system_io_bytes_total"),
    ("network_transmitted_bytes_total", "By", "counter", "network_transmitted_bytes_total"),
    ("\t system.filesystem.usage       ", "  By\t", "gauge", "system_filesystem_usage_bytes"),
    ("system.network.dropped", "{packets}", "gauge", "system_network_dropped"),
    ("system.network.dropped", "{packets}", "counter", "system_network_dropped_total"),
    ("system.network.dropped", "packets", "gauge", "system_network_dropped_packets"),
    ("system.network.packets.dropped", "packets", "gauge", "system_network_packets_dropped"),
    ("system.network.packets", "packets", "counter", "system_network_packets_total"),
    ("hw.gpu.memory.utilization", "1", "gauge", "hw_gpu_memory_utilization_ratio"),
    ("hw.fan.speed_ratio", "1", "gauge", "hw_fan_speed_ratio"),
    ("objects", "1", "counter", "objects_total"),
    ("hw.cpu.speed_limit", "Hz", "gauge", "hw_cpu_speed_limit_hertz"),
    ("broken.metric.speed", "km/h", "gauge", "broken_metric_speed_km_per_hour"),
    ("astro.light.speed_limit", "m/s", "gauge", "astro_light_speed_limit_meters_per_second"),
    ("broken.metric.success_ratio", "%", "gauge", "broken_metric_success_ratio_percent"),
    ("test.metric.spaces", "   \t  ", "gauge", "test_metric_spaces"),
    ("unsupported.metric.temperature", "°F", "gauge", "unsupported_metric_temperature_F"),
    ("unsupported.metric.redundant", "__test $/°C", "gauge", "unsupported_metric_redundant_test_per_C"),
    ("system.disk.operation_time", "s", "counter", "system_disk_operation_time_seconds_total"),
    ("system.cpu.load_average.15m", "1", "gauge", "system_cpu_load_average_15m_ratio"),
    ("mongodbatlas.process.oplog.rate", "GiBy/h", "gauge", "mongodbatlas_process_oplog_rate_gibibytes_per_hour"),
    ("nsxt.node.memory.usage", "KBy", "gauge", "nsxt_node_memory_usage_kilobytes"),
    ("redis.latest_fork", "us", "gauge", "redis_latest_fork_microseconds"),
    ("3.14 digits", "", "gauge", "_3_14_digits"),
    ("envoy__rule_engine_zlib_buf_error", "", "gauge", "envoy_rule_engine_zlib_buf_error"),
]


@pytest.mark.parametrize(("name", "unit", "instrument", "expected"), ROWS)
def test_translator_tables(name: str, unit: str, instrument: Instrument, expected: str) -> None:
    assert prometheus_name(name, unit, instrument) == expected


def test_translator_tables_long_rows() -> None:
    # otlptranslator "metric with multiple underscores normalized"; contrib TestOtelReceivers
    name, unit = "metric__with__multiple__underscores", "unit__multiple__underscores"
    assert prometheus_name(name, unit, "gauge") == "metric_with_multiple_underscores_unit_multiple_underscores"
    rate = prometheus_name("active_directory.ds.replication.object.rate", "{objects}/s", "gauge")
    assert rate == "active_directory_ds_replication_object_rate_per_second"
    name = "mongodbatlas.process.db.query_targeting.scanned_per_returned"
    assert prometheus_name(name, "{scanned}/{returned}", "gauge") == name.replace(".", "_")


def test_translator_tables_with_a_namespace() -> None:
    # contrib TestNamespace, TestBuildPromCompliantNameWithNormalize; otlptranslator "metric with namespace and
    # suffixes", "metric starting with digit with namespace and suffixes"
    assert prometheus_name("#test", "", "gauge", "space") == "space_test"
    assert prometheus_name("network.io", "By", "counter", "system") == "system_network_io_bytes_total"
    assert prometheus_name("requests", "1/s", "counter", "app") == "app_requests_per_second_total"
    assert prometheus_name("123_requests", "", "counter", "app") == "app_123_requests_total"


# (name, unit, instrument, namespace, expected) without suffixes: no unit, no _total, no _ratio, and runs of "_" kept
ROWS_WITHOUT_SUFFIXES: list[tuple[str, str, Instrument, str, str]] = [
    # otlptranslator metric_namer_test.go, UTF8Allowed = false, WithMetricSuffixes = false
    ("simple_metric", "", "gauge", "", "simple_metric"),
    ("metric@with#special$chars", "", "gauge", "", "metric_with_special_chars"),
    ("123metric", "", "gauge", "", "_123metric"),
    ("simple_metric", "", "gauge", "test_namespace", "test_namespace_simple_metric"),
    ("metric@@##$$name", "", "gauge", "", "metric_name"),
    # contrib normalize_name_test.go TestBuildCompliantNameWithoutSuffixes / ...MetricNameWithoutSuffixes
    ("system.io", "By", "counter", "", "system_io"),
    ("network.io", "By", "counter", "system", "system_network_io"),
    ("network (I/O)", "By", "counter", "system", "system_network_I_O"),
    ("3.14 digits", "By", "gauge", "", "_3_14_digits"),
    ("envoy__rule_engine_zlib_buf_error", "", "gauge", "", "envoy__rule_engine_zlib_buf_error"),
    (":foo::bar", "", "gauge", "", ":foo::bar"),
    (":foo::bar", "", "counter", "", ":foo::bar"),
    ("foo.bar", "1", "gauge", "", "foo_bar"),
    ("system.io", "foo/bar", "counter", "", "system_io"),
    ("metric_with_字符_foreign_characters", "", "counter", "", "metric_with___foreign_characters"),
]


@pytest.mark.parametrize(("name", "unit", "instrument", "namespace", "expected"), ROWS_WITHOUT_SUFFIXES)
def test_translator_tables_without_suffixes(
    name: str, unit: str, instrument: Instrument, namespace: str, expected: str
) -> None:
    assert prometheus_name(name, unit, instrument, namespace, suffixes=False) == expected


def test_without_suffixes_a_histogram_is_still_three_series() -> None:
    # the _bucket/_sum/_count series names are Prometheus' histogram layout, not a metric-name suffix: the exporter
    # appends them to the namer's name whatever add_metric_suffixes says
    assert prometheus_series("trainer.step.duration", "s", "histogram", suffixes=False) == (
        "trainer_step_duration_bucket",
        "trainer_step_duration_sum",
        "trainer_step_duration_count",
    )
    assert prometheus_series("trainer.tokens", "{token}", "counter", suffixes=False) == ("trainer_tokens",)


@pytest.mark.parametrize("name", ["", "@#$%", "___"])
def test_without_suffixes_a_name_without_letters_or_digits_is_refused(name: str) -> None:
    # otlptranslator rows "empty metric name without suffixes", "metric name with only special characters": no name
    with pytest.raises(ValueError, match="cannot translate"):
        prometheus_name(name, "", "gauge", suffixes=False)


@pytest.mark.parametrize("name", ["", "@#$%", "..."])
def test_a_name_without_letters_or_digits_is_refused(name: str) -> None:
    # otlptranslator: "normalization for metric ... resulted in empty name"; the exporter drops such a metric
    with pytest.raises(ValueError, match="cannot translate"):
        prometheus_name(name, "", "gauge")


def test_a_histogram_is_three_series() -> None:
    assert prometheus_series("trainer.step.duration", "s", "histogram") == (
        "trainer_step_duration_seconds_bucket",
        "trainer_step_duration_seconds_sum",
        "trainer_step_duration_seconds_count",
    )
    assert prometheus_series("trainer.tokens", "{token}", "counter") == ("trainer_tokens_total",)


def test_unknown_instrument_is_refused() -> None:
    with pytest.raises(ValueError, match="instrument must be one of counter, up_down_counter, gauge, histogram"):
        prometheus_name("x", "", "sum")  # type: ignore[arg-type]


def test_instrument_kinds_map_to_what_the_bridge_reads() -> None:
    assert {kind: metric_kind(kind) for kind in INSTRUMENT_KINDS} == {
        "counter": "counter",
        "up_down_counter": "gauge",
        "gauge": "gauge",
        "histogram": "histogram",
    }


def _collector_instrument(data: object, is_monotonic: bool) -> Instrument:
    """The kind the collector sees in an OTLP data point (what otlptranslator's MetricType is built from)."""
    if isinstance(data, Sum):
        return "counter" if is_monotonic else "up_down_counter"
    if isinstance(data, Histogram):
        return "histogram"
    assert isinstance(data, Gauge)
    return "gauge"


def test_the_python_sdk_sends_name_unit_and_kind_as_created() -> None:
    """What a trainer's instruments look like on the wire: the SDK keeps name and unit, a Counter is a monotonic Sum,
    an UpDownCounter a non-monotonic one, a Histogram a Histogram, a Gauge a Gauge."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    try:
        meter = provider.get_meter("trainer")
        meter.create_counter("trainer.tokens", unit="{token}").add(5)
        meter.create_up_down_counter("trainer.rollouts.in_flight", unit="{rollout}").add(2)
        meter.create_histogram("trainer.step.duration", unit="s").record(0.3)
        meter.create_gauge("trainer.gpu.utilization", unit="1").set(0.5)
        data = reader.get_metrics_data()
    finally:
        provider.shutdown()
    assert data is not None
    sent = {
        metric.name: prometheus_name(
            metric.name,
            metric.unit or "",
            _collector_instrument(metric.data, getattr(metric.data, "is_monotonic", False)),
        )
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    assert sent == {
        "trainer.tokens": "trainer_tokens_total",
        "trainer.rollouts.in_flight": "trainer_rollouts_in_flight",
        "trainer.step.duration": "trainer_step_duration_seconds",
        "trainer.gpu.utilization": "trainer_gpu_utilization_ratio",
    }
