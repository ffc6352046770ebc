"""A :class:`PrometheusClient` built from the ``prometheus`` config section, its ``url: auto`` resolved."""

from __future__ import annotations

from otel_bridge.config import AUTO, PrometheusConfig
from otel_bridge.errors import ConfigError
from otel_bridge.prometheus.client import PrometheusClient


def connect(prom: PrometheusConfig, url: str | None = None) -> PrometheusClient:
    """A client for ``url``, default ``prom.url`` (discovered when ``auto``), with the section's auth, TLS and caps.

    Secrets are read from their environment variable or file now.
    """
    if url is None:
        if prom.url is None:
            raise ConfigError(
                "no Prometheus to ask: set prometheus.url (or 'auto' on a Ray cluster) or OTEL_BRIDGE_PROMETHEUS_URL"
            )
        if prom.url == AUTO:
            from otel_bridge.discovery import resolve_prometheus_url

            url = resolve_prometheus_url(AUTO, ray_port=prom.ray_port).url
        else:
            url = prom.url
    return PrometheusClient(prom, url)
