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

    if _global_provider_is_set():  # refuse before anything starts: no tracker run, no OTel override warning
        raise _already_set()
    bridge = Bridge.from_config(config)
    metrics.set_meter_provider(bridge.meter_provider)
    if metrics.get_meter_provider() is not bridge.meter_provider:  # another thread set one meanwhile
        bridge.close()
        raise _already_set()
    if handle_sigterm:
        bridge.handle_sigterm()
    return bridge


def _global_provider_is_set() -> bool:
    """Whether a global MeterProvider is set (or named by ``OTEL_PYTHON_METER_PROVIDER``, which loads it now).

    OpenTelemetry has no public way to ask: until one is set, ``get_meter_provider()`` returns its proxy provider.
    When that class cannot be found (another API version), the check after ``set_meter_provider`` still refuses.
    """
    from opentelemetry import metrics

    try:
        from opentelemetry.metrics._internal import _ProxyMeterProvider
    except ImportError:  # pragma: no cover - depends on the installed opentelemetry-api
        return False
    return not isinstance(metrics.get_meter_provider(), _ProxyMeterProvider)


def _already_set() -> ConfigError:
    return ConfigError(
        "a global OpenTelemetry MeterProvider is already set in this process (OTel allows one): call "
        "otel_bridge.install() before anything else sets it, or add the bridge to that provider: "
        "Bridge.from_config(config, meter_provider=opentelemetry.metrics.get_meter_provider())"
    )
