"""The bridge's one HTTP transport: whole-request attempt deadlines, body caps, TLS and credentials that never show.

The PromQL client (:mod:`otel_bridge.prometheus.client`) and the scrape endpoints
(:class:`otel_bridge.producers.scrape.MetricsEndpoint`) both send their requests through :class:`~.transport.Transport`:

- :mod:`otel_bridge.http.transport`: :class:`~.transport.Transport`, retries, the body cap, failures as reasons;
- :mod:`otel_bridge.http.attempt_deadline`: a deadline over each whole attempt (connect to last body byte);
- :mod:`otel_bridge.http.credentials`: TLS settings and credentials as the transport uses them.
"""

from otel_bridge.http.credentials import secret_forms, tls_arguments
from otel_bridge.http.transport import Answer, Transport, TransportError, TransportOptions

__all__ = ["Answer", "Transport", "TransportError", "TransportOptions", "secret_forms", "tls_arguments"]
