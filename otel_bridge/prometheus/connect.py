"""A :class:`PrometheusClient` built from the ``prometheus`` config section (URL discovery, auth, TLS, caps)."""

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
    tls = prom.tls
    return PrometheusClient(
        url,
        timeout_s=prom.timeout_s,
        retries=prom.retries,
        backoff_s=prom.backoff_s,
        bearer_token=prom.auth.bearer_token(),
        basic_auth=prom.auth.basic_auth(),
        verify=tls.verify,
        ca_file=str(tls.ca_file) if tls.ca_file else None,
        cert_file=str(tls.cert_file) if tls.cert_file else None,
        key_file=str(tls.key_file) if tls.key_file else None,
        max_response_bytes=prom.max_response_bytes,
        max_series=prom.max_series,
        post_threshold_bytes=prom.post_threshold_bytes,
    )
