"""A :class:`PrometheusClient` built from the ``prometheus`` config section, its ``url: auto`` resolved."""

from __future__ import annotations

from otel_bridge.config import AUTO, PrometheusConfig
from otel_bridge.errors import ConfigError
from otel_bridge.http.credentials import tls_arguments
from otel_bridge.http.transport import TransportOptions
from otel_bridge.prometheus.client import PrometheusClient, check_credentials, normalise_url


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
    return client_for(prom, url)


def client_for(prom: PrometheusConfig, url: str | None = None, *, user_agent: str = "otel-bridge") -> PrometheusClient:
    """A client for ``url`` (default ``prom.url``, which must be a URL: ``auto`` is resolved by :func:`connect`) with
    the section's timeout, retries, caps, TLS and credentials; secrets are read from their environment variable or
    file now. The URL, the credentials and the TLS files are checked in that order: the first problem is the
    :class:`ConfigError`."""
    target = prom.url if url is None else url
    if target is None or target == AUTO:
        raise ConfigError(
            "no Prometheus URL to connect to: set prometheus.url to the Prometheus base URL (url: auto is "
            "resolved by otel_bridge.producers.promql._internal.connect.connect)"
        )
    target = normalise_url(target)
    return client_with(prom, target, transport_for(prom, target), user_agent=user_agent)


def transport_for(prom: PrometheusConfig, url: str) -> TransportOptions:
    """How requests to ``url`` go out by the section: its timeout, retries, body cap, TLS and credentials (read now,
    checked in that order; a WARNING when TLS verification is off)."""
    bearer_token = prom.auth.bearer_token()
    basic_auth = prom.auth.basic_auth()
    check_credentials(bearer_token, basic_auth)
    verify, cert = tls_arguments(prom.tls, "prometheus", f"Prometheus at {url}")
    return TransportOptions(
        timeout_s=prom.timeout_s,
        max_response_bytes=prom.max_response_bytes,
        retries=prom.retries,
        backoff_s=prom.backoff_s,
        verify=verify,
        cert=cert,
        bearer_token=bearer_token,
        basic_auth=basic_auth,
    )


def client_with(
    prom: PrometheusConfig, url: str, transport: TransportOptions, *, user_agent: str = "otel-bridge"
) -> PrometheusClient:
    """A client for ``url`` whose requests go out as ``transport`` says (:func:`transport_for`, made where the
    section was checked: a producer's child takes its parent's), with the section's caps."""
    return PrometheusClient(
        url,
        transport,
        max_series=prom.max_series,
        max_samples=prom.max_samples,
        post_threshold_bytes=prom.post_threshold_bytes,
        user_agent=user_agent,
    )
