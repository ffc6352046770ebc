"""``otel_bridge.install()``: a :class:`~otel_bridge.Bridge` whose MeterProvider is the global OpenTelemetry one."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from otel_bridge.bridge import Bridge
from otel_bridge.config import BridgeConfig
from otel_bridge.errors import ConfigError


def install(
    config: str | Path | Mapping[str, Any] | BridgeConfig | None = None, *, handle_sigterm: bool = True
) -> Bridge:
    """Build a :class:`Bridge` and make its MeterProvider the global OpenTelemetry one.

    After this, ``opentelemetry.metrics.get_meter(...)`` anywhere in the trainer creates instruments that land in the
    per-step record (and, as configured under ``otel``, on a Prometheus ``/metrics`` endpoint and an OTLP collector)::

        bridge = otel_bridge.install("otel-bridge.yaml")

    Unless ``handle_sigterm=False``, SIGTERM then raises ``SystemExit(143)`` so the records of finished steps are
    delivered before exit (:meth:`Bridge.handle_sigterm`). Raises :class:`~otel_bridge.errors.ConfigError` when
    another global MeterProvider is already installed (OTel allows setting it once per process).
    """
    from opentelemetry import metrics

    bridge = Bridge.from_config(config)
    metrics.set_meter_provider(bridge.meter_provider)
    if metrics.get_meter_provider() is not bridge.meter_provider:
        bridge.close()
        raise ConfigError(
            "a global OpenTelemetry MeterProvider is already set in this process (OTel allows one): call "
            "otel_bridge.install() before anything else sets it, or add the bridge to that provider: "
            "Bridge.from_config(config, meter_provider=opentelemetry.metrics.get_meter_provider())"
        )
    if handle_sigterm:
        bridge.handle_sigterm()
    return bridge
