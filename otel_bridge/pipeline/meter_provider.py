"""The bridge's MeterProvider and its extra readers: a Prometheus ``/metrics`` endpoint and OTLP/HTTP push.

The readers go on a MeterProvider of the bridge's own, or on the user's (``Bridge.from_config(...,
meter_provider=provider)``: an application that already configured OpenTelemetry keeps its provider and its readers).

The extra readers expose the same instruments that land in the per-step tracker record, so Grafana and the tracker see
the same numbers. The Prometheus endpoint uses its own ``CollectorRegistry`` (nothing else of the process leaks into
it) and binds 127.0.0.1 unless configured otherwise.
The OTLP exporter honours the standard ``OTEL_EXPORTER_OTLP_*`` variables.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.resources import Resource

from otel_bridge.config import OTelConfig
from otel_bridge.errors import ConfigError, install_hint
from otel_bridge.health import Health
from otel_bridge.schema import HEALTH_SCOPE

_log = logging.getLogger(__name__)

OTLP_ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


@dataclass
class ExtraReaders:
    """Readers to add to the MeterProvider, and what must be stopped when the bridge closes."""

    readers: list[MetricReader] = field(default_factory=list)
    metrics_url: str | None = None
    _server: Any = None
    _thread: threading.Thread | None = None

    def close(self) -> None:
        """Stop the ``/metrics`` HTTP server (the readers themselves shut down with the MeterProvider)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


def build_resource(config: OTelConfig, run_name: str, environ: Mapping[str, str] | None = None) -> Resource:
    """``service.name``, run id and rank from config, then env (``OTEL_SERVICE_NAME``, ``RANK``), then defaults.

    ``OTEL_RESOURCE_ATTRIBUTES`` is merged in by the SDK.
    """
    environ = os.environ if environ is None else environ
    attributes: dict[str, str | int] = {
        "service.name": config.service_name or environ.get("OTEL_SERVICE_NAME") or "otel-bridge-trainer",
        "otel_bridge.run": config.run_id or run_name,
    }
    rank = config.rank if config.rank is not None else environ.get("RANK")
    if rank is not None:
        try:
            attributes["otel_bridge.rank"] = int(rank)
        except ValueError:
            raise ConfigError(f"the rank must be an integer: otel.rank / $RANK is {rank!r}") from None
    attributes.update(config.resource_attributes)
    return Resource.create(attributes)


def build_extra_readers(config: OTelConfig, environ: Mapping[str, str] | None = None) -> ExtraReaders:
    """The Prometheus endpoint reader and the OTLP push reader, as configured."""
    environ = os.environ if environ is None else environ
    extra = ExtraReaders()
    try:
        if config.prometheus.enabled:
            _add_prometheus(extra, config)
        if config.otlp.enabled:
            extra.readers.append(_otlp_reader(config, environ))
    except BaseException:
        extra.close()
        raise
    return extra


def _add_prometheus(extra: ExtraReaders, config: OTelConfig) -> None:
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry, start_http_server

    endpoint = config.prometheus
    registry = CollectorRegistry(auto_describe=True)
    extra.readers.append(PrometheusMetricReader(registry=registry))
    try:
        server, thread = start_http_server(endpoint.port, addr=endpoint.host, registry=registry)
    except OSError as exc:
        raise ConfigError(
            f"cannot serve /metrics on {endpoint.host}:{endpoint.port}: {exc.strerror}; "
            "choose another otel.prometheus.port (0 picks a free one)"
        ) from None
    extra._server, extra._thread = server, thread
    host, port = str(server.server_address[0]), int(server.server_address[1])
    shown = f"[{host}]" if ":" in host else host
    extra.metrics_url = f"http://{shown}:{port}/metrics"
    _log.info("otel-bridge: trainer metrics exposed at %s", extra.metrics_url)


def _otlp_reader(config: OTelConfig, environ: Mapping[str, str]) -> MetricReader:
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    except ImportError:
        raise ConfigError(f"otel.otlp needs the extra: {install_hint('otlp')}") from None
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    otlp = config.otlp
    if otlp.endpoint is None and not any(environ.get(var) for var in OTLP_ENDPOINT_VARS):
        raise ConfigError(
            "otel.otlp is enabled but no collector endpoint is known: set otel.otlp.endpoint "
            "(e.g. http://otel-collector:4318/v1/metrics) or OTEL_EXPORTER_OTLP_ENDPOINT"
        )
    exporter = OTLPMetricExporter(endpoint=otlp.endpoint, timeout=otlp.timeout_s)
    return PeriodicExportingMetricReader(
        exporter, export_interval_millis=otlp.interval_s * 1000, export_timeout_millis=otlp.timeout_s * 1000
    )


@dataclass
class ProviderLink:
    """The MeterProvider the bridge's readers are registered on: its own (``owned``), or the user's."""

    provider: MeterProvider
    readers: list[MetricReader]
    owned: bool

    def shutdown(self) -> None:
        """Shut the bridge's own provider down; take the bridge's readers off a user's provider (each is shut down)."""
        if self.owned:
            self.provider.shutdown()
            return
        for reader in self.readers:
            self.provider.remove_metric_reader(reader)


def check_meter_provider(meter_provider: object) -> None:
    """Raise :class:`ConfigError` unless ``meter_provider`` is ``None`` or an SDK MeterProvider (one that takes
    readers): checked before anything is started."""
    if meter_provider is not None and not isinstance(meter_provider, MeterProvider):
        raise ConfigError(
            f"meter_provider must be an OpenTelemetry SDK MeterProvider (opentelemetry.sdk.metrics.MeterProvider), "
            f"got {type(meter_provider).__name__}: only an SDK provider takes the bridge's step reader"
        )


def attach_readers(
    readers: list[MetricReader], resource: Resource, health: Health, meter_provider: MeterProvider | None = None
) -> ProviderLink:
    """Register ``readers`` on ``meter_provider`` (the user's, already configured with their own readers), or on a new
    MeterProvider with ``resource``; then expose ``health`` as instruments of that provider's ``otel_bridge.health``
    meter.
    """
    check_meter_provider(meter_provider)
    if meter_provider is None:
        link = ProviderLink(MeterProvider(metric_readers=readers, resource=resource), readers, owned=True)
    else:
        for reader in readers:
            meter_provider.add_metric_reader(reader)
        link = ProviderLink(meter_provider, readers, owned=False)
    health.bind(link.provider.get_meter(HEALTH_SCOPE))
    return link
